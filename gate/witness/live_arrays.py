"""The device arrays alive in this process after each run, told apart by identity.

``jax.live_arrays()`` lists every array whose buffers are still held. Each is remembered by a
weak reference with the run it was first seen after, so a later count knows which run made
it without keeping it alive; an id that a new array reuses is not the old array. The list
holds every array for a moment: it is dropped before anything else runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import prod
from typing import Any


@dataclass(frozen=True)
class Count:
    """The arrays alive after one run, without those the gate holds."""

    arrays: int
    nbytes: int


@dataclass(frozen=True)
class Born:
    """One array the counts saw: the run after which it was first alive."""

    ref: weakref.ReferenceType[Any]
    run: int
    # NumPy's dtype object: its name is asked only of the arrays kept (``str`` of a dtype
    # costs ~6 µs, most of a count of arrays never seen before).
    dtype_of: Any
    shape: tuple[int, ...]
    nbytes: int

    @property
    def dtype(self) -> str:
        return str(self.dtype_of)


@dataclass
class LiveArrays:
    """Counts of the live device arrays, one per run; run 0 is the state after warm-up."""

    counts: list[Count] = field(default_factory=list)
    _seen: dict[int, Born] = field(default_factory=dict)

    def count(self, held: Iterable[Any] = ()) -> None:
        """Count the arrays alive now, leaving out ``held`` (what the gate keeps itself)."""
        import jax

        run = len(self.counts)
        left_out = {id(a) for a in held}
        arrays = nbytes = 0
        seen: dict[int, Born] = {}
        for array in jax.live_arrays():
            if id(array) in left_out or array.is_deleted():
                continue
            born = self._seen.get(id(array))
            if born is None or born.ref() is not array:
                aval = array.aval  # its shape and dtype, read at a tenth of the array's cost
                shape = tuple(int(d) for d in aval.shape)
                dtype = aval.dtype
                born = Born(weakref.ref(array), run, dtype, shape, prod(shape) * dtype.itemsize)
            seen[id(array)] = born
            arrays += 1
            nbytes += born.nbytes
        # Only what is alive now: the registry never outgrows the live set.
        self._seen = seen
        self.counts.append(Count(arrays, nbytes))

    def survivors(self) -> list[tuple[Born, Any]]:
        """Every array counted last that is still alive, with the record of its birth."""
        alive = []
        for born in self._seen.values():
            array = born.ref()
            if array is not None and not array.is_deleted():
                alive.append((born, array))
        return alive
