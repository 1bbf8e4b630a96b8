"""Op time by source line: the device time the profiler saw each op take, summed per user line.

A "1.32x slower" verdict says that a step got slower, not where. A few traced runs after
the timed ones (`gate.witness.op_times`) give each op's time in JAX's profiler trace; each
op is a line's (`gate.witness.line_work`), so the time is summed per line here, and a
slower step lists the lines whose time grew most, with both times.

Unlike work by line (`gate.results.line_work`) these are measured, so noisy: they name
where time went, they never judge. The step-time verdict stays the timed runs'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gate.results.line_map import LineMap
from gate.results.line_work import NO_LINE, paired
from gate.results.moves import Spot, matched
from gate.text import counted, duration_text

LINE_TIMES_LISTED = 20  # lines a report lists before counting the rest


@dataclass(frozen=True)
class LineTime:
    """One source line's op time per step, over the traced runs."""

    path: str  # "" for ops the programs give no line
    line: int
    function: str
    source: str | None
    seconds: float  # mean device time per step of the ops charged to it
    ops: tuple[str, ...]  # the profiler's names of its longest ops (``fusion.3``), at most 4

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else NO_LINE


@dataclass(frozen=True)
class OpTimes:
    """The step's op times by line, from its traced runs, and where the trace is kept."""

    lines: tuple[LineTime, ...]  # longest first
    runs: int  # traced runs the times are the mean of
    # The folder holding the trace (Perfetto's ``perfetto_trace.json.gz`` and XProf's
    # ``.xplane.pb``); None where none was kept.
    trace: str | None = None
    # Why there are no per-op times (the backend's trace has none, tracing failed); "" when
    # there are. A reader is told in one line; work by line still stands.
    note: str = ""

    @classmethod
    def not_traced(cls, why: str, runs: int = 0) -> OpTimes:
        """No op times: the traced runs did not happen or failed, ``why`` in one line."""
        return cls((), runs, note=f"op times not traced: {why}")

    @property
    def total_s(self) -> float:
        return sum(t.seconds for t in self.lines)


@dataclass(frozen=True)
class LineTimeChange:
    """One line's op time in the base and the head (None: no time on that side)."""

    base: LineTime | None
    head: LineTime | None

    @property
    def grown_s(self) -> float:
        return (self.head.seconds if self.head else 0.0) - (self.base.seconds if self.base else 0.0)

    def text(self, against: str = "base") -> str:
        """``model.py:42: 0.41 ms → 1.63 ms``; ``new at model.py:57: 0.20 ms``; ``gone: ...``."""
        if self.base is None:
            assert self.head is not None  # a change has at least one side
            return f"new at {self.head.where}: {duration_text(self.head.seconds)}"
        if self.head is None:
            return f"gone: {self.base.where}: {duration_text(self.base.seconds)}"
        moved = self.base.where != self.head.where
        where = self.head.where + (f" ({against}: line {self.base.line})" if moved else "")
        return f"{where}: {duration_text(self.base.seconds)} → {duration_text(self.head.seconds)}"


@dataclass(frozen=True)
class LineTimeComparison:
    """Every line's op time in base and head, the lines whose time grew most first."""

    changes: tuple[LineTimeChange, ...]  # by time grown, most first (shrunk ones last)
    base_runs: int
    head_runs: int

    def grown(self, most: int | None = LINE_TIMES_LISTED, at_least_s: float = 0.0) -> list[str]:
        """The lines whose time grew (by more than ``at_least_s``), most first; past ``most``,
        a count of the rest."""
        grew = [c for c in self.changes if c.grown_s > max(at_least_s, 0.0)]
        shown = grew if most is None else grew[:most]
        lines = [c.text() for c in shown]
        if len(grew) > len(shown):
            lines.append(f"(+{counted(len(grew) - len(shown), 'more line')} grew)")
        return lines


def compare_line_times(
    base: OpTimes, head: OpTimes, lines: LineMap | None = None
) -> LineTimeComparison | None:
    """Head's op times by line against the base's; None when a side has no per-op times.

    ``lines``, git's line map (``run --base``): a line is the base line it maps to, or the
    line its change replaced (`gate.results.moves`); without one (a stored baseline), the
    same text in the same file and function, else the same number (`paired`)."""
    if base.note or head.note or not base.lines or not head.lines:
        return None
    if lines is None:
        pairs, gone, new = paired(list(base.lines), list(head.lines))
    else:
        found = matched(list(head.lines), list(base.lines), _spot, _spot, lines)
        pairs = [(p.old, p.new) for p in found]
        taken = {id(p.old) for p in found} | {id(p.new) for p in found}
        gone = [old for old in base.lines if id(old) not in taken]
        new = [now for now in head.lines if id(now) not in taken]
    changes = [
        *(LineTimeChange(old, now) for old, now in pairs),
        *(LineTimeChange(None, now) for now in new),
        *(LineTimeChange(old, None) for old in gone),
    ]
    ordered = sorted(changes, key=lambda c: (-c.grown_s, _where(c)))
    return LineTimeComparison(tuple(ordered), base.runs, head.runs)


def _spot(time: LineTime) -> Spot:
    """A line's op time as `gate.results.moves` reads it: its place alone (a time has no kind)."""
    return Spot(time.path, time.line, time.function, "")


def _where(change: LineTimeChange) -> tuple[str, int]:
    line = change.head if change.head is not None else change.base
    return (line.path, line.line) if line is not None else ("", 0)


def line_times_text(times: Sequence[LineTime], most: int = 3) -> str:
    """``model.py:42 1.63 ms, model.py:57 0.20 ms``: where a step's op time goes."""
    return ", ".join(f"{t.where} {duration_text(t.seconds)}" for t in times[:most])
