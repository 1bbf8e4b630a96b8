"""``transfer-gate run``: every region under the transfer guard, judged against the baseline.

Every path that ran or refused to run leaves its reports behind
(`gate.report.write`), because a missing report reads as "0 tests, all passed".
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from gate.cli.execute import Selection, baseline_for, execute, shown
from gate.cli.exit_codes import ExitCode
from gate.compare.stored_baseline import compare_with_baseline, planned_regions
from gate.compare.worktree import BaseRef, BaseRefError, check_base, checked_out
from gate.isolation.cancellation import Cancellation, cancel_after, cancel_on_signals
from gate.isolation.compile_cache import CACHE_DIR
from gate.isolation.run_settings import RunSettings
from gate.plan import Plan
from gate.policy.model import Region
from gate.printable import say
from gate.report.live import LiveOutput, is_terminal, shows_escapes
from gate.report.terminal import format_summary
from gate.report.write import Reports, clear_traces, traces_folder, write_reports
from gate.results.baseline import (
    accept_command,
    apply_baseline,
    fingerprints_of,
    without_baseline,
)
from gate.results.baseline_file import BaselineError, StoredBaseline, load_baseline
from gate.results.errors import ErrorKind
from gate.results.provenance import Provenance, read_provenance
from gate.results.records import CheckName, RegionResult, RunResult, SuiteResult
from gate.results.refusals import unusable_base, unusable_baseline


def run_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Run the regions, write the reports, and say how the run ended."""
    # From here until the report is written, SIGINT/SIGTERM (CI cancelling
    # the job) stop the running region instead of the gate: see docs/isolation.md,
    # "When a region crashes, hangs or is cancelled". So does the end of
    # --time-budget, which CI needs: `docker exec` passes no signal on.
    with cancel_on_signals() as cancel, cancel_after(cancel, args.time_budget):
        return _run_and_report(args, repo_root, cancel)


def _write(run: RunResult, reports: Reports, provenance: Provenance | None) -> None:
    write_reports(run, reports, fingerprints_of(run), provenance)


def _run_and_report(args: argparse.Namespace, repo_root: Path, cancel: Cancellation) -> ExitCode:
    reports = Reports(Path(args.junit), Path(args.json) if args.json else None)
    # Where the run writes, reports and traces, is checked before anything is deleted.
    reports.check_writable(repo_root)
    # The last run's reports go now: a run that breaks before it writes its own must leave
    # none, never one that reads as this run's (a stale pass).
    reports.remove()
    clear_traces(reports)  # a trace of an earlier run must not pass for this run's
    # Read as the run starts: its time is the run's, and HEAD is what the work tree runs. Only
    # the JSON report holds it: without one, git is not asked.
    provenance = read_provenance(repo_root, os.environ) if reports.json is not None else None
    base_ref: BaseRef | None = None
    if args.base is not None:
        try:
            # Before anything runs: a bad --base is the user's, like an unusable baseline.
            base_ref = check_base(repo_root, args.base)
        except BaseRefError as exc:
            _write(unusable_base(str(exc)), reports, provenance)
            raise
    stored: StoredBaseline | None = None
    baseline_path, named = baseline_for(args.baseline, args.paths, repo_root)
    baseline_shown = shown(baseline_path, repo_root)
    if not args.no_baseline and (named or baseline_path.is_file()):
        try:
            stored = load_baseline(baseline_path, baseline_shown)
        except BaselineError as exc:
            # Like an invalid policy: nothing runs, but the report says why.
            _write(unusable_baseline(str(exc), baseline_shown), reports, provenance)
            raise
    rules: dict[str, Region] = {}
    command = accept_command(args.paths, baseline_shown)

    def planned(plan: Plan) -> None:
        rules.update(planned_regions(plan))
        if args.no_timing_baseline:
            # As if every region said `timing: off` to the stored baseline: not compared, and no
            # note. XLA's figures are still compared; they do not depend on the machine's load.
            for key, rule in rules.items():
                rules[key] = replace(rule, timing=replace(rule.timing, compare=False))
        live.total = len(rules)

    # Each region judged against the stored baseline once, as it finishes: its live row and
    # the reports show that one judgement.
    judgements: dict[str, RegionResult] = {}

    def judged(region: RegionResult) -> RegionResult:
        new_since_base = stored is None and args.base is not None and not args.no_baseline
        if region.classname not in judgements and new_since_base:
            # A transfer new since the base still ends with what accepts it: the file, written
            # anew. Not in a plain run: there a leak's next step is its fix.
            judgements[region.classname] = without_baseline(region, command)
        if region.classname not in judgements:
            run = RunResult((SuiteResult(region.suite, "", (region,)),))
            if stored is not None:
                run = apply_baseline(run, stored.accepted, command)
                run = compare_with_baseline(run, stored, rules, command)
            [judgements[region.classname]] = run.regions
        return judgements[region.classname]

    # The run as it goes, on stderr beside the workers' output: stdout keeps only the
    # summary, which tools read.
    live = LiveOutput.for_stream(
        sys.stderr,
        os.environ,
        color=colour(args.color, sys.stderr),
        quiet=args.quiet,
        verbose=args.verbose,
    )

    def finished(region: RegionResult) -> None:
        live.finished(judged(region))

    with live, ExitStack() as trees:  # the running line is wiped before the summary
        base = (
            trees.enter_context(checked_out(repo_root, args.base, base_ref))
            if args.base is not None
            else None
        )
        if base is not None:
            say(f"comparing with the base: {base.describe()}")
            if base.fresh_because and os.environ.get(CACHE_DIR):
                say(
                    f"note: the base is checked out in a fresh folder, so {CACHE_DIR} cannot "
                    f"serve its programs this run: {base.fresh_because}"
                )
        result = execute(
            Selection.from_args(args),
            repo_root,
            lambda refused: _write(refused, reports, provenance),
            cancel=cancel,
            planned=planned,
            base=base,
            watcher=live,
            finished=finished,
            settings=RunSettings(traces_folder(reports), _timed_against(args, stored)),
        )
    result = replace(
        result,
        suites=tuple(
            replace(suite, regions=tuple(judged(r) for r in suite.regions))
            for suite in result.suites
        ),
    )
    tinted = colour(args.color, sys.stdout)
    # On a terminal every row and its findings were just shown live, above: the summary
    # names what failed and counts, so that each finding is read once.
    live_above = is_terminal(sys.stdout) and is_terminal(sys.stderr)
    # The reports first: what the log shows next can fail no run's report.
    _write(result, reports, provenance)
    summary = format_summary(
        result, color=tinted, quiet=args.quiet, verbose=args.verbose, shown_live=live_above
    )
    say(summary, escapes=tinted)
    if stored is not None:
        unused = (
            "; step times not compared (--no-timing-baseline)" if args.no_timing_baseline else ""
        )
        say(f"baseline: {baseline_shown} ({len(stored.accepted)} accepted{unused})")
    for line in _written_references(result, rules, repo_root):
        say(line)
    say(reports.describe())
    return _verdict(result, cancel)


def _timed_against(
    args: argparse.Namespace, stored: StoredBaseline | None
) -> frozenset[str] | None:
    """The regions whose step times this run compares, which get the profiler's traced runs
    that a "slower" verdict names its lines from (`RunSettings.compared`): every one against
    a base (None), those with stored step times against the baseline, else none."""
    if args.base is not None:
        return None
    if stored is None or args.no_timing_baseline:
        return frozenset()
    return frozenset(stored.timing)


def colour(choice: str, stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to colour what goes to ``stream`` under ``--color CHOICE``.

    ``auto``: on a terminal only, and not ``TERM=dumb``; a non-empty ``NO_COLOR``
    (https://no-color.org) turns it off, a non-empty ``FORCE_COLOR`` on (CI logs that render
    ANSI, such as GitHub's), whatever its value, as https://force-color.org says.
    """
    if choice != "auto":
        return choice == "always"
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    return shows_escapes(stream, environ)


def _written_references(result: RunResult, rules: dict[str, Region], repo_root: Path) -> list[str]:
    """``wrote refs/clean.npz (p.clean)`` per reference file this run wrote: a region that
    errored before its checks wrote none, and the files are what the user reviews next."""
    lines = []
    for region in result.regions:
        rule = rules.get(region.classname)
        if rule is None or rule.checks.reference is None or not rule.checks.write_reference:
            continue
        if any(c.name is CheckName.REFERENCE and c.passed for c in region.checks):
            lines.append(f"wrote {shown(rule.checks.reference, repo_root)} ({region.classname})")
    return lines


def _verdict(result: RunResult, cancel: Cancellation) -> ExitCode:
    """The exit code of a run whose report is written; says why on stderr when it isn't 0 or 1.

    A gate bug inside one region (INTERNAL) leaves the other regions judged,
    but the run exits 3 all the same: the failure is the gate's, not the code's.
    """
    if cancel.signal is not None:
        say(f"error: run cancelled by {cancel.signal.name}", sys.stderr)
    elif cancel.reason is not None:
        say(f"error: run cancelled: {cancel.reason}", sys.stderr)
    bugs = [r for r in result.regions if r.error and r.error.kind is ErrorKind.INTERNAL]
    if bugs:
        names = ", ".join(r.classname for r in bugs)
        say(
            f"error: transfer-gate itself failed while running {names}; this is a bug, "
            "please report it with the report's traceback",
            sys.stderr,
        )
        return ExitCode.INTERNAL
    return ExitCode.OK if result.passed else ExitCode.REGION_FAILED
