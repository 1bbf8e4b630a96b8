"""The JSON report: the full transfer map per region, for tools (and people with jq).

Format ``jax-transfer-gate.report``, version 1, documented in docs/reports.md
("JSON report"). Fields are only ever added within a version; renaming or
removing one bumps the version. One entry per finding: per array moved at a
line (`gate.results.findings`).

The report is declared once, as the records below (`Report` and what it holds): the gate
writes them, ``merge`` reads shards back with them, every value checked
(`gate.documents`), and ``transfer-gate schema report`` prints their JSON Schema. A figure
that is not finite (an unbounded interval, say) is written null: JSON has no infinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, TypeVar

import msgspec

from gate.documents import Record, encode, read_document
from gate.files import write_text_atomically
from gate.levels import GuardSpec
from gate.package import __version__
from gate.report.json_collectives import CommComparisonDoc, CommunicationDoc, DonationDoc
from gate.report.json_findings import FindingDoc, RecompileDoc
from gate.report.json_lines import (
    LineComparisonDoc,
    LineTimeComparisonDoc,
    LineWorkDoc,
    OpTimesDoc,
    line_table_doc,
)
from gate.report.json_memory import MemoryDoc
from gate.report.json_timing import TimingDoc
from gate.results.comparison import (
    BaseComparison,
    BoundaryTime,
    LeafDifference,
    Renamed,
    ResultStatus,
)
from gate.results.costs import CostComparison, StepCost
from gate.results.errors import RegionError
from gate.results.findings import Finding, group
from gate.results.machine import Machine
from gate.results.provenance import Provenance
from gate.results.records import BoundaryCost, CheckOutcome, RegionResult, RunResult, TimingStats

FORMAT: Literal["jax-transfer-gate.report"] = "jax-transfer-gate.report"
VERSION: Literal[1] = 1

R = TypeVar("R", bound=Record)

# Each region's findings with their baseline fingerprints, by the region's classname
# (`gate.results.baseline.fingerprints_of`): the caller computes them, the report prints them.
Fingerprints = Mapping[str, Mapping[Finding, str]]


def _records(items: Iterable[object], record: type[R]) -> tuple[R, ...]:
    """Each of ``items`` as ``record``, field by field from its attributes of the same names."""
    return tuple(msgspec.convert(item, record, from_attributes=True) for item in items)


class ErrorDoc(Record, frozen=True, kw_only=True):
    kind: str
    message: str
    path: str | None
    line: int | None
    details: str

    @classmethod
    def of(cls, error: RegionError | None) -> ErrorDoc | None:
        if error is None:
            return None
        where = error.location
        return cls(
            kind=error.kind.name.lower(),
            message=error.message,
            path=where.path if where else None,
            line=where.line if where else None,
            details=error.details,
        )


class ResultsDoc(Record, frozen=True, kw_only=True):
    status: ResultStatus
    # Derived from "status", kept for the tools that read version 1 before it.
    compared: bool
    passed: bool
    detail: str
    differences: tuple[LeafDifference, ...]


class FirstCalls(Record, frozen=True, kw_only=True):
    base: float | None
    head: float | None


class CostChangeDoc(Record, frozen=True, kw_only=True):
    function: str | None  # null: the step's total
    metric: str
    base: float | None
    head: float | None
    ratio: float | None
    failing: bool


class ProgramCountDoc(Record, frozen=True, kw_only=True):
    """A function with more or fewer programs than the other side's, and each one's memory."""

    name: str
    base_programs: int
    head_programs: int
    # Each program's memory figures, in the order they first ran (empty where not kept).
    base_memory: tuple[dict[str, float], ...]
    head_memory: tuple[dict[str, float], ...]
    text: str


class CostComparisonDoc(Record, frozen=True, kw_only=True):
    """Every figure that changed against the base (``function: null``: the step's total)."""

    against: str
    compared: bool
    note: str
    # Why cost.max_increase could not bound the totals (then "failing" is true); else null.
    unchecked: str | None
    failing: bool
    max_increase: float | None
    headline: str
    changes: tuple[CostChangeDoc, ...]
    program_counts: tuple[ProgramCountDoc, ...] = ()
    # Work by source line against the same side (`gate.report.json_lines`); null where a
    # side has no line table, and then ``lines_note`` says why when a reader should know.
    lines: LineComparisonDoc | None = None
    lines_note: str = ""
    # Op time by line from the profiler's traced runs, both sides; null where a side has
    # none, and then ``times_note`` says why when the head was traced.
    times: LineTimeComparisonDoc | None = None
    times_note: str = ""
    # The folder of the base's trace (``run --base``), beside the head's (``cost.times``).
    base_trace: str | None = None

    @classmethod
    def of(cls, cost: CostComparison | None) -> CostComparisonDoc | None:
        if cost is None:
            return None
        return cls(
            against=cost.against,
            compared=cost.compared,
            note=cost.note,
            unchecked=cost.unchecked,
            failing=cost.failing,
            max_increase=cost.max_increase,
            headline=cost.headline(),
            changes=_records(cost.changes, CostChangeDoc),
            program_counts=tuple(
                ProgramCountDoc(
                    name=count.name,
                    base_programs=count.base.programs,
                    head_programs=count.head.programs,
                    base_memory=tuple(dict(p) for p in count.base.per_program),
                    head_memory=tuple(dict(p) for p in count.head.per_program),
                    text=count.text(cost.against),
                )
                for count in cost.counts
            ),
            lines=LineComparisonDoc.of(cost.lines, cost.against),
            lines_note=cost.lines_note,
            times=LineTimeComparisonDoc.of(cost.times, cost.against),
            times_note=cost.times_note,
            base_trace=cost.base_trace,
        )


class BaseDoc(Record, frozen=True, kw_only=True):
    """The region against ``run --base``'s tree."""

    ref: str
    status: Literal["compared", "new_region", "base_failed"]
    failing: bool
    timing: TimingDoc | None
    results: ResultsDoc | None
    boundaries: tuple[BoundaryTime, ...]
    boundary_timing: tuple[TimingDoc, ...]
    error: ErrorDoc | None
    already_in_base: int
    # The callables the base ran from its own policy, the head's having been renamed.
    renamed: tuple[Renamed, ...]
    # Why the trees ran in workers of their own, timed unpaired; "" when one held both.
    apart: str
    cost: CostComparisonDoc | None
    collectives: CommComparisonDoc | None
    first_call_s: FirstCalls

    @classmethod
    def of(cls, base: BaseComparison | None) -> BaseDoc | None:
        """None without --base."""
        if base is None:
            return None
        results = base.results
        return cls(
            ref=base.base,
            status=base.status.name.lower(),  # type: ignore[arg-type]  # a BaseStatus's name
            failing=base.failing,
            timing=TimingDoc.of(base.timing),
            results=None
            if results is None
            else ResultsDoc(
                status=results.status,
                compared=results.status is not ResultStatus.NOT_COMPARED,
                passed=not results.failing,
                detail=results.detail,
                differences=results.differences,
            ),
            boundaries=base.boundaries,
            boundary_timing=tuple(
                doc for doc in map(TimingDoc.of, base.boundary_timing) if doc is not None
            ),
            error=ErrorDoc.of(base.base_error),
            already_in_base=base.already_in_base,
            renamed=base.renamed,
            apart=base.apart,
            cost=CostComparisonDoc.of(base.cost),
            collectives=CommComparisonDoc.of(base.comm),
            first_call_s=FirstCalls(base=base.base_first_call_s, head=base.head_first_call_s),
        )


class FunctionDoc(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One compiled function: its runs and programs, and each figure XLA gave (only those)."""

    name: str
    runs: int
    programs: int
    flops: float | None = None
    bytes_accessed: float | None = None
    transcendentals: float | None = None
    argument_bytes: float | None = None
    output_bytes: float | None = None
    alias_bytes: float | None = None
    temp_bytes: float | None = None
    generated_code_bytes: float | None = None
    unknown: str = ""  # why a figure is absent, where one is
    where: str | None = None  # the user's line that first ran it ("train.py:44"), if known


class PeakDoc(Record, frozen=True, kw_only=True):
    device: str
    peak_bytes: int
    peak_before_bytes: int
    in_use_before_bytes: int
    set_by_step: bool


class CostDoc(Record, frozen=True, kw_only=True):
    """XLA's figures for the step (`gate.results.costs`)."""

    measured: bool
    note: str
    totals: dict[str, float | None]
    functions: tuple[FunctionDoc, ...]
    peak_memory: tuple[PeakDoc, ...] | None
    # The programs' collectives (`gate.report.json_collectives`); null when not read.
    communication: CommunicationDoc | None
    # The step's work by source line (`gate.report.json_lines`); null when not counted.
    lines: tuple[LineWorkDoc, ...] | None = None
    # Op time by line from the traced runs (`gate.report.json_lines`); null when not traced.
    times: OpTimesDoc | None = None

    @classmethod
    def of(cls, cost: StepCost | None) -> CostDoc | None:
        """None for a region that never got there."""
        if cost is None:
            return None
        peaks = cost.peak_memory
        return cls(
            measured=cost.measured,
            note=cost.note,
            totals=dict(cost.totals),
            functions=tuple(
                msgspec.structs.replace(
                    FunctionDoc(
                        name=f.name,
                        runs=f.runs,
                        programs=f.programs,
                        unknown=f.unknown,
                        where=f.where,
                    ),
                    **dict(f.figures),
                )
                for f in cost.functions
            ),
            peak_memory=None if peaks is None else _records(peaks, PeakDoc),
            communication=CommunicationDoc.of(cost.comm),
            lines=line_table_doc(cost.lines),
            times=OpTimesDoc.of(cost.times),
        )


class RegionDoc(Record, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    classname: str
    policy: str
    policy_line: int
    status: Literal["passed", "failed", "error"]
    guard: GuardSpec
    transfers: tuple[FindingDoc, ...]
    # Only for a region that compiled after warm-up: clean regions' documents stay as they were.
    recompiles: tuple[RecompileDoc, ...] = ()
    timing: TimingStats | None
    timing_samples: tuple[float, ...]
    first_call_s: float | None
    boundaries: tuple[BoundaryCost, ...]
    cost: CostDoc | None
    base: BaseDoc | None
    timing_vs_baseline: TimingDoc | None
    cost_vs_baseline: CostComparisonDoc | None
    collectives_vs_baseline: CommComparisonDoc | None
    donations: tuple[DonationDoc, ...]
    # Only for a region whose device arrays were counted (`gate.report.json_memory`).
    memory: MemoryDoc | None = None
    checks: tuple[CheckOutcome, ...]
    error: ErrorDoc | None
    notes: tuple[str, ...]
    fixed_since_baseline: tuple[str, ...]
    wall_s: float
    # The machine it ran on, as the stored baseline names it; absent where no worker said.
    machine: Machine | None = None

    @classmethod
    def of(cls, region: RegionResult, prints: Mapping[Finding, str]) -> RegionDoc:
        status: Literal["passed", "failed", "error"] = (
            "error" if region.error is not None else "passed" if region.passed else "failed"
        )
        return cls(
            name=region.name,
            classname=region.classname,
            policy=region.policy_path,
            policy_line=region.policy_line,
            status=status,
            guard=region.guard,
            transfers=tuple(FindingDoc.of(f, prints[f]) for f in group(region.transfers)),
            recompiles=tuple(
                RecompileDoc(
                    function=r.function,
                    failing=r.failing,
                    count=r.count,
                    runs=r.runs,
                    change=r.change,
                    path=r.location.path if r.location else None,
                    line=r.location.line if r.location else None,
                    caller=r.location.function if r.location else None,
                    source=r.source,
                    startup=r.startup,
                    base_count=r.base_count,
                )
                for r in region.recompiles
            ),
            timing=region.timing,
            timing_samples=region.timing_samples,
            first_call_s=region.first_call_s,
            boundaries=region.boundaries,
            cost=CostDoc.of(region.cost),
            base=BaseDoc.of(region.base),
            timing_vs_baseline=TimingDoc.of(region.timing_vs_baseline),
            cost_vs_baseline=CostComparisonDoc.of(region.cost_vs_baseline),
            collectives_vs_baseline=CommComparisonDoc.of(region.comm_vs_baseline),
            donations=tuple(DonationDoc.of(d) for d in region.donations),
            memory=MemoryDoc.of(region),
            checks=region.checks,
            error=ErrorDoc.of(region.error),
            notes=region.notes,
            fixed_since_baseline=region.fixed,
            wall_s=region.wall_s,
            machine=region.machine,
        )


class SuiteDoc(Record, frozen=True, kw_only=True):
    name: str
    policy: str
    regions: tuple[RegionDoc, ...]


class Report(Record, frozen=True, kw_only=True):
    """The whole JSON report; ``merge`` joins several into one of these."""

    format: Literal["jax-transfer-gate.report"] = FORMAT
    version: Literal[1] = VERSION
    gate_version: str
    passed: bool
    # What the run measured (`gate.results.provenance`); null in reports of gates before it.
    run: Provenance | None = None
    suites: tuple[SuiteDoc, ...]


def render_json(
    run: RunResult, fingerprints: Fingerprints, provenance: Provenance | None = None
) -> str:
    report = Report(
        gate_version=__version__,
        run=provenance,
        passed=run.passed,
        suites=tuple(
            SuiteDoc(
                name=suite.name,
                policy=suite.policy_path,
                regions=tuple(RegionDoc.of(r, fingerprints[r.classname]) for r in suite.regions),
            )
            for suite in run.suites
        ),
    )
    return encode(report, ordered=False)


def write_json(
    run: RunResult, path: Path, fingerprints: Fingerprints, provenance: Provenance | None = None
) -> None:
    """Write the JSON report atomically (a half-written report must never be read)."""
    write_text_atomically(path, render_json(run, fingerprints, provenance))


def read_report(path: Path, fix: str) -> Report:
    """A JSON report the gate wrote, every value checked against its schema (``merge`` and
    ``history`` read them back); DocumentError, ending in ``fix``, if not."""
    report: Report = read_document(
        path,
        formats=(FORMAT,),
        versions={VERSION: Report},
        what="transfer-gate JSON report",
        fix=fix,
    )
    return report
