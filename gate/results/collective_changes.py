"""Head's collectives against the base's (or the stored baseline's): new, grown, gone.

Collectives are matched by `Collective.identity` (kind, axes, program, the line's file and
text); each side's collectives of one identity are taken together. A collective the other
side does not run is new (what ``collectives:`` judges), one whose executions or bytes per
step rose grew, one the head no longer runs is gone; a new one that is a gone one at
another line of the same function (same kind, shapes and groups: `gate.results.moves`)
moved, and does not fail. ``cost.max_increase`` bounds the
step's communicated bytes as it bounds its other cost totals. Nothing here is noisy: the
figures come from the compiled programs, so every difference is real. The unused donations
of the same programs travel with the comparison (`CommComparison.donations`), judged apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from gate.policy.model import CollectiveRule
from gate.results.collectives import CollectiveGroup, Communication, grouped
from gate.results.donation_changes import DonationComparison
from gate.results.line_map import MOVED as MOVED_LINE
from gate.results.line_map import UNCHANGED as UNCHANGED_LINE
from gate.results.line_map import LineMap
from gate.results.moves import collective_key, collective_spot, matched, moved_only
from gate.text import accepted_text, bytes_text
from gate.user_code import SourceLocation

NEW, GROWN, SHRUNK, CHANGED, MOVED, GONE = "new", "grown", "shrunk", "changed", "moved", "gone"


@dataclass(frozen=True)
class CollectiveChange:
    """One identity whose collectives differ between the two sides."""

    # NEW (none on the other side, or more of them there), GROWN, SHRUNK, CHANGED (same
    # bytes and runs, another buffer), MOVED (the same ones at another line: not new,
    # `gate.results.moves`) or GONE
    change: str
    base: CollectiveGroup | None  # None: NEW where the other side has none
    head: CollectiveGroup | None  # None: GONE
    against: str  # "base" or "baseline"
    failing: bool = False  # NEW under ``collectives: fail``
    warning: bool = False  # NEW under ``collectives: warn``
    # ``run --base``: what the change did to its line (git's line map), "changed line",
    # "new line", "unchanged line", "removed line"; "" against a stored baseline or moved.
    code: str = ""

    @property
    def location(self) -> SourceLocation | None:
        side = self.head if self.head is not None else self.base
        assert side is not None
        return side.sample.location

    @property
    def source(self) -> str | None:
        side = self.head if self.head is not None else self.base
        assert side is not None
        return side.sample.source

    def text(self) -> str:
        """``new all-gather f32[64,128] over 'data', 32.8 kB/step/device (base: none)``,
        then what the change did to its line (`` (changed line)``) where that is known."""
        return self._text() + (f" ({self.code})" if self.code else "")

    def _text(self) -> str:
        head, base, other = self.head, self.base, self.against
        if self.change == NEW and base is not None:  # more of them at the same place
            assert head is not None
            return (
                f"new {head.sample.kind} at this line: {head.count} where the {other} has "
                f"{base.count} ({head.text()}), {_per_step(head)}/step/device "
                f"({other}: {_per_step(base)})"
            )
        if self.change == NEW:
            assert head is not None
            return f"new {head.text()}, {_per_step(head)}/step/device{_runs(head)} ({other}: none)"
        if self.change == GONE:
            assert base is not None
            return f"{base.text()} no longer runs ({other}: {_per_step(base)}/step/device)"
        if self.change == MOVED:
            assert head is not None
            assert base is not None
            return (
                f"{head.text()} moved from {_place(base)}, not new (same kind, shapes and "
                f"groups): {_per_step(base)} → {_per_step(head)}/step/device"
                f"{_runs_change(base, head)}"
            )
        assert head is not None
        assert base is not None
        return (
            f"{head.text()} {self.change}: {_per_step(base)} → {_per_step(head)}/step/device"
            f"{_runs_change(base, head)} ({other}: {base.text()})"
        )

    def line(self, fallback: str) -> str:
        """``model.py:42: new all-gather ...``; ``fallback`` (the policy line) without a line."""
        where = str(self.location) if self.location is not None else fallback
        prefix = "warning (collectives: warn): " if self.warning else ""
        return f"{where}: {prefix}{self.text()}"


def _place(group: CollectiveGroup) -> str:
    where = group.sample.location
    return str(where) if where is not None else group.sample.op_name or "an unknown line"


def _per_step(group: CollectiveGroup) -> str:
    return bytes_text(group.bytes_per_step)


def _runs(group: CollectiveGroup) -> str:
    return f", {group.runs}x per step" if group.runs != group.count else ""


def _runs_change(base: CollectiveGroup, head: CollectiveGroup) -> str:
    return f", {base.runs}x → {head.runs}x per step" if base.runs != head.runs else ""


@dataclass(frozen=True)
class CommComparison:
    """Head's communication against the base's (or the stored baseline's)."""

    against: str  # "base" or "baseline"
    changes: tuple[CollectiveChange, ...]  # new first, then grown, changed, shrunk, gone
    rule: CollectiveRule
    max_increase: float | None  # ``cost.max_increase``: also bounds the bytes per step
    base_bytes: int | None = None  # communicated bytes per device per step; None: not read
    head_bytes: int | None = None
    compared: bool = True  # False: a side's collectives could not be read; ``note`` says why
    note: str = ""
    # The unused donations, compared from the same programs and judged by ``donation:``
    # (`gate.results.donation_changes`); None under ``donation: allow`` or where not compared.
    donations: DonationComparison | None = None
    # Where the head's policy accepts the collectives' change, and why (`gate.compare.acceptance`).
    accepted: str = ""

    @property
    def bytes_failing(self) -> bool:
        """The step's bytes beyond ``max_increase`` times the other side's (growth from 0 too)."""
        if self.max_increase is None or self.base_bytes is None or self.head_bytes is None:
            return False
        return self.head_bytes > self.base_bytes * self.max_increase

    @property
    def unchecked(self) -> str | None:
        """Why a declared check could not be made: a side without an inventory under
        ``collectives: fail`` or a ``cost.max_increase``. A pass would claim it, so it fails."""
        if self.compared:
            return None
        if self.rule is CollectiveRule.FAIL or self.max_increase is not None:
            return self.note
        return None

    @property
    def collectives_failing(self) -> bool:
        """The collectives alone: a new one under ``collectives: fail``, the bytes, a gap."""
        if self.accepted:
            return False
        return (
            self.unchecked is not None or self.bytes_failing or any(c.failing for c in self.changes)
        )

    @property
    def failing(self) -> bool:
        """The collectives, or a donation lost under ``donation: fail_new`` (or not checked)."""
        return self.collectives_failing or (self.donations is not None and self.donations.failing)

    @property
    def new(self) -> tuple[CollectiveChange, ...]:
        return tuple(c for c in self.changes if c.change == NEW)

    def bytes_line(self) -> str:
        """``comm 8.19 kB → 41 kB/step/device (5.00x)``; "" when equal or not read."""
        base, head = self.base_bytes, self.head_bytes
        if base is None or head is None or base == head:
            return ""
        ratio = f" ({head / base:.2f}x)" if base else ""
        lead = (
            f"comm beyond {self.max_increase:g}x the {self.against}"
            if self.bytes_failing and self.max_increase is not None
            else "comm"
        )
        return f"{lead}: {bytes_text(base)} → {bytes_text(head)}/step/device{ratio}"

    def headline(self, most: int = 3) -> str:
        """One line: what fails first, then what else changed, and where it is accepted."""
        return self._headline(most) + accepted_text(self.accepted)

    def _headline(self, most: int) -> str:
        if self.unchecked is not None:
            why = (
                "collectives: fail"
                if self.rule is CollectiveRule.FAIL
                else f"cost.max_increase {self.max_increase:g}x"
            )
            return (
                f"collectives not checked against the {self.against}: {self.unchecked}, "
                f"so {why} cannot hold"
            )
        if not self.compared:
            return f"collectives not compared: {self.note}"
        parts = [self.bytes_line()] if self.bytes_failing else []
        shown = list(self.changes)
        parts.extend(c.text() for c in shown[:most])
        if len(shown) > most:
            parts.append(f"+{len(shown) - most} more")
        if not self.bytes_failing and self.bytes_line():
            parts.append(self.bytes_line())
        if not parts:
            return f"collectives unchanged against the {self.against}"
        return "; ".join(parts)


_ORDER = {NEW: 0, GROWN: 1, CHANGED: 2, SHRUNK: 3, MOVED: 4, GONE: 5}


def compare_communication(
    base: Communication | None,
    head: Communication | None,
    rule: CollectiveRule,
    max_increase: float | None,
    *,
    against: str = "base",
    missing: str = "",
    lines: LineMap | None = None,
) -> CommComparison:
    """Every identity whose collectives differ; a new one fails under ``collectives: fail``.

    ``missing`` says why a side that is None has no inventory (its cost run did not
    happen, a baseline recorded before inventories were). A head that runs no collective
    needs no other side: nothing of it can be new, and its bytes (0) pass any bound.
    ``lines``: git's line map (``run --base``), which pairs them by `gate.results.moves`'s
    rule; None (a stored baseline) pairs them by their line's text (`Collective.identity`).
    """
    base_unread = base is None or not base.measured
    if head is not None and head.measured and not head.collectives and base_unread:
        return CommComparison(against, (), rule, max_increase, head_bytes=0)
    for side, comm in ((against, base), ("head", head)):
        if comm is None or not comm.measured:
            why = comm.note if comm is not None else missing or "its cost run did not happen"
            note = f"{side}: {why}"
            return CommComparison(against, (), rule, max_increase, compared=False, note=note)
    assert base is not None
    assert head is not None
    old, new = grouped(base.collectives), grouped(head.collectives)
    if lines is not None:
        changes = _by_lines(list(old.values()), list(new.values()), rule, against, lines)
    else:
        changes = _by_identity(old, new, rule, against)
    changes.sort(key=lambda c: _ORDER[c.change])
    return CommComparison(
        against,
        tuple(changes),
        rule,
        max_increase,
        base_bytes=base.bytes_per_step,
        head_bytes=head.bytes_per_step,
    )


def _by_lines(
    old: list[CollectiveGroup],
    new: list[CollectiveGroup],
    rule: CollectiveRule,
    against: str,
    lines: LineMap,
) -> list[CollectiveChange]:
    """Head's groups against the base's, each paired with the base's it is by the line map."""
    pairs = {id(p.new): p for p in matched(new, old, collective_spot, collective_spot, lines)}
    changes = []
    for group in new:
        pair = pairs.get(id(group))
        was = pair.old if pair is not None else None
        if pair is not None and pair.how == MOVED_LINE:  # with its file, or its code
            changes.append(CollectiveChange(MOVED, was, group, against))
            continue
        code = _code(lines, group, new=was is None or group.count > was.count)
        # None there, or more of them at the same place (a second psum on the line): new.
        if was is None or group.count > was.count:
            changes.append(_new(was, group, rule, against, code))
            continue
        change = _change(was, group)
        if change is not None:
            changes.append(CollectiveChange(change, was, group, against, code=code))
    paired_old = {id(p.old) for p in pairs.values()}
    changes.extend(
        CollectiveChange(GONE, g, None, against, code=_gone_code(lines, g))
        for g in old
        if id(g) not in paired_old
    )
    return changes


def _code(lines: LineMap, group: CollectiveGroup, *, new: bool) -> str:
    """What the change did to the head's line of ``group``: ``changed line``, ``new line``,
    ``unchanged line``; a ``new`` one on an unchanged line, which change caused it where the
    gate can tell (a spec changed above it); "" without a line of the user's."""
    where = group.sample.location
    if where is None:
        return ""
    status = lines.place(where.path, where.line).status
    if status not in (MOVED_LINE, UNCHANGED_LINE):
        return f"{status} line"
    cause = lines.cause(where.path, where.line) if new else None
    return f"unchanged line; the change at {cause} caused it" if cause else "unchanged line"


def _gone_code(lines: LineMap, group: CollectiveGroup) -> str:
    """What the change did to the base's line of a collective the head no longer runs."""
    where = group.sample.location
    if where is None:
        return ""
    return f"{lines.base_status(where.path, where.line)} line"


def _by_identity(
    old: dict[tuple[str, ...], CollectiveGroup],
    new: dict[tuple[str, ...], CollectiveGroup],
    rule: CollectiveRule,
    against: str,
) -> list[CollectiveChange]:
    """Head's groups against the base's by `Collective.identity` (the line's text), what is
    left over paired by `gate.results.moves.moved_only`."""
    changes = []
    for key, group in new.items():
        was = old.get(key)
        # None there, or more of them at the same place (a second psum on the line): new.
        if was is None or group.count > was.count:
            changes.append(_new(was, group, rule, against))
            continue
        change = _change(was, group)
        if change is not None:
            changes.append(CollectiveChange(change, was, group, against))
    gone = [group for key, group in old.items() if key not in new]
    # A new one (none of its identity there) that is a gone one at another line only moved.
    fresh = [c.head for c in changes if c.change == NEW and c.base is None and c.head]
    moved = moved_only(fresh, gone, collective_key, collective_key)
    arrived = {id(head): was for head, was in moved}
    left = {id(was) for _, was in moved}
    changes = [
        CollectiveChange(MOVED, arrived[id(c.head)], c.head, against)
        if c.change == NEW and c.base is None and id(c.head) in arrived
        else c
        for c in changes
    ]
    changes.extend(CollectiveChange(GONE, g, None, against) for g in gone if id(g) not in left)
    return changes


def _new(
    was: CollectiveGroup | None,
    group: CollectiveGroup,
    rule: CollectiveRule,
    against: str,
    code: str = "",
) -> CollectiveChange:
    """``group`` new against ``against`` (``was``: fewer of it there), failing or warned of as
    the region's rule says."""
    return CollectiveChange(
        NEW,
        was,
        group,
        against,
        failing=rule is CollectiveRule.FAIL,
        warning=rule is CollectiveRule.WARN,
        code=code,
    )


def _change(base: CollectiveGroup, head: CollectiveGroup) -> str | None:
    if (head.bytes_per_step, head.runs) == (base.bytes_per_step, base.runs):
        return None if head.buffers == base.buffers else CHANGED
    if head.bytes_per_step >= base.bytes_per_step and head.runs >= base.runs:
        return GROWN
    if head.bytes_per_step <= base.bytes_per_step and head.runs <= base.runs:
        return SHRUNK
    return CHANGED
