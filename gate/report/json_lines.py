"""The JSON report's work and op time by source line: each line's figures, and how they changed.

Documented in docs/reports.md ("Work by line"). Fields are only added, as the rest of the
report's version 1. Records of the report's schema (`gate.report.json_report`).
"""

from __future__ import annotations

from typing import Literal

from gate.documents import Record
from gate.results.line_times import LineTime, LineTimeComparison, OpTimes
from gate.results.line_work import LineChange, LineComparison, LineWork


class LineWorkDoc(Record, frozen=True, kw_only=True):
    """One source line's work per step, counted from its ops' shapes."""

    where: str  # "model.py:42", or "(no source line)"
    path: str  # "" for the ops of no source line
    line: int
    function: str
    source: str | None
    flops: float
    bytes_accessed: float
    transcendentals: float
    ops: tuple[str, ...]  # the heaviest kinds of op, ``dot f32[8,8]·f32[8,8]``
    op_count: int

    @classmethod
    def of(cls, w: LineWork) -> LineWorkDoc:
        return cls(
            where=w.where,
            path=w.path,
            line=w.line,
            function=w.function,
            source=w.source,
            flops=w.flops,
            bytes_accessed=w.bytes_accessed,
            transcendentals=w.transcendentals,
            ops=w.ops,
            op_count=w.op_count,
        )


class LineChangeDoc(Record, frozen=True, kw_only=True):
    """A line whose work changed, new in the head, or gone from it; both sides' figures."""

    status: Literal["changed", "new", "gone"]
    # What the change did to the line's code (``run --base``, git's line map): "changed",
    # "new", "moved", "removed", or "unchanged" (the same code, compiled differently);
    # "" where no line map says (a stored baseline, the ops of no source line).
    code: Literal["changed", "new", "moved", "unchanged", "removed", ""]
    text: str  # as the other reports print it
    # The largest share of a step total this line's change moved: what orders the list.
    share: float
    base: LineWorkDoc | None
    head: LineWorkDoc | None

    @classmethod
    def of(cls, change: LineChange, against: str) -> LineChangeDoc:
        return cls(
            status="new" if change.new else "gone" if change.gone else "changed",
            code=change.code,  # type: ignore[arg-type]  # one of `gate.results.line_work`'s
            text=change.text(against),
            share=change.share,
            base=None if change.base is None else LineWorkDoc.of(change.base),
            head=None if change.head is None else LineWorkDoc.of(change.head),
        )


class LineComparisonDoc(Record, frozen=True, kw_only=True):
    """Every line that changed (most first, then new, then gone); the unchanged, counted."""

    changes: tuple[LineChangeDoc, ...]
    unchanged: int

    @classmethod
    def of(cls, lines: LineComparison | None, against: str) -> LineComparisonDoc | None:
        if lines is None:
            return None
        return cls(
            changes=tuple(LineChangeDoc.of(c, against) for c in lines.changes),
            unchanged=lines.unchanged,
        )


def line_table_doc(lines: tuple[LineWork, ...] | None) -> tuple[LineWorkDoc, ...] | None:
    """A step's line table, in file and line order; None where it was not counted."""
    return None if lines is None else tuple(LineWorkDoc.of(w) for w in lines)


class LineTimeDoc(Record, frozen=True, kw_only=True):
    """One source line's op time per step, from the profiler's traced runs."""

    where: str
    path: str
    line: int
    function: str
    source: str | None
    seconds: float
    ops: tuple[str, ...]  # the profiler's names of its longest ops

    @classmethod
    def of(cls, t: LineTime) -> LineTimeDoc:
        return cls(
            where=t.where,
            path=t.path,
            line=t.line,
            function=t.function,
            source=t.source,
            seconds=t.seconds,
            ops=t.ops,
        )


class OpTimesDoc(Record, frozen=True, kw_only=True):
    """The step's op time by line (longest first), and the trace it was read from."""

    runs: int
    trace: str | None  # the folder with Perfetto's and XProf's files, beside the reports
    note: str  # why there are no per-op times; "" when there are
    lines: tuple[LineTimeDoc, ...]

    @classmethod
    def of(cls, times: OpTimes | None) -> OpTimesDoc | None:
        if times is None:
            return None
        return cls(
            runs=times.runs,
            trace=times.trace,
            note=times.note,
            lines=tuple(LineTimeDoc.of(t) for t in times.lines),
        )


class LineTimeChangeDoc(Record, frozen=True, kw_only=True):
    text: str
    grown_s: float
    base: LineTimeDoc | None
    head: LineTimeDoc | None


class LineTimeComparisonDoc(Record, frozen=True, kw_only=True):
    """Every line's op time in both sides, the lines whose time grew most first."""

    base_runs: int
    head_runs: int
    changes: tuple[LineTimeChangeDoc, ...]

    @classmethod
    def of(cls, times: LineTimeComparison | None, against: str) -> LineTimeComparisonDoc | None:
        if times is None:
            return None
        return cls(
            base_runs=times.base_runs,
            head_runs=times.head_runs,
            changes=tuple(
                LineTimeChangeDoc(
                    text=c.text(against),
                    grown_s=c.grown_s,
                    base=None if c.base is None else LineTimeDoc.of(c.base),
                    head=None if c.head is None else LineTimeDoc.of(c.head),
                )
                for c in times.changes
            ),
        )
