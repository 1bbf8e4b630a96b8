"""The same finding in the base and the head: one rule for every finding that names a line.

A finding names a line, and git's line map (`gate.results.line_map`) says which base line
each head line is. Base and head findings are paired, one to one, in three passes:

1. **the same line**: a head finding on a line the diff does not touch (or that only moved
   with its renamed file) is the base's finding on the line it maps to, when it is the same
   kind of thing (`Spot.what`: a transfer's direction, kind and array; a collective's kind,
   participants and program; a recompile's program and kind; a line's heaviest op);
2. **a changed line**: a head finding on a line the change rewrote is the base's finding on
   a line that hunk replaced, in the same function (by its own name), when it is the same
   kind of thing. A comment appended, a variable renamed, a call reformatted over two
   lines: the same transfer. A second transfer added to the line has no second
   counterpart, and is new;
3. **moved**: what is left over on both sides, a head finding on a line the change wrote
   and a base finding on a line it removed, pairs when it is the same thing without its
   place (`Spot.alike`: the same function and text, or the same collective with the same
   shapes, or the same program recompiled by the same caller and call). Code taken to another
   file or function still does what it did.

Only what has no counterpart is new. Without a line map (a stored baseline file, recorded
at no known commit) only the third pass applies, over everything exact matching left.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from gate.results.collectives import CollectiveGroup
from gate.results.line_map import CHANGED, MOVED, UNCHANGED, LineMap, Place

New = TypeVar("New")
Old = TypeVar("Old")
T = TypeVar("T")


@dataclass(frozen=True)
class Spot:
    """A finding's place, and what it is without it."""

    path: str  # "" for a finding without a line of the user's
    line: int
    function: str  # the enclosing function, "" where unknown
    what: Hashable  # what must agree for two findings on one line to be one
    alike: Hashable | None = None  # what must agree for a moved one (None: it never moves)


@dataclass(frozen=True)
class Pair(Generic[New, Old]):
    """A head finding and the base's finding it is: on the same line (UNCHANGED), on the line
    its change replaced (CHANGED), or moved with its file or its code (MOVED)."""

    new: New
    old: Old
    how: str


def matched(
    new: Sequence[New],
    old: Sequence[Old],
    new_spot: Callable[[New], Spot],
    old_spot: Callable[[Old], Spot],
    lines: LineMap | None,
) -> list[Pair[New, Old]]:
    """Each head finding that is a base finding, by the three passes of this module;
    ``lines`` None: no line map, the third pass alone, over everything."""
    olds = [(was, old_spot(was)) for was in old]
    news = [(now, new_spot(now)) for now in new]
    taken: set[int] = set()
    pairs: list[Pair[New, Old]] = []
    if lines is None:
        return _moved(news, olds, None, taken, pairs)
    left: list[tuple[New, Spot]] = []
    by_line: dict[tuple[str, int, Hashable], list[int]] = {}
    for index, (_, spot) in enumerate(olds):
        by_line.setdefault((spot.path, spot.line, spot.what), []).append(index)
    changed: list[tuple[New, Spot, Place]] = []
    for now, spot in news:
        place = lines.place(spot.path, spot.line) if spot.path else None
        if place is not None and place.status == CHANGED:
            changed.append((now, spot, place))
            continue
        found: int | None = None
        if place is None or place.status in (UNCHANGED, MOVED):
            where = (place.base_path, place.base_line) if place else ("", spot.line)
            found = _first(by_line.get((*where, spot.what), []), taken)
        if found is None:
            left.append((now, spot))
            continue
        taken.add(found)
        pairs.append(Pair(now, olds[found][0], place.status if place else UNCHANGED))
    # The second pass, the base line at the same place in the hunk first (a hunk that
    # rewrote two lines: each is the line it replaced), then any line the hunk replaced.
    for exact in (True, False):
        waiting = []
        for now, spot, place in changed:
            found = next(
                (
                    i
                    for i, (_, was) in enumerate(olds)
                    if i not in taken
                    and was.path == place.base_path
                    and (was.line == place.base_line if exact else was.line in place.replaced)
                    and was.what == spot.what
                    and function_name(was.function) == function_name(spot.function)
                ),
                None,
            )
            if found is None:
                waiting.append((now, spot, place))
                continue
            taken.add(found)
            pairs.append(Pair(now, olds[found][0], CHANGED))
        changed = waiting
    left.extend((now, spot) for now, spot, _ in changed)
    return _moved(left, olds, lines, taken, pairs)


def _moved(
    news: list[tuple[New, Spot]],
    olds: list[tuple[Old, Spot]],
    lines: LineMap | None,
    taken: set[int],
    pairs: list[Pair[New, Old]],
) -> list[Pair[New, Old]]:
    """The third pass: what the change removed in one place and wrote in another (with a
    line map), or anything left (without one), paired by `Spot.alike`."""
    waiting: dict[Hashable, list[int]] = {}
    for index, (_, was) in enumerate(olds):
        gone = lines is None or not was.path or lines.head_line(was.path, was.line) is None
        if index not in taken and was.alike is not None and gone:
            waiting.setdefault(was.alike, []).append(index)
    unwritten: list[tuple[New, Spot]] = []
    for now, spot in news:
        written = lines is None or not spot.path or lines.place(spot.path, spot.line).touched
        if spot.alike is None:
            continue
        if not written:
            unwritten.append((now, spot))
            continue
        found = _first(waiting.get(spot.alike, []), taken)
        if found is not None:
            taken.add(found)
            pairs.append(Pair(now, olds[found][0], MOVED))
    if lines is None or not unwritten:
        return pairs
    # Last, what git's map could not place: the same thing at a line it calls untouched on
    # both sides, whose lines do not map to each other. A program the base read back from a
    # compilation cache keyed without source lines carries the head's lines (docs/compare.md,
    # "Which line is which"): the same collective, not a new one and a gone one.
    rest: dict[Hashable, list[int]] = {}
    for index, (_, was) in enumerate(olds):
        if index not in taken and was.alike is not None:
            rest.setdefault(was.alike, []).append(index)
    for now, spot in unwritten:
        found = _first(rest.get(spot.alike, []), taken)
        if found is not None:
            taken.add(found)
            pairs.append(Pair(now, olds[found][0], MOVED))
    return pairs


def moved_only(
    new: Sequence[New],
    old: Sequence[Old],
    new_key: Callable[[New], Hashable | None],
    old_key: Callable[[Old], Hashable | None],
) -> list[tuple[New, Old]]:
    """Without a line map (a stored baseline): each of ``new`` paired with the first unpaired
    of ``old`` of the same key (the third pass alone); a key of None pairs with nothing."""
    pairs = matched(
        new,
        old,
        lambda n: Spot("", 0, "", None, new_key(n)),
        lambda o: Spot("", 0, "", None, old_key(o)),
        None,
    )
    return [(p.new, p.old) for p in pairs]


def _first(candidates: list[int], taken: set[int]) -> int | None:
    return next((i for i in candidates if i not in taken), None)


def transfer_key(
    direction: str, kind: str, *, function: str, source: str, array: str, destination: str
) -> tuple[str, ...] | None:
    """A transfer without its file and line: the same function and source text moving the
    same array the same way. None (no match) for an unnamed function or an unread line."""
    if not function or not source.strip():
        return None
    return (direction, kind, function_name(function), " ".join(source.split()), array, destination)


def function_name(function: str) -> str:
    """A function by its own name, not where it was nested: a lambda taken from a function
    body to module level (``sync.<locals>.<lambda>``, now ``<lambda>``) is the same lambda."""
    return function.rsplit(".", 1)[-1]


def collective_key(group: CollectiveGroup) -> tuple[object, ...]:
    """Collectives without their line: the same kind, participants, program and shapes, in
    the same enclosing function (JAX's op name stands in where no line of the user's is)."""
    sample = group.sample
    who = ",".join(sample.axes) if sample.axes is not None else sample.groups
    where = (
        function_name(sample.location.function) if sample.location is not None else sample.op_name
    )
    # The shapes, not how many programs hold them: a pmap made per call compiles a program
    # per call, each with its own copy of the one collective the base's single program has.
    return (sample.kind, who, sample.function, where, tuple(sorted(set(group.buffers))))


def collective_spot(group: CollectiveGroup) -> Spot:
    """A group of collectives as the rule reads it: at its line, the same kind over the same
    participants in the same program (its count and bytes are what changed, not which)."""
    sample = group.sample
    who = ",".join(sample.axes) if sample.axes is not None else sample.groups
    where = sample.location
    if where is None:
        return Spot("", 0, "", (sample.kind, who, sample.function, sample.op_name))
    what = (sample.kind, who, sample.function)
    return Spot(where.path, where.line, where.function, what, collective_key(group))
