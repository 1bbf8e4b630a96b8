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
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Count:
    """The arrays alive after one run, without those the gate holds."""

    arrays: int
    nbytes: int


class Born(NamedTuple):
    """One array the counts saw: the run after which it was first alive.

    A named tuple: a count makes one for every array it has not seen (a frozen dataclass
    costs several times as much to make).
    """

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
        # Deleted arrays (a donated input) are not listed: their buffers are gone.
        for array in jax.live_arrays():
            key = id(array)
            if key in left_out:
                continue
            born = self._seen.get(key)
            if born is None or born.ref() is not array:
                aval = array.aval  # its shape and dtype, read at a tenth of the array's cost
                shape, dtype = aval.shape, aval.dtype
                born = Born(weakref.ref(array), run, dtype, shape, prod(shape) * dtype.itemsize)
            seen[key] = born
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


def device_bytes(array: Any, born: Born) -> tuple[int, int]:
    """The bytes ``array`` holds on all its devices, and on how many: a copy on each device
    it is replicated to, a part on each it is split over.

    Asked only of the arrays a leak keeps. An array whose sharding cannot say (a JAX that
    changed it) counts as one copy on one device.
    """
    try:
        sharding = array.sharding
        devices = len(sharding.device_set)
        shard = prod(sharding.shard_shape(born.shape))
        return shard * born.dtype_of.itemsize * devices, devices
    except Exception:  # a figure in a report: never worth a failed region
        return born.nbytes, 1
