"""The command line: ``transfer-gate run|validate``.

`main(argv) -> int` is the only entry point; exceptions become exit codes
in one place (`main`), and every path that ran or refused to run leaves a
JUnit report behind, because a missing report reads as "0 tests, all passed".
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from gate import __version__
from gate.exit_codes import ExitCode
from gate.guard_levels import GuardLevel, GuardSpec
from gate.policy import PolicyError, Problem, discover_policy_files, load_policy
from gate.policy_model import Policy
from gate.report_junit import ReportWriteError, write_junit
from gate.report_terminal import format_summary
from gate.resolve import check_callables
from gate.results import (
    ErrorKind,
    RegionError,
    RegionResult,
    RunResult,
    SourceLocation,
    SuiteResult,
)

DEFAULT_POLICIES = "policies"
DEFAULT_JUNIT = "reports/transfer-gate.xml"


class UsageError(Exception):
    """The command line asks for something impossible; nothing was run."""


def _exit_codes_help() -> str:
    lines = ["exit codes:"]
    lines += [f"  {code.value}  {code.meaning}" for code in ExitCode]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transfer-gate",
        description="Fail CI on implicit host/device transfers in JAX code regions "
        "named by YAML policies.",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
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

    validate = commands.add_parser(
        "validate",
        help="check policies and that every named callable imports, without running any step",
        epilog=_exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument("paths", nargs="*", metavar="PATH")
    return parser


def _load_all(paths: Sequence[str], repo_root: Path) -> list[Policy]:
    """Every policy under ``paths``, or one PolicyError with every file's problems."""
    files = discover_policy_files(paths or [DEFAULT_POLICIES], repo_root)
    policies: list[Policy] = []
    problems: list[Problem] = []
    for file in files:
        try:
            policy = load_policy(file, repo_root)
        except PolicyError as exc:
            problems.extend(exc.problems)
            continue
        found = check_callables(policy, repo_root)
        if found:
            problems.extend(found)
        else:
            policies.append(policy)
    if problems:
        raise PolicyError(tuple(problems))
    return policies


def _problem_results(problems: Sequence[Problem]) -> RunResult:
    """A report for policies that could not be loaded: one error per problem file."""
    by_file: dict[str, list[Problem]] = {}
    for problem in problems:
        by_file.setdefault(problem.path, []).append(problem)
    suites = []
    for path, found in by_file.items():
        suite = Path(path).stem or "policy"
        first = found[0]
        error = RegionError(
            ErrorKind.POLICY,
            str(first) if len(found) == 1 else f"{first} (and {len(found) - 1} more)",
            "\n".join(str(p) for p in found),
            SourceLocation(path, first.line or 1, ""),
        )
        region = RegionResult(
            suite=suite,
            name="policy",
            policy_path=path,
            policy_line=first.line or 1,
            guard=GuardSpec.uniform(GuardLevel.DISALLOW),
            error=error,
        )
        suites.append(SuiteResult(suite, path, (region,)))
    return RunResult(tuple(suites))


def _internal_error_result(exc: BaseException) -> RunResult:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    region = RegionResult(
        suite="transfer-gate",
        name="gate",
        policy_path="",
        policy_line=0,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        error=RegionError(
            ErrorKind.INTERNAL,
            f"transfer-gate itself failed ({type(exc).__name__}: {exc}); this is a bug",
            text,
        ),
    )
    return RunResult((SuiteResult("transfer-gate", "", (region,)),))


def _check_writable(report: Path) -> None:
    """Fail before running anything if the report could not be written."""
    folder = report.parent
    if report.is_dir():
        raise ReportWriteError(f"{report}: is a folder; pass a file path to --junit")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ReportWriteError(
            f"{report}: cannot create folder {folder} ({existing} is a file); "
            "choose another --junit"
        )
    probe = existing / f".transfer-gate-probe-{time.monotonic_ns()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ReportWriteError(
            f"{report}: cannot write there ({exc.strerror}); choose another --junit"
        ) from exc


def _cmd_validate(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    policies = _load_all(args.paths, repo_root)
    regions = sum(len(p.regions) for p in policies)
    for policy in policies:
        print(f"{policy.path.as_posix()}: ok ({len(policy.regions)} regions)")
    print(f"{len(policies)} policies, {regions} regions: valid")
    return ExitCode.OK


def _selected(policies: list[Policy], wanted: list[str] | None) -> frozenset[str] | None:
    if not wanted:
        return None
    known = {r.name for p in policies for r in p.regions}
    known |= {f"{p.suite}.{r.name}" for p in policies for r in p.regions}
    missing = [name for name in wanted if name not in known]
    if missing:
        names = ", ".join(sorted(r.name for p in policies for r in p.regions))
        raise UsageError(f"--region {missing[0]}: no such region; the policies define: {names}")
    return frozenset(wanted)


def _cmd_run(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    from gate.runner import run_policies

    report = Path(args.junit)
    _check_writable(report)
    try:
        policies = _load_all(args.paths, repo_root)
    except PolicyError as exc:
        write_junit(_problem_results(exc.problems), report)
        raise
    only = _selected(policies, args.region)
    try:
        result = run_policies(policies, repo_root, only)
    except Exception as exc:
        write_junit(_internal_error_result(exc), report)
        raise
    write_junit(result, report)
    print(format_summary(result))
    print(f"report: {report}")
    return ExitCode.OK if result.passed else ExitCode.REGION_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see `gate.exit_codes`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    repo_root = Path.cwd()
    try:
        if args.command == "validate":
            return _cmd_validate(args, repo_root)
        return _cmd_run(args, repo_root)
    except PolicyError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return ExitCode.USAGE
    except (UsageError, ReportWriteError) as exc:
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
