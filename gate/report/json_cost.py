"""The JSON report's cost: XLA's figures for the step, and what changed against base or baseline.

Documented in docs/reports.md ("Cost"). Fields are only added, as the rest of the report's
version 1. Records of the report's schema (`gate.report.json_report`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import msgspec

from gate.documents import Count, Record
from gate.report.json_collectives import CommunicationDoc
from gate.report.json_lines import (
    LineComparisonDoc,
    LineTimeComparisonDoc,
    LineWorkDoc,
    OpTimesDoc,
    line_table_doc,
)
from gate.results.costs import CostComparison, StepCost

R = TypeVar("R", bound=Record)


def _records(items: Iterable[object], record: type[R]) -> tuple[R, ...]:
    """Each of ``items`` as ``record``, field by field from its attributes of the same names."""
    return tuple(msgspec.convert(item, record, from_attributes=True) for item in items)


class ConstantDoc(Record, frozen=True, kw_only=True):
    """An array compiled into a program as a constant (`gate.results.constants`)."""

    function: str
    shape: str
    size_bytes: int
    path: str  # the user's line that used it; "" where none is known
    line: int
    source: str | None
    # The op XLA computed it from while compiling; "" for an array the function captured.
    folded_from: str = ""


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
    # The work bound in force (``cost.max_work_increase``, 1.5 unless set).
    max_work_increase: float | None = None
    # Constants the head's programs embed that the other side's do not (each fails).
    new_constants: tuple[ConstantDoc, ...] = ()

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
            max_work_increase=cost.max_work_increase,
            new_constants=_records(cost.new_constants, ConstantDoc),
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
    # Its loops whose trip count is unknown, counted once a run: its work is a floor.
    loops: str = ""


class PeakDoc(Record, frozen=True, kw_only=True):
    device: str
    peak_bytes: Count
    peak_before_bytes: Count
    in_use_before_bytes: Count
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
    # Arrays of 1 MiB or more compiled into the programs as constants; null when not read.
    constants: tuple[ConstantDoc, ...] | None = None

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
                        loops=f.loops,
                    ),
                    **dict(f.figures),
                )
                for f in cost.functions
            ),
            peak_memory=None if peaks is None else _records(peaks, PeakDoc),
            communication=CommunicationDoc.of(cost.comm),
            lines=line_table_doc(cost.lines),
            times=OpTimesDoc.of(cost.times),
            constants=None if cost.constants is None else _records(cost.constants, ConstantDoc),
        )
