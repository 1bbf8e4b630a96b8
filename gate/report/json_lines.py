"""The JSON report's work by source line: each line's figures, and how they changed.

Documented in docs/reports.md ("Work by line"). Fields are only added, as the rest of the
report's version 1. Records of the report's schema (`gate.report.json_report`).
"""

from __future__ import annotations

from typing import Literal

from gate.documents import Record
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
    text: str  # as the other reports print it
    # The largest share of a step total this line's change moved: what orders the list.
    share: float
    base: LineWorkDoc | None
    head: LineWorkDoc | None

    @classmethod
    def of(cls, change: LineChange, against: str) -> LineChangeDoc:
        return cls(
            status="new" if change.new else "gone" if change.gone else "changed",
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
