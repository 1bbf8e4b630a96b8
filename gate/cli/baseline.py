"""``transfer-gate baseline``: accept the transfers regions have today; store their step times.

Two parts, re-recorded together or apart: the accepted transfers (``--transfers-only``) and
each region's timing with its machine (``--timing-only``). Accepting a new transfer is never
the side effect of recording a timing: ``--timing-only`` keeps the file's transfers as they
are and lists each it did not accept; every transfer a run accepts that the file did not is
listed, at its ``file:line``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gate.cli.errors import UsageError
from gate.cli.execute import Selection, baseline_for, execute, shown
from gate.cli.exit_codes import ExitCode
from gate.cli.run import colour
from gate.compare.stored_baseline import planned_regions
from gate.plan import Plan
from gate.printable import say
from gate.report.live import LiveOutput
from gate.report.terminal import format_summary
from gate.report.write import check_writable
from gate.results.baseline import accept_command, rebaselined, uncovered
from gate.results.baseline_file import BaselineError, StoredBaseline, load_baseline, write_baseline
from gate.results.timing_baseline import retimed
from gate.text import counted


def baseline_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the baseline file; refuses (nothing written) when a region errored."""
    path, _ = baseline_for(args.baseline, args.paths, repo_root)
    check_writable(path, "--baseline", repo_root)
    where = shown(path, repo_root)
    partial = bool(args.region or args.timing_only or args.transfers_only)
    existing = _existing(path, where, partial=partial)
    # `run`'s live output but the rows: the running region in place, a GitHub group per region.
    live = LiveOutput.for_stream(
        sys.stderr, os.environ, color=colour("auto", sys.stderr), rows=False
    )

    def planned(plan: Plan) -> None:
        live.total = len(planned_regions(plan))

    with live:
        result = execute(
            Selection.from_args(args),
            repo_root,
            planned=planned,
            watcher=live,
            finished=live.finished,
        )
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
    if not args.transfers_only:
        timing = retimed(result, existing.timing)
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
    if existing.no_timing is not None and args.transfers_only and not existing.timing:
        say(f"  timing: {existing.no_timing}; record it with `{command} --timing-only`")
    return ExitCode.OK


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
