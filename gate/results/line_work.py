"""Work by source line: what each of the user's lines costs the step, counted from its ops' shapes.

XLA's own figures are per program (`gate.results.costs`); a reviewer told that
``jit(train_step)`` does 1.3x the flops still has to find the line. The optimized program
names each op's source line (`gate.witness.line_work` reads it), so the work is summed
per line here, and base and head (or the stored baseline) compare line by line.

The figures are counted from the ops' shapes (a dot: 2·M·N·K), not measured: the same
program always gives the same table, on every platform, so a change is exact. They
follow XLA's own accounting closely but not to the flop (XLA's cost analysis has no
per-op figure to check them against), so they rank and compare lines; the step's
totals stay XLA's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gate.text import counted, number_text

LINE_METRICS = ("flops", "bytes_accessed", "transcendentals")
# Where an op's source line is not in the program (an op XLA made up, with no metadata).
NO_LINE = "(no source line)"


@dataclass(frozen=True)
class LineWork:
    """One source line's work per step, over every program of the step that has ops from it."""

    path: str  # relative to the repo root when under it; "" for ops with no line
    line: int
    function: str  # the Python function the line is in, "" where unknown
    source: str | None  # the line's text
    flops: float
    bytes_accessed: float
    transcendentals: float
    # The heaviest kinds of op on the line, ``dot f32[1024,256]·f32[256,1024]`` (``3x add
    # f32[8]`` for repeats), heaviest first, at most `MOST_OPS`; `op_count` counts them all.
    ops: tuple[str, ...]
    op_count: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else NO_LINE

    @property
    def kind(self) -> str:
        """The opcode of its heaviest op (``dot``); "" for a line without ops."""
        words = self.ops[0].split() if self.ops else [""]
        counted_op = len(words) > 1 and words[0].endswith("x") and words[0][:-1].isdigit()
        return words[1] if counted_op else words[0]  # ``3x add f32[8]`` is an add

    def figure(self, metric: str) -> float:
        value: float = getattr(self, metric)
        return value

    def ops_text(self) -> str:
        """``dot f32[8,8]·f32[8,8], add f32[8,8]`` (``(+3 more ops)`` past what is kept)."""
        more = self.op_count - sum(_repeats(op) for op in self.ops)
        return ", ".join(self.ops) + (f" (+{counted(more, 'more op')})" if more > 0 else "")


MOST_OPS = 4


def _repeats(op: str) -> int:
    count, _, rest = op.partition("x ")
    return int(count) if rest and count.isdigit() else 1


@dataclass(frozen=True)
class LineChange:
    """One line in the base and the head: grown, shrunk, new (no base) or gone (no head)."""

    base: LineWork | None
    head: LineWork | None
    share: float  # the largest share of a step total that moved: what orders the listing

    @property
    def new(self) -> bool:
        return self.base is None

    @property
    def gone(self) -> bool:
        return self.head is None

    @property
    def shown(self) -> LineWork:
        """The side a reader is told about: the head's, or the base's for a line gone."""
        found = self.head if self.head is not None else self.base
        assert found is not None  # a change has at least one side
        return found

    def text(self, against: str = "base") -> str:
        """``model.py:42: dot f32[1024,256]·f32[256,1024]: flops 5.40e8 → 2.10e9 (3.89x)``;
        ``new at model.py:57: sort f32[128,256]: flops ...``; ``gone: model.py:50: ...``."""
        line = self.shown
        if self.base is None or self.head is None:
            figures = ", ".join(
                f"{m} {number_text(line.figure(m))}" for m in LINE_METRICS if line.figure(m)
            )
            lead = f"new at {line.where}" if self.new else f"gone: {line.where}"
            return f"{lead}: {line.ops_text()}" + (f": {figures}" if figures else "")
        moved = self.base.where != self.head.where
        where = self.head.where + (f" ({against}: line {self.base.line})" if moved else "")
        changed = []
        for metric in LINE_METRICS:
            old, new = self.base.figure(metric), self.head.figure(metric)
            if _differs(old, new):
                ratio = f" ({new / old:.2f}x)" if old else ""
                changed.append(f"{metric} {number_text(old)} → {number_text(new)}{ratio}")
        return f"{where}: {line.ops_text()}: {'; '.join(changed)}"


@dataclass(frozen=True)
class LineComparison:
    """Head's lines against the base's: the changed ones, most first, then new, then gone."""

    changes: tuple[LineChange, ...]  # grown or shrunk (most first), new (most first), gone
    unchanged: int  # lines in both with the same work, counted, never listed

    def listing(self, against: str = "base", most: int | None = None) -> list[str]:
        """One line per change, in order; past ``most``, a count of the rest."""
        shown = self.changes if most is None else self.changes[:most]
        lines = [change.text(against) for change in shown]
        rest = len(self.changes) - len(shown)
        if rest > 0:
            lines.append(f"(+{counted(rest, 'more line')} changed)")
        if self.unchanged:
            lines.append(f"({counted(self.unchanged, 'line')} unchanged, not listed)")
        return lines


def compare_lines(base: Sequence[LineWork], head: Sequence[LineWork]) -> LineComparison:
    """Each head line paired with its base line, and what changed.

    A line is the same line when it has the same text in the same file and function,
    even where an edit above it moved its number (``run --base`` compares two trees);
    then by its number where its text changed and its heaviest op is of the same kind.
    The rest are new or gone (a line both edited and moved among them).
    """
    # An edited line at the same number is the same line where it does the same kind of work:
    # a sort where a dot was is a line gone and another new.
    pairs, base_left, head_left = paired(list(base), list(head), lambda x: (x.path, x.line, x.kind))
    totals = {
        m: max(sum(x.figure(m) for x in base), sum(x.figure(m) for x in head), 1.0)
        for m in LINE_METRICS
    }

    def share(old: LineWork | None, new: LineWork | None) -> float:
        return max(
            abs((new.figure(m) if new else 0.0) - (old.figure(m) if old else 0.0)) / totals[m]
            for m in LINE_METRICS
        )

    changed, unchanged = [], 0
    for old, new in pairs:
        if any(_differs(old.figure(m), new.figure(m)) for m in LINE_METRICS):
            changed.append(LineChange(old, new, share(old, new)))
        else:
            unchanged += 1
    new_lines = [LineChange(None, new, share(None, new)) for new in head_left]
    gone_lines = [LineChange(old, None, share(old, None)) for old in base_left]

    def order(changes: list[LineChange]) -> list[LineChange]:
        return sorted(changes, key=lambda c: (-c.share, c.shown.path, c.shown.line))

    return LineComparison((*order(changed), *order(new_lines), *order(gone_lines)), unchanged)


def _differs(old: float, new: float) -> bool:
    """Different as the reports print them: not 1.00x, or from or to 0."""
    if old == new:
        return False
    return not old or not new or f"{new / old:.2f}" != "1.00"


class SourceLine(Protocol):
    """What pairs two tables' lines: a place and its text."""

    @property
    def path(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def function(self) -> str: ...
    @property
    def source(self) -> str | None: ...


L = TypeVar("L", bound=SourceLine)


def paired(
    base: list[L], head: list[L], same_place: Callable[[L], object] | None = None
) -> tuple[list[tuple[L, L]], list[L], list[L]]:
    """Base and head lines paired: the same place with the same text, then the same text in
    the same file and function (an edit above moved it), then the same place (``same_place``
    says what else must agree there); with the base lines left over (gone) and the head's
    (new), each in its table's order."""
    pairs: list[tuple[L, L]] = []
    keys: tuple[Callable[[L], object], ...] = (
        lambda x: (x.path, x.line, x.source),
        lambda x: (x.path, x.function, x.source) if x.source else None,
        same_place or (lambda x: (x.path, x.line)),
    )
    for key in keys:
        waiting: dict[object, list[L]] = {}
        for old in base:
            k = key(old)
            if k is not None:
                waiting.setdefault(k, []).append(old)
        left = []
        for new in head:
            k = key(new)
            found = waiting.get(k) if k is not None else None
            if found:
                pairs.append((found.pop(0), new))
            else:
                left.append(new)
        taken = {id(old) for old, _ in pairs}
        base = [old for old in base if id(old) not in taken]
        head = left
    return pairs, base, head
