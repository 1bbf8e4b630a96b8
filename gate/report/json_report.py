"""The JSON report: the full transfer map per region, for tools (and people with jq).

Format ``jax-transfer-gate.report``, version 1, documented in docs/reports.md
("JSON report"). Fields are only ever added within a version; renaming or
removing one bumps the version. One entry per finding: per array moved at a
line (`gate.results.findings`).

The report is declared once, as the records below (`Report` and what it holds): the gate
writes them, ``merge`` reads shards back with them, every value checked
(`gate.documents`), and ``transfer-gate schema report`` prints their JSON Schema. A figure
that is not finite (an unbounded interval, say) is written null: JSON has no infinity.
What a region holds is declared beside it, one job a module: its transfers and recompiles
(`gate.report.json_findings`), step times (`gate.report.json_timing`), cost
(`gate.report.json_cost`), collectives (`gate.report.json_collectives`), work by line
(`gate.report.json_lines`) and device memory (`gate.report.json_memory`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from gate.documents import Record, encode, read_document
from gate.files import write_text_atomically
from gate.levels import GuardSpec
from gate.package import __version__
from gate.policy.model import AcceptedChange
from gate.report.json_collectives import CommComparisonDoc, DonationDoc
from gate.report.json_cost import CostComparisonDoc, CostDoc
from gate.report.json_findings import FindingDoc, RecompileDoc
from gate.report.json_memory import MemoryDoc
from gate.report.json_timing import TimingDoc
from gate.results.comparison import (
    BaseComparison,
    BoundaryTime,
    LeafDifference,
    Renamed,
    ResultStatus,
)
from gate.results.errors import RegionError
from gate.results.findings import Finding, group
from gate.results.footprint import Footprint
from gate.results.machine import Machine
from gate.results.provenance import Provenance
from gate.results.records import BoundaryCost, CheckOutcome, RegionResult, RunResult, TimingStats

FORMAT: Literal["jax-transfer-gate.report"] = "jax-transfer-gate.report"
VERSION: Literal[1] = 1

# Each region's findings with their baseline fingerprints, by the region's classname
# (`gate.results.baseline.fingerprints_of`): the caller computes them, the report prints them.
Fingerprints = Mapping[str, Mapping[Finding, str]]


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


class BaseDoc(Record, frozen=True, kw_only=True):
    """The region against ``run --base``'s tree."""

    ref: str
    status: Literal["compared", "new_region", "base_failed", "unchanged"]
    failing: bool
    timing: TimingDoc | None
    results: ResultsDoc | None
    boundaries: tuple[BoundaryTime, ...]
    boundary_timing: tuple[TimingDoc, ...]
    error: ErrorDoc | None
    already_in_base: int
    # The callables the base ran from its own policy, the head's having been renamed.
    renamed: tuple[Renamed, ...]
    # Why the trees' workers held the device in turn, timed unpaired; "" when side by side.
    apart: str
    cost: CostComparisonDoc | None
    collectives: CommComparisonDoc | None
    first_call_s: FirstCalls
    # Unchanged: how many files of the head's footprint the base has (0 else), and how many of
    # them only as the same code, differing in comments or layout.
    same_files: int = 0
    same_code_files: int = 0
    # The head's policy's `accept:` entries that accepted a change here, each by kind, with
    # its reason and line in the policy file; their comparisons pass (docs/compare.md).
    accepted: tuple[AcceptedChange, ...] = ()

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
            same_files=base.same_files,
            same_code_files=base.same_code_files,
            accepted=base.accepted,
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
    # What the head's run read of its tree (``run --base``, `gate.results.footprint`).
    footprint: Footprint | None = None

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
                    in_base=r.in_base,
                    line_change=r.line_change,
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
            footprint=region.footprint,
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
