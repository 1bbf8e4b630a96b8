"""Moved, not new: the same operation at another place, one rule for transfers and collectives.

Code that only moved (a function taken to another file, a ``jax.pmap`` taken from a
function body to module level) still does what it did. Exact matching (a transfer's
fingerprint names its file; a collective's identity its file and line text) sees a new
operation where it went and a gone one where it was, and a new one fails. So what exact
matching leaves over on both sides is paired here, one to one and in order, by what
the operation is without its place:

- a transfer: the same function (by its own name, wherever it is nested) and the same
  source text, direction, kind and array (`transfer_key`);
- a collective: the same kind, participants (axes or device groups), program and
  buffer shapes, in the same enclosing function (`collective_key`).

A pair is reported as moved and does not fail; anything else left over stays new or gone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from gate.results.collectives import CollectiveGroup

New = TypeVar("New")
Old = TypeVar("Old")


def paired(
    new: Sequence[New],
    old: Sequence[Old],
    new_key: Callable[[New], Hashable | None],
    old_key: Callable[[Old], Hashable | None],
) -> list[tuple[New, Old]]:
    """Each of ``new`` paired with the first unpaired of ``old`` that has the same key; a key
    of None (too little known to say it is the same) pairs with nothing."""
    waiting: dict[Hashable, list[Old]] = {}
    for was in old:
        key = old_key(was)
        if key is not None:
            waiting.setdefault(key, []).append(was)
    pairs: list[tuple[New, Old]] = []
    for now in new:
        found = new_key(now)
        candidates = waiting.get(found) if found is not None else None
        if candidates:
            pairs.append((now, candidates.pop(0)))
    return pairs


def transfer_key(
    direction: str, kind: str, *, function: str, source: str, array: str, destination: str
) -> tuple[str, ...] | None:
    """A transfer without its file and line: the same function and source text moving the
    same array the same way. None (no match) for an unnamed function or an unread line."""
    if not function or not source.strip():
        return None
    return (direction, kind, _name(function), " ".join(source.split()), array, destination)


def _name(function: str) -> str:
    """A function by its own name, not where it was nested: a lambda taken from a function
    body to module level (``sync.<locals>.<lambda>``, now ``<lambda>``) is the same lambda."""
    return function.rsplit(".", 1)[-1]


def collective_key(group: CollectiveGroup) -> tuple[object, ...]:
    """Collectives without their line: the same kind, participants, program and shapes, in
    the same enclosing function (JAX's op name stands in where no line of the user's is)."""
    sample = group.sample
    who = ",".join(sample.axes) if sample.axes is not None else sample.groups
    where = _name(sample.location.function) if sample.location is not None else sample.op_name
    # The shapes, not how many programs hold them: a pmap made per call compiles a program
    # per call, each with its own copy of the one collective the base's single program has.
    return (sample.kind, who, sample.function, where, tuple(sorted(set(group.buffers))))
