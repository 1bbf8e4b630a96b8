"""``transfer-gate baseline``: accept the transfers regions have today; store their step times.

Two parts, re-recorded together or apart: the accepted transfers (``--transfers-only``) and
each region's timing with its machine (``--timing-only``). Accepting a new transfer is never
the side effect of recording a timing: ``--timing-only`` keeps the file's transfers as they
are and lists each it did not accept; every transfer a run accepts that the file did not is
listed, at its ``file:line``.

A timing is stored only once it is tight enough to bound the comparisons a later run makes
with it (`gate.compare.baseline_noise`): a region whose samples are too spread is timed
again, up to `MORE_TIMINGS` times, its samples pooled; where that does not tighten them, one
line says the baseline is noisy and how to re-record it, and the file records it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec

from gate.cli.errors import UsageError
from gate.cli.execute import Selection, baseline_for, execute, shown
from gate.cli.exit_codes import ExitCode
from gate.cli.run import colour
from gate.compare.baseline_noise import fewest_samples, noise
from gate.compare.stored_baseline import planned_regions, timing_command
from gate.plan import Plan
from gate.policy.model import Region
from gate.printable import say
from gate.region.step_times import summarize
from gate.report.live import LiveOutput
from gate.report.terminal import format_summary
from gate.report.write import check_writable
from gate.results.baseline import accept_command, rebaselined, uncovered
from gate.results.baseline_file import BaselineError, StoredBaseline, load_baseline, write_baseline
from gate.results.records import RegionResult, RunResult
from gate.results.timing_baseline import StoredTiming, TimingNoise, retimed
from gate.text import counted

# How many more times a region whose step times are too noisy is timed, its samples pooled.
MORE_TIMINGS = 2


def baseline_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the baseline file; refuses (nothing written) when a region errored."""
    path, _ = baseline_for(args.baseline, args.paths, repo_root)
    check_writable(path, "--baseline", repo_root)
    where = shown(path, repo_root)
    partial = bool(args.region or args.timing_only or args.transfers_only)
    existing = _existing(path, where, partial=partial)
    selection = Selection.from_args(args)
    rules: dict[str, Region] = {}
    result = _executed(selection, repo_root, rules)
    errored = [r for r in result.regions if r.error is not None]
    if errored:
        say(format_summary(result))
        raise UsageError(
            f"{counted(len(errored), 'region')} errored, so their transfers are unknown; "
            "fix them and run `transfer-gate baseline` again (the baseline was not written)"
        )
    command = accept_command(args.paths, where)
    ran = {r.classname for r in result.regions}
    # What the run makes that the file does not accept: accepted now, or (--timing-only) listed
    # as not accepted, each with the command that would.
    added = uncovered(result, existing.accepted, "the baseline file")
    accepted = existing.accepted
    timing = existing.timing
    parts = []
    if not args.timing_only:
        entries, kept = rebaselined(result, existing.accepted)
        accepted = (*kept, *entries)
        parts.append(
            f"{counted(len(entries), 'accepted transfer line')} in "
            f"{len({e.region for e in entries})} of {counted(len(ran), 'region')} run"
            + (f", {len(kept)} kept for other regions" if kept else "")
        )
    noisy: dict[str, TimingNoise] = {}
    if not args.transfers_only:
        result, noisy = _timed_until_tight(selection, repo_root, result, rules)
        timing = _marked(retimed(result, existing.timing), noisy)
        timed = sum(1 for r in result.regions if r.classname in timing and r.timing_samples)
        parts.append(f"step times of {counted(timed, 'region')}")
    write_baseline(path, accepted, timing)
    kept_part = " (transfers as they were)" if args.timing_only else ""
    kept_part = " (step times as they were)" if args.transfers_only else kept_part
    say(f"baseline: {where}: {', '.join(parts)}{kept_part}")
    if args.timing_only:
        for line in added:
            say(f"  not accepted (--timing-only): {line}")
        if added:
            say(f"  to accept them: `{command} --transfers-only` (with --region to pick)")
    else:
        for line in added:
            say(f"  accepted: {line}")
    for region in (r for r in result.regions if r.classname in noisy):
        found = noisy[region.classname]
        fix = (
            "raise the region's repeats and re-record them"
            if found.low is None
            else ("re-record them on a quieter machine")
        )
        say(
            f"  warning: {region.classname}: step times noisy, {found.describe()}; a run "
            f"against them says so; {fix} with `{timing_command(command, region)}`"
        )
    if existing.no_timing is not None and args.transfers_only and not existing.timing:
        say(f"  timing: {existing.no_timing}; record it with `{command} --timing-only`")
    return ExitCode.OK


def _executed(selection: Selection, repo_root: Path, rules: dict[str, Region]) -> RunResult:
    """``selection`` run with `run`'s live output but the rows (the running region in place,
    a GitHub group per region); ``rules`` gets each planned region's policy."""
    live = LiveOutput.for_stream(
        sys.stderr, os.environ, color=colour("auto", sys.stderr), rows=False
    )

    def planned(plan: Plan) -> None:
        found = planned_regions(plan)
        rules.update(found)
        live.total = len(found)

    with live:
        return execute(selection, repo_root, planned=planned, watcher=live, finished=live.finished)


def _timed_until_tight(
    selection: Selection, repo_root: Path, result: RunResult, rules: dict[str, Region]
) -> tuple[RunResult, dict[str, TimingNoise]]:
    """``result`` with the noisy regions timed again (up to `MORE_TIMINGS` times, samples
    pooled), and those still too noisy, by name."""
    noisy = _noisy(result, rules)
    for attempt in range(1, MORE_TIMINGS + 1):
        # Only where more samples can help: a region of a few timed runs stays too few.
        more = [name for name, found in noisy.items() if _can_tighten(found, attempt)]
        if not more:
            break
        say(
            f"baseline: step times of {counted(len(more), 'region')} too noisy to bound a "
            f"comparison; timing {'it' if len(more) == 1 else 'them'} again "
            f"({attempt} of {MORE_TIMINGS})",
            sys.stderr,
        )
        # Named, so a --shard's split of the whole plan does not apply again.
        only = dataclasses.replace(selection, regions=tuple(more), shard=None)
        again = _executed(only, repo_root, {})
        result = _pooled(result, again)
        noisy = _noisy(result, rules)
    return result, noisy


def _can_tighten(found: TimingNoise, attempt: int) -> bool:
    """Whether the samples after the timings left could be enough for an interval at all."""
    runs = found.samples // attempt  # each timing's
    return found.samples + runs * (MORE_TIMINGS - attempt + 1) >= fewest_samples()


def _noisy(result: RunResult, rules: Mapping[str, Region]) -> dict[str, TimingNoise]:
    """The regions whose stored timing would be too noisy for their ``baseline_max_slowdown``."""
    found = {}
    for region in result.regions:
        rule = rules.get(region.classname)
        if rule is None or not rule.timing.compare or not region.timing_samples:
            continue
        spread = noise(region.timing_samples, rule.timing.baseline_max_slowdown)
        if spread is not None:
            found[region.classname] = spread
    return found


def _pooled(result: RunResult, again: RunResult) -> RunResult:
    """``result`` with each region's samples and those ``again`` measured of it, together; a
    region that errored again keeps what it had."""
    more = {r.classname: r for r in again.regions if r.error is None and r.timing_samples}

    def pooled(region: RegionResult) -> RegionResult:
        other = more.get(region.classname)
        if other is None or not region.timing_samples:
            return region
        samples = (*region.timing_samples, *other.timing_samples)
        return dataclasses.replace(region, timing_samples=samples, timing=summarize(samples))

    suites = tuple(
        dataclasses.replace(suite, regions=tuple(pooled(r) for r in suite.regions))
        for suite in result.suites
    )
    return dataclasses.replace(result, suites=suites)


def _marked(
    timing: dict[str, StoredTiming], noisy: Mapping[str, TimingNoise]
) -> dict[str, StoredTiming]:
    """``timing`` with each entry of ``noisy`` recorded as such."""
    return {
        name: msgspec.structs.replace(entry, noisy=noisy[name]) if name in noisy else entry
        for name, entry in timing.items()
    }


def _existing(path: Path, where: str, *, partial: bool) -> StoredBaseline:
    """The file's baseline, checked before anything runs. A file that cannot be read is
    refused when part of it would be kept; replaced, saying so, when all of it is re-recorded."""
    if not path.is_file():
        return StoredBaseline()
    try:
        return load_baseline(path, where)
    except BaselineError as exc:
        if partial:
            raise BaselineError(
                f"{exc} (--region, --timing-only and --transfers-only keep the rest of the file, "
                "so it must be readable)"
            ) from exc
        say(f"warning: replacing an unreadable baseline: {exc}", sys.stderr)
        return StoredBaseline()
