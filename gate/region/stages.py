"""What the region running in this process is doing now: the stage the gate's live line shows.

The engine announces each stage as it enters it (`announce`); a worker process
listens (`listening`) and sends each one to the gate's process, which shows the
running region and its stage in place on a terminal and, with ``-v``, how long
each stage took (`gate.report.live`). Outside a worker (`gate.check_region` in a
notebook, the pytest plugin) nobody listens and announcing costs one global read.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Stage(enum.Enum):
    """A region's stages, in the order the engine runs them (`gate.region.engine`)."""

    IMPORTING = "importing"  # the policy's modules: the step, setup, boundaries
    COMPILING = "compiling"  # the first call, watched: JAX traces and compiles here
    WARMING_UP = "warming up"
    WATCHING = "watching"  # the mapped runs and the run under the region's own guard levels
    TIMING = "timing"
    CHECKING = "checking"  # the result checks
    COSTING = "costing"  # the cost run (`gate.region.cost_phase`)


# The listener of the region running now, last; a list so that `listening` nests.
_listeners: list[Callable[[Stage], None]] = []


def announce(stage: Stage) -> None:
    """Tell whoever listens that the running region has entered ``stage``."""
    if _listeners:
        _listeners[-1](stage)


@contextmanager
def listening(listener: Callable[[Stage], None]) -> Iterator[None]:
    """Send every stage announced meanwhile to ``listener`` (one region's run)."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
