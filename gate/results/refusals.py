"""The results of runs that could not happen: invalid policies, an unusable baseline, a busy
device, a gate bug.

So are a ``run --base REF`` that cannot check REF out and a ``--region`` that names no
region. Each becomes an error in the report, so CI sees a failed testcase that says why
rather than a report with nothing in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gate.levels import GuardLevel, GuardSpec
from gate.policy.problems import Problem
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.records import RegionResult, RunResult, SuiteResult
from gate.user_code import SourceLocation


def policy_problems(problems: Sequence[Problem]) -> RunResult:
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


def unusable_baseline(message: str, shown: str) -> RunResult:
    """A report for a baseline that cannot be used: one error at the baseline file."""
    error = RegionError(ErrorKind.BASELINE, message, message, SourceLocation(shown, 1, ""))
    return _one_error("baseline", "baseline", shown, 1, error)


def unusable_base(message: str) -> RunResult:
    """A report for a ``--base`` that cannot be checked out: one error, at no file."""
    error = RegionError(ErrorKind.BASE, message, message)
    return _one_error("transfer-gate", "base", "", 0, error)


def unknown_region(message: str) -> RunResult:
    """A report for a ``--region`` that names no region: one error, at no file."""
    error = RegionError(ErrorKind.REGION, message, message)
    return _one_error("transfer-gate", "region", "", 0, error)


def busy_device(message: str, details: str, not_run: int) -> RunResult:
    """A run stopped because another process holds the device: one error, at no file, saying
    who holds it (`gate.machine.holders`) and how many regions did not run."""
    if not_run:
        message = f"{message} ({not_run} region{'s' if not_run != 1 else ''} not run)"
    error = RegionError(ErrorKind.DEVICE, message, f"{message}\n\n{details}".rstrip() + "\n")
    return _one_error("transfer-gate", "device", "", 0, error)


def gate_bug(exc: BaseException) -> RunResult:
    """A report for the gate itself failing outside any region, with the traceback."""
    return _one_error("transfer-gate", "gate", "", 0, gate_fault("", exc))


def _one_error(suite: str, name: str, path: str, line: int, error: RegionError) -> RunResult:
    """A run of one testcase, ``suite.name``, that is ``error``."""
    region = RegionResult(
        suite=suite,
        name=name,
        policy_path=path,
        policy_line=line,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        error=error,
    )
    return RunResult((SuiteResult(suite, path, (region,)),))
