"""Device memory a step keeps: the arrays each run leaves alive, and what holds them.

A step that appends a device array to a module-level list (``history.append(loss)``) passes
every other check and runs out of device memory after hours of training. After warm-up the
gate counts the device arrays alive after each guarded run (`gate.witness.live_arrays`);
arrays born in every run that are all still alive at the end are a leak. A bounded cache
(the last result kept) is not: each run's array dies when the next replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass

LEAK_FIX = (
    "keep no device array in a container that outlives the step: store a host value "
    "(float(loss) in a declared boundary), keep only the last few (collections.deque with "
    "maxlen), or bound the cache"
)


@dataclass(frozen=True)
class KeptArrays:
    """Arrays of one dtype and shape that the runs left alive."""

    dtype: str  # "float32"
    shape: tuple[int, ...]
    count: int  # over the runs counted
    runs: int

    @property
    def per_step(self) -> float:
        return self.count / self.runs


@dataclass(frozen=True)
class Holder:
    """Where the kept arrays can be found, reached from a module of the user's."""

    # The file, relative to the repository root; None for a container no module reaches.
    path: str | None
    line: int | None  # where the holder is made (the global assigned, the function defined)
    what: str  # "global 'history' (list)", "closure variable 'seen' of step (list)", ...

    def __str__(self) -> str:
        if self.path is None:
            return self.what
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.what}"


@dataclass(frozen=True)
class Leak:
    """Device arrays born in every counted run and all still alive after the last."""

    bytes_per_step: int  # on all the devices the arrays lie on
    devices: int  # the most devices one kept array lies on
    arrays: tuple[KeptArrays, ...]  # most bytes first
    holder: Holder | None  # None: nothing the gate could reach from the user's modules
    failing: bool  # ``memory: {leaks: fail}``
    warning: bool  # ``memory: {leaks: warn}``


@dataclass(frozen=True)
class StepMemory:
    """The device arrays alive after each run past warm-up, and the leak they show, if any.

    Counted without what the gate itself holds (the run's inputs, kept for the next run's
    checks); the runs' outputs are dropped before each count.
    """

    live_arrays: tuple[int, ...]  # after each counted run
    live_bytes: tuple[int, ...]
    leak: Leak | None = None
    # Why the counts cannot tell a leak (too few runs); None when they could.
    note: str | None = None

    @property
    def runs(self) -> int:
        return len(self.live_arrays)

    @property
    def failing(self) -> bool:
        return self.leak is not None and self.leak.failing
