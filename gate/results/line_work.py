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

from gate.results.line_map import CHANGED, MOVED, NEW, REMOVED, UNCHANGED, LineMap
from gate.results.moves import Spot, matched
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
        return _op_kind(self.ops[0]) if self.ops else ""

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


# What the change did to a line's code (`gate.results.line_map`), as `LineChange.code` says.
# What the change did to a line's code: the line map's words (`gate.results.line_map`).
CODE_CHANGED, CODE_NEW, CODE_MOVED, CODE_UNCHANGED, CODE_REMOVED = (
    CHANGED, NEW, MOVED, UNCHANGED, REMOVED
)  # fmt: skip
COMPILED_DIFFERENTLY = "unchanged code, compiled differently"
# The order a listing gives: the change's own lines first, a line's cost the compiler moved
# last. "" (no line map: a stored baseline) sits with the change's own.
_CODE_ORDER = {CODE_CHANGED: 0, CODE_NEW: 0, "": 0, CODE_REMOVED: 1, CODE_MOVED: 2}


@dataclass(frozen=True)
class LineChange:
    """One line in the base and the head: grown, shrunk, new (no base) or gone (no head)."""

    base: LineWork | None
    head: LineWork | None
    share: float  # the largest share of a step total that moved: what orders the listing
    # What the change did to the line's code (``CODE_*``); "" where no line map says (a
    # stored baseline, or ops of no source line).
    code: str = ""

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

    @property
    def leads(self) -> bool:
        """Whether it may head a verdict: a line of the user's this change wrote (or, with no
        line map, any line of the user's); never one only compiled differently, nor the ops
        of no source line."""
        return bool(self.shown.path) and self.code not in (CODE_UNCHANGED, CODE_MOVED)

    def label(self, against: str = "base") -> str:
        """`` (changed line)``, `` (moved from a.py:3)``, `` (unchanged code, compiled
        differently)``; "" where nothing says."""
        if not self.shown.path or not self.code:
            return ""
        if self.code == CODE_MOVED and self.base is not None:
            return f" (moved from {self.base.where})"
        if self.code == CODE_UNCHANGED:
            return f" ({COMPILED_DIFFERENTLY})"
        return f" ({self.code} line)"

    def text(self, against: str = "base") -> str:
        """``model.py:42 (changed line): dot f32[1024,256]·f32[256,1024]: flops 5.40e8 →
        2.10e9 (3.89x)``; ``new at model.py:57 (new line): sort f32[128,256]: flops ...``;
        ``gone: model.py:50 (removed line): ...``."""
        line = self.shown
        label = self.label(against)
        if self.base is None or self.head is None:
            figures = ", ".join(
                f"{m} {number_text(line.figure(m))}" for m in LINE_METRICS if line.figure(m)
            )
            lead = f"new at {line.where}" if self.new else f"gone: {line.where}"
            return f"{lead}{label}: {line.ops_text()}" + (f": {figures}" if figures else "")
        moved = self.base.where != self.head.where and self.code != CODE_MOVED
        where = self.head.where + (f" ({against}: line {self.base.line})" if moved else "")
        changed = []
        for metric in LINE_METRICS:
            old, new = self.base.figure(metric), self.head.figure(metric)
            if _differs(old, new):
                ratio = f" ({new / old:.2f}x)" if old else ""
                changed.append(f"{metric} {number_text(old)} → {number_text(new)}{ratio}")
        figures = "; ".join(changed) if changed else "the same work"
        return f"{where}{label}: {line.ops_text()}: {figures}"


@dataclass(frozen=True)
class LineComparison:
    """Head's lines against the base's: the change's own lines first (changed most first, then
    new, then gone), then lines that moved, then unchanged code compiled differently."""

    changes: tuple[LineChange, ...]
    unchanged: int  # lines in both with the same work, counted, never listed
    # Where no line the change wrote does work of its own (an ``unroll=`` flag, a setting),
    # the change that compiled its unchanged code differently, as the line map guesses it
    # (`LineMap.cause`): ``muon.py:177``; "" where a line leads, or the gate cannot tell.
    cause: str = ""

    @property
    def lead(self) -> LineChange | None:
        """The line a verdict opens with (`LineChange.leads`); None when none may."""
        return next((c for c in self.changes if c.leads), None)

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


def compare_lines(
    base: Sequence[LineWork], head: Sequence[LineWork], lines: LineMap | None = None
) -> LineComparison:
    """Each head line paired with its base line, and what changed.

    ``lines``, git's line map (``run --base``): a line is the base line the map says it is
    (`gate.results.moves`: the same line, the line its change replaced when its heaviest op
    is of the same kind, or the same ops moved), and each change says what the change did
    to its code. Without one (a stored baseline), a line is the same line when it has the
    same text in the same file and function, even where an edit above it moved its number;
    then by its number where its text changed and its heaviest op is of the same kind.
    The rest are new or gone (a line both edited and moved among them).
    """
    if lines is None:
        # An edited line at the same number is the same line where it does the same kind of
        # work: a sort where a dot was is a line gone and another new.
        pairs, base_left, head_left = paired(
            list(base), list(head), lambda x: (x.path, x.line, x.kind)
        )
        how = {id(new): "" for _, new in pairs}
    else:
        found = matched(list(head), list(base), _line_spot, _line_spot, lines)
        pairs = [(p.old, p.new) for p in found]
        how = {id(p.new): p.how for p in found}
        taken = {id(p.old) for p in found}
        base_left = [old for old in base if id(old) not in taken]
        head_left = [new for new in head if id(new) not in how]
        # A rewritten line whose heaviest op changed kind (a sort added to a sum) is still
        # the line it replaced, at the same place in its hunk, where the two share a kind of
        # op: one line grown, not a line "new" and the same line "gone".
        for new in list(head_left):
            place = lines.place(new.path, new.line) if new.path else None
            if place is None or place.status != CHANGED:
                continue
            old = next(
                (
                    o
                    for o in base_left
                    if (o.path, o.line) == (place.base_path, place.base_line)
                    and _kinds(o) & _kinds(new)
                ),
                None,
            )
            if old is not None:
                pairs.append((old, new))
                how[id(new)] = CHANGED
                base_left.remove(old)
                head_left.remove(new)
    totals = {
        m: max(sum(x.figure(m) for x in base), sum(x.figure(m) for x in head), 1.0)
        for m in LINE_METRICS
    }

    def share(old: LineWork | None, new: LineWork | None) -> float:
        return max(
            abs((new.figure(m) if new else 0.0) - (old.figure(m) if old else 0.0)) / totals[m]
            for m in LINE_METRICS
        )

    def code(new: LineWork | None, old: LineWork | None) -> str:
        """What the change did to the line's code; "" without a map or a line."""
        if lines is None:
            return ""
        if new is None:
            assert old is not None
            if not old.path:
                return ""
            return lines.base_status(old.path, old.line)
        if not new.path:
            return ""
        if how.get(id(new)) == MOVED:
            return CODE_MOVED
        status = lines.place(new.path, new.line).status
        return CODE_UNCHANGED if status == MOVED else status

    changed, unchanged = [], 0
    for old, new in pairs:
        # A line moved with the same work is unchanged work: counted, not listed.
        if any(_differs(old.figure(m), new.figure(m)) for m in LINE_METRICS):
            changed.append(LineChange(old, new, share(old, new), code(new, old)))
        else:
            unchanged += 1
    new_lines = [LineChange(None, new, share(None, new), code(new, None)) for new in head_left]
    gone_lines = [LineChange(old, None, share(old, None), code(None, old)) for old in base_left]

    def order(changes: list[LineChange]) -> list[LineChange]:
        return sorted(
            changes,
            key=lambda c: (
                c.leads is False,
                _CODE_ORDER.get(c.code, 3),
                -c.share,
                c.shown.path,
                c.shown.line,
            ),
        )

    if lines is None:
        ordered = [*order(changed), *order(new_lines), *order(gone_lines)]
        # Ops of no source line never lead: after every line of the user's.
        ordered.sort(key=lambda c: not c.shown.path)
        return LineComparison(tuple(ordered), unchanged)
    ordered = order([*changed, *new_lines, *gone_lines])
    cause = ""
    if ordered and not any(c.leads for c in ordered):
        shown = next((c.shown for c in ordered if c.code == CODE_UNCHANGED and c.shown.path), None)
        cause = (lines.cause(shown.path, shown.line) or "") if shown is not None else ""
    return LineComparison(tuple(ordered), unchanged, cause)


def _kinds(work: LineWork) -> set[str]:
    """The kinds of op a line's kept ops are (``dot``, ``reduce``...)."""
    return {_op_kind(op) for op in work.ops}


def _op_kind(op: str) -> str:
    """``dot`` of ``dot f32[8,8]·f32[8,8]``; ``3x add f32[8]`` is an add."""
    words = op.split() or [""]
    counted_op = len(words) > 1 and words[0].endswith("x") and words[0][:-1].isdigit()
    return words[1] if counted_op else words[0]


def _line_spot(work: LineWork) -> Spot:
    """A line of the table as `gate.results.moves` reads it: the same kind of heaviest op on
    the same line; moved, the same ops (its code taken elsewhere does what it did)."""
    if not work.path:
        return Spot("", 0, "", "")  # the ops of no source line: one entry each side
    return Spot(work.path, work.line, work.function, work.kind, work.ops)


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
