"""Each region's figures across commits, from the JSON reports of many runs: ``history.json``.

Format ``jax-transfer-gate.history``, version 1 (docs/history.md). Every report is read
with the report's own schema (`gate.report.json_report.Report`): a file that is not one, of
another version, or cut short is refused in one line, as ``merge`` refuses it. Reports are
put in the order they are given (files as named, a folder's files by name: the order in which
main's history job stored them), never by a date a report states: a report is written by the
code it measures, so its dates are that code's word, and one dated 2099 would otherwise stay
the newest for good. Each gives one point per region it holds; reports of another repository,
or sharing no suite with the newest report, are refused rather than drawn beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from gate.documents import DocumentError, Record
from gate.report.json_report import RegionDoc, Report, read_report
from gate.results.machine import Machine
from gate.text import counted

HISTORY_FORMAT: Literal["jax-transfer-gate.history"] = "jax-transfer-gate.history"
HISTORY_VERSION: Literal[1] = 1

_FIX = "give the JSON reports `transfer-gate run --json` wrote, of one repository and suite"


class HistoryError(Exception):
    """The reports cannot make one history; one line: the file, what is wrong, the fix."""


class RunPoint(Record, frozen=True, kw_only=True):
    """One report: the run it records."""

    file: str  # the report's file name, as given
    commit: str
    commit_date: str | None
    run_at: str
    ref: str | None
    passed: bool


class Point(Record, frozen=True, kw_only=True):
    """One region in one run: its figures, null where the run did not measure one."""

    run: int  # index into History.runs
    machine: int | None  # index into History.machines; null where no worker said
    status: Literal["passed", "failed", "error"]
    median_s: float | None
    p25_s: float | None
    p75_s: float | None
    # The timed runs' step times, for the drift check's rank test.
    samples: tuple[float, ...]
    flops: float | None
    bytes_accessed: float | None
    peak_bytes: int | None
    implicit_lines: int  # the distinct user lines with an implicit transfer
    collectives: int | None  # collectives run per step; null where not read


class RegionSeries(Record, frozen=True, kw_only=True):
    classname: str  # "suite.region", the JUnit classname: the key across reports
    suite: str
    name: str
    policy: str
    points: tuple[Point, ...]
    # The branch its runs were of: each branch is a line of its own, never joined to another's.
    branch: str | None = None


class History(Record, frozen=True, kw_only=True):
    """``history.json``: every report as a run, each region's points in the reports' order,
    a series per region and branch."""

    format: Literal["jax-transfer-gate.history"] = HISTORY_FORMAT
    version: Literal[1] = HISTORY_VERSION
    repository: str | None
    runs: tuple[RunPoint, ...]
    machines: tuple[Machine, ...]
    regions: tuple[RegionSeries, ...]
    # Which reports it holds, in words: "main's runs" or "every branch's runs, a line each".
    branches: str = ""


# `--branch`'s default: the branch whose runs a history is of, unless told otherwise.
MAIN_BRANCH = "main"
# A report that names no branch (a detached checkout outside GitHub Actions).
_NO_BRANCH = "(no branch)"


def branch_reports(
    reports: Sequence[tuple[Path, Report]], branch: str | None
) -> tuple[list[tuple[Path, Report]], str]:
    """The reports of ``branch`` (every branch's for None), and the history's branches in
    words. The newest report is kept whatever its branch: a pull request's run is the newest
    point of main's history, on a line of its own. HistoryError where no report but the
    newest is of ``branch``."""
    if branch is None:
        return list(reports), "every branch's recent runs, a line each"
    *older, newest = reports
    kept = [item for item in older if _ref(item[1]) == branch]
    if older and not kept:
        named = sorted({_ref(report) or _NO_BRANCH for _, report in older})
        raise HistoryError(
            f"no report of the branch {branch!r} among the {len(older) + 1} given (they are of "
            f"{', '.join(named)}); name the branch with --branch NAME, or draw each with "
            "--every-branch"
        )
    said = f"{branch}'s recent runs"
    other = _ref(newest[1])
    if other != branch:
        said += f", then this run's on {other or _NO_BRANCH} as a line of its own"
    left = len(older) - len(kept)
    if left:
        said += f"; {counted(left, 'report')} of other branches left out (--every-branch)"
    return [*kept, newest], said


def _ref(report: Report) -> str | None:
    return report.run.ref if report.run is not None else None


def report_files(paths: Sequence[Path]) -> list[Path]:
    """The report files ``paths`` name, in order: a file as it is, a folder's ``*.json`` files
    sorted by name (the history job names each report it keeps by its place in the history)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
            if not found:
                raise HistoryError(f"{path}: no *.json report in this folder; {_FIX}")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            raise HistoryError(f"{path}: no such file or folder; {_FIX}")
    return files


def read_reports(files: Iterable[Path]) -> list[tuple[Path, Report]]:
    """Each file read as a JSON report, every value checked; HistoryError on the first bad one."""
    read = []
    for path in files:
        try:
            report = read_report(path, _FIX)
        except DocumentError as exc:
            raise HistoryError(str(exc)) from exc
        if report.run is None or report.run.commit is None:
            why = (
                f"no `run` (transfer-gate {report.gate_version} wrote it, before reports "
                "named their commit)"
                if report.run is None
                else "no commit (the run was not in a git checkout)"
            )
            raise HistoryError(
                f"{path}: records {why}, so it cannot be placed among commits; "
                "run the gate again in a git checkout"
            )
        read.append((path, report))
    if not read:
        raise HistoryError(f"no report given; {_FIX}")
    return read


def build_history(reports: Sequence[tuple[Path, Report]], branches: str = "") -> History:
    """The reports in the order given, each region's points on each branch (``branches`` says
    which those are, `branch_reports`); HistoryError where they do not mix."""
    ordered = list(reports)
    newest_path, newest = ordered[-1]
    repository = _one_repository(ordered, newest_path, newest)
    suites = {(s.name, s.policy) for s in newest.suites}
    runs: list[RunPoint] = []
    machines: dict[Machine, int] = {}
    points: dict[tuple[str, str | None], list[Point]] = {}
    regions: dict[str, tuple[str, str, str]] = {}
    for index, (path, report) in enumerate(ordered):
        if not suites & {(s.name, s.policy) for s in report.suites}:
            raise HistoryError(
                f"{path}: shares no suite with the newest report {newest_path}; {_FIX}"
            )
        run = report.run
        assert run is not None  # read_reports refused the others
        assert run.commit is not None
        runs.append(
            RunPoint(
                file=path.name,
                commit=run.commit,
                commit_date=run.commit_date,
                run_at=run.run_at,
                ref=run.ref,
                passed=report.passed,
            )
        )
        for suite in report.suites:
            for region in suite.regions:
                regions.setdefault(region.classname, (suite.name, region.name, suite.policy))
                machine = None
                if region.machine is not None:
                    machine = machines.setdefault(region.machine, len(machines))
                key = (region.classname, run.ref)
                points.setdefault(key, []).append(_point(index, machine, region))
    # A region's branches in the order their first runs came: main's line before a pull request's.
    return History(
        repository=repository,
        runs=tuple(runs),
        machines=tuple(machines),
        regions=tuple(
            RegionSeries(
                classname=classname,
                suite=regions[classname][0],
                name=regions[classname][1],
                policy=regions[classname][2],
                points=tuple(found),
                branch=ref,
            )
            for (classname, ref), found in sorted(
                points.items(), key=lambda item: (item[0][0], item[1][0].run)
            )
        ),
        branches=branches,
    )


def newest_machine(points: Sequence[Point]) -> int | None:
    """The machine of the newest of ``points`` that names one: a run that errored before a
    worker said where it ran names none, and must not hide the machine the others ran on."""
    return next((p.machine for p in reversed(points) if p.machine is not None), None)


def fraction_between(value: float, lo: float, hi: float) -> float:
    """How far ``value`` lies from ``lo`` to ``hi`` (``lo < hi``): 0 at ``lo``, 1 at ``hi``.

    Each is divided by the larger end first, so no difference overflows (figures near the float
    limit, of both signs) and none vanishes (figures that small are subnormal).
    """
    scale = max(abs(lo), abs(hi))
    return (value / scale - lo / scale) / (hi / scale - lo / scale)


def series_name(region: RegionSeries, history: History) -> str:
    """``train.step``, or ``train.step on feature-x`` where the history has several branches."""
    several = len({r.branch for r in history.regions}) > 1
    return f"{region.classname} on {region.branch or _NO_BRANCH}" if several else region.classname


def newest_regions(history: History) -> set[str]:
    """The regions the newest report holds: those a check or a summary is about (a region
    removed from the policy keeps its old points, but nothing to guard)."""
    newest = len(history.runs) - 1
    return {r.classname for r in history.regions if r.points[-1].run == newest}


def _one_repository(
    reports: Sequence[tuple[Path, Report]], newest_path: Path, newest: Report
) -> str | None:
    """The newest report's repository; HistoryError for a report that names another."""
    expected = newest.run.repository if newest.run else None
    for path, report in reports:
        found = report.run.repository if report.run else None
        if found and expected and found != expected:
            raise HistoryError(
                f"{path}: a report of {found}, but {newest_path} is of {expected}; "
                "make a history of one repository's reports"
            )
    return expected or next(
        (r.run.repository for _, r in reports if r.run and r.run.repository), None
    )


def _point(run: int, machine: int | None, region: RegionDoc) -> Point:
    timing = region.timing
    cost = region.cost
    totals = cost.totals if cost is not None and cost.measured else {}
    peaks = cost.peak_memory if cost is not None else None
    comm = cost.communication if cost is not None else None
    # Accepted ones too: the history shows what the code moves, not what the gate forgave.
    lines = {(t.path, t.line) for t in region.transfers if t.kind == "implicit"}
    return Point(
        run=run,
        machine=machine,
        status=region.status,
        median_s=timing.median_s if timing else None,
        p25_s=timing.p25_s if timing else None,
        p75_s=timing.p75_s if timing else None,
        samples=region.timing_samples,
        flops=totals.get("flops"),
        bytes_accessed=totals.get("bytes_accessed"),
        peak_bytes=max((p.peak_bytes for p in peaks), default=None) if peaks else None,
        implicit_lines=len(lines),
        collectives=sum(k.runs_per_step for k in comm.by_kind)
        if comm is not None and comm.measured
        else None,
    )


def dropped_regions(history: History) -> tuple[RegionSeries, ...]:
    """The regions the run before the newest held that the newest does not: a run that leaves
    one out says nothing of its drift, and must not pass for one that found none."""
    if len(history.runs) < 2:
        return ()
    before = len(history.runs) - 2
    newest = newest_regions(history)
    return tuple(
        r for r in history.regions if r.points[-1].run == before and r.classname not in newest
    )
