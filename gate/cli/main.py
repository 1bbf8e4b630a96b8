"""The command line: ``transfer-gate run|validate``.

`main(argv) -> int` is the only entry point; exceptions become exit codes
in one place (`main`), and every path that ran or refused to run leaves a
JUnit report behind, because a missing report reads as "0 tests, all passed".
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from gate import __version__
from gate.cli.doctor import main_doctor
from gate.cli.exit_codes import DoctorExitCode, ExitCode, exit_codes_help
from gate.isolation.scheduler import (
    Cancellation,
    cancel_after,
    cancel_on_signals,
    keep_accelerators_for_workers,
    run_isolated,
)
from gate.machine.diagnosis import Platform
from gate.plan import Plan, UnknownRegionError, parse_shard
from gate.policy.load import (
    PolicyError,
    Problem,
    callables_of_invalid,
    discover_policy_files,
    load_policy,
)
from gate.policy.model import Policy
from gate.policy.resolve import check_callables, check_named
from gate.report.junit import ReportWriteError
from gate.report.merge import MergeError, main_merge
from gate.report.terminal import format_summary
from gate.report.write import Reports, check_writable, write_reports
from gate.results.baseline import DEFAULT_NAME as DEFAULT_BASELINE_NAME
from gate.results.baseline import (
    BaselineError,
    apply_baseline,
    default_path,
    fingerprints_of,
    load_baseline,
    rebaselined,
    write_baseline,
)
from gate.results.records import ErrorKind, RunResult
from gate.results.refusals import gate_bug, policy_problems, unusable_baseline
from gate.witness.transfer_map import prepare_environment

DEFAULT_POLICIES = "policies"
DEFAULT_JUNIT = "reports/transfer-gate.xml"
DEFAULT_BASELINE_HELP = f"{DEFAULT_BASELINE_NAME} in the first PATH's folder"


class UsageError(Exception):
    """The command line asks for something impossible; nothing was run."""


def _exit_codes_help() -> str:
    return exit_codes_help(ExitCode)


def _time_budget(text: str) -> float:
    """``--time-budget``: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be more than 0 seconds")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False everywhere: a prefix must never quietly mean another
    # option (`--base` would be taken as `--baseline`).
    parser = argparse.ArgumentParser(
        prog="transfer-gate",
        allow_abbrev=False,
        description="Fail CI on implicit host/device transfers in JAX code regions "
        "named by YAML policies.",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        allow_abbrev=False,
        help="run every region under the transfer guard and write a JUnit report",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help=f"policy files or folders of them (*.yaml, *.yml); default: {DEFAULT_POLICIES}/",
    )
    run.add_argument(
        "--junit",
        default=DEFAULT_JUNIT,
        metavar="FILE",
        help=f"where to write the JUnit report (default: {DEFAULT_JUNIT})",
    )
    run.add_argument(
        "--region",
        action="append",
        metavar="NAME",
        help="run only this region (NAME or SUITE.NAME); repeatable",
    )
    run.add_argument(
        "--shard",
        type=parse_shard,
        metavar="K/N",
        help="run only shard K of N: the regions are split the same way on every machine "
        "(merge the shards' reports with `transfer-gate merge`)",
    )
    run.add_argument(
        "--json",
        metavar="FILE",
        help="also write the full transfer map as JSON (format: docs/reports.md, 'JSON report')",
    )
    run.add_argument(
        "--baseline",
        metavar="FILE",
        help="fail only on transfers not accepted in this baseline (default: "
        f"{DEFAULT_BASELINE_HELP}, used when it exists)",
    )
    run.add_argument(
        "--no-baseline",
        action="store_true",
        help="ignore any baseline: every implicit transfer fails",
    )
    run.add_argument(
        "--write-references",
        action="store_true",
        help="write each region's outputs to its checks.reference file (creating or "
        "replacing it) instead of comparing them; review the change before committing it",
    )
    run.add_argument(
        "--require-platform",
        # Accelerators first, as --help has always listed them.
        choices=[p.value for p in (Platform.GPU, Platform.TPU, Platform.CPU)],
        help="fail every region (exit 1) when JAX runs elsewhere; overrides the policies' "
        "`platform:`",
    )
    run.add_argument(
        "--time-budget",
        type=_time_budget,
        metavar="SECONDS",
        help="stop after SECONDS as if cancelled: the running region and those after it "
        "become errors, the report is written and the run exits 1 (set it below the CI "
        "job's timeout, which kills without a report)",
    )

    baseline = commands.add_parser(
        "baseline",
        allow_abbrev=False,
        help="run every region and accept the transfers it has today in a baseline file",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    baseline.add_argument("paths", nargs="*", metavar="PATH")
    baseline.add_argument(
        "--baseline",
        metavar="FILE",
        help=f"where to write it (default: {DEFAULT_BASELINE_HELP})",
    )
    baseline.add_argument(
        "--region",
        action="append",
        metavar="NAME",
        help="re-baseline only this region (NAME or SUITE.NAME), keeping the others' entries; "
        "repeatable",
    )

    validate = commands.add_parser(
        "validate",
        allow_abbrev=False,
        help="check policies and that every named callable imports, without running any step",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("paths", nargs="*", metavar="PATH")

    doctor = commands.add_parser(
        "doctor",
        allow_abbrev=False,
        help="show what JAX sees here (devices, versions, settings) and check for an accelerator",
        epilog=exit_codes_help(DoctorExitCode),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument(
        "--expect",
        choices=[p.value for p in Platform],
        help="fail (exit 1) unless JAX runs on this kind of device",
    )

    merge = commands.add_parser(
        "merge",
        allow_abbrev=False,
        help="combine the reports of several shards (JUnit .xml or JSON .json) into one",
        description="Combine the shards' reports into OUT, all JUnit (.xml) or all the gate's "
        "JSON (.json), read from OUT's suffix; OUT may be one of the inputs.",
    )
    merge.add_argument("output", metavar="OUT")
    merge.add_argument("inputs", nargs="+", metavar="IN")
    return parser


def _load_all(
    paths: Sequence[str], repo_root: Path, *, write_references: bool = False
) -> list[Policy]:
    """Every policy under ``paths``, or one PolicyError with every file's problems."""
    files = discover_policy_files(paths or [DEFAULT_POLICIES], repo_root)
    policies: list[Policy] = []
    problems: list[Problem] = []
    for file in files:
        try:
            policy = load_policy(file, repo_root, write_references=write_references)
        except PolicyError as exc:
            problems.extend(exc.problems)
            # Every problem of a file at once: the callables it does name are
            # checked too, not only after the rest is fixed.
            named = callables_of_invalid(file, repo_root)
            if named is not None:
                reported = {(p.line, p.where) for p in exc.problems}
                problems.extend(
                    p
                    for p in check_named(named.path, named.refs, named.python_path, repo_root)
                    if (p.line, p.where) not in reported
                )
            continue
        found = check_callables(policy, repo_root)
        if found:
            problems.extend(found)
        else:
            policies.append(policy)
    problems.extend(_clashing_regions(policies))
    if problems:
        raise PolicyError(tuple(problems))
    return policies


def _clashing_regions(policies: Sequence[Policy]) -> list[Problem]:
    """Regions that share ``suite.region`` across files.

    The report, the baseline and --region all name a region by
    ``suite.region``; two of them would share a baseline entry and a
    testcase, so one could hide the other.
    """
    first: dict[str, tuple[Policy, int]] = {}
    problems = []
    for policy in policies:
        for index, region in enumerate(policy.regions):
            name = f"{policy.suite}.{region.name}"
            seen = first.setdefault(name, (policy, region.line))
            if seen[0] is not policy:
                other, line = seen
                problems.append(
                    Problem(
                        policy.path.as_posix(),
                        region.line,
                        f"regions[{index}]",
                        f"region {name!r} is also defined in {other.path.as_posix()}:{line}; "
                        "give one of the files its own `suite:` name",
                    )
                )
    return problems


def _cmd_validate(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    policies = _load_all(args.paths, repo_root)
    regions = sum(len(p.regions) for p in policies)
    for policy in policies:
        print(f"{policy.path.as_posix()}: ok ({len(policy.regions)} regions)")
    print(f"{len(policies)} policies, {regions} regions: valid")
    return ExitCode.OK


def _execute(
    args: argparse.Namespace,
    repo_root: Path,
    reports: Reports | None,
    cancel: Cancellation | None = None,
) -> RunResult:
    """Load, check and run the policies; on the way out the reports are always written.

    Each region runs in a worker process (`gate.isolation.scheduler`); what the workers
    print is forwarded to stderr, so stdout keeps only the summary.
    """
    keep_accelerators_for_workers()  # before _load_all imports the user's modules
    try:
        policies = _load_all(
            args.paths, repo_root, write_references=getattr(args, "write_references", False)
        )
    except PolicyError as exc:
        if reports is not None:
            _write(policy_problems(exc.problems), reports)
        raise
    required = getattr(args, "require_platform", None)
    if required is not None:
        policies = [dataclasses.replace(p, platform=required) for p in policies]
    plan = Plan.make(policies, args.region, getattr(args, "shard", None))
    if plan.shard is not None:
        print(plan.shard.describe())
    try:
        return run_isolated(plan, repo_root, cancel=cancel, forward=sys.stderr)
    except Exception as exc:
        if reports is not None:
            _write(gate_bug(exc), reports)
        raise


def _baseline_for(args: argparse.Namespace, repo_root: Path) -> tuple[Path, bool]:
    """The baseline file to use and whether the user named it."""
    if args.baseline:
        return Path(args.baseline), True
    return default_path(args.paths, repo_root, DEFAULT_POLICIES), False


def _cmd_run(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    # From here until the report is written, SIGINT/SIGTERM (CI cancelling
    # the job) stop the running region instead of the gate: see docs/isolation.md,
    # "When a region crashes, hangs or is cancelled". So does the end of
    # --time-budget, which CI needs: `docker exec` passes no signal on.
    with cancel_on_signals() as cancel, cancel_after(cancel, args.time_budget):
        return _run_and_report(args, repo_root, cancel)


def _run_and_report(args: argparse.Namespace, repo_root: Path, cancel: Cancellation) -> ExitCode:
    reports = Reports(Path(args.junit), Path(args.json) if args.json else None)
    reports.check_writable()
    accepted = None
    baseline_path, named = _baseline_for(args, repo_root)
    if not args.no_baseline and (named or baseline_path.is_file()):
        try:
            accepted = load_baseline(baseline_path)
        except BaselineError as exc:
            # Like an invalid policy: nothing runs, but the report says why.
            _write(unusable_baseline(str(exc), _shown(baseline_path, repo_root)), reports)
            raise
    result = _execute(args, repo_root, reports, cancel)
    if accepted is not None:
        shown = _shown(baseline_path, repo_root)
        paths = " ".join(args.paths)
        command = f"transfer-gate baseline {paths} --baseline {shown}".replace("  ", " ")
        result = apply_baseline(result, accepted, command)
    print(format_summary(result))
    if accepted is not None:
        print(f"baseline: {_shown(baseline_path, repo_root)} ({len(accepted)} accepted)")
    print(reports.describe())
    _write(result, reports)
    return _verdict(result, cancel)


def _write(run: RunResult, reports: Reports) -> None:
    write_reports(run, reports, fingerprints_of(run))


def _verdict(result: RunResult, cancel: Cancellation) -> ExitCode:
    """The exit code of a run whose report is written; says why on stderr when it isn't 0 or 1.

    A gate bug inside one region (INTERNAL) leaves the other regions judged,
    but the run exits 3 all the same: the failure is the gate's, not the code's.
    """
    if cancel.signal is not None:
        print(f"error: run cancelled by {cancel.signal.name}", file=sys.stderr)
    elif cancel.reason is not None:
        print(f"error: run cancelled: {cancel.reason}", file=sys.stderr)
    bugs = [r for r in result.regions if r.error and r.error.kind is ErrorKind.INTERNAL]
    if bugs:
        names = ", ".join(r.classname for r in bugs)
        print(
            f"error: transfer-gate itself failed while running {names}; this is a bug, "
            "please report it with the report's traceback",
            file=sys.stderr,
        )
        return ExitCode.INTERNAL
    return ExitCode.OK if result.passed else ExitCode.REGION_FAILED


def _shown(path: Path, repo_root: Path) -> str:
    try:
        return path.resolve().relative_to(repo_root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _cmd_baseline(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    path, _ = _baseline_for(args, repo_root)
    check_writable(path)
    result = _execute(args, repo_root, None)
    errored = [r for r in result.regions if r.error is not None]
    if errored:
        print(format_summary(result))
        raise UsageError(
            f"{len(errored)} region(s) errored, so their transfers are unknown; "
            "fix them and run `transfer-gate baseline` again (the baseline was not written)"
        )
    entries, kept = rebaselined(result, load_baseline(path) if path.is_file() else [])
    write_baseline([*kept, *entries], path)
    ran = {r.classname for r in result.regions}
    print(
        f"baseline: {_shown(path, repo_root)}: {len(entries)} accepted transfer line(s) "
        f"from {len(ran)} region(s)" + (f", {len(kept)} kept for other regions" if kept else "")
    )
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see `gate.cli.exit_codes`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "doctor":
        # Before prepare_environment: doctor reports the settings the job gave the gate.
        return main_doctor(args.expect)
    repo_root = Path.cwd()
    # Before anything imports jax (user modules do, while policies are checked).
    prepare_environment(os.environ)
    try:
        if args.command == "validate":
            return _cmd_validate(args, repo_root)
        if args.command == "baseline":
            return _cmd_baseline(args, repo_root)
        if args.command == "merge":
            return main_merge(args.output, args.inputs)
        return _cmd_run(args, repo_root)
    except PolicyError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return ExitCode.USAGE
    except (UsageError, UnknownRegionError, ReportWriteError, BaselineError, MergeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception:
        traceback.print_exc()
        print(
            "error: transfer-gate itself failed; this is a bug, please report it "
            "with the traceback above",
            file=sys.stderr,
        )
        return ExitCode.INTERNAL
