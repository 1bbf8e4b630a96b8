"""Which core a held region's timed runs use: every thread of the worker on one CPU, then put back.

``run --base`` times the base and the head in two worker processes, one run after the
other. Left to the kernel, each process keeps to the core it last ran on: measured on the
2-core development machine, the two workers sat on different cores for whole regions, so a
busy neighbour on one core (another job on a shared runner) slowed every run of one tree and
few of the other's, and unchanged trees came out 1.1-1.3x "slower" (docs/performance.md); on
a quiet machine the same placement left a steady 3-7% between them. So for each round the
gate names one core, and both workers run their timed runs on it: whatever that core is
doing then, both runs of the round meet it (`gate.compare.session` rotates the core from
round to round over the cores the gate may use).

Every thread of the worker is moved (XLA's CPU client runs programs on threads of its own),
and put back after the round, so that a region's other phases (compiling above all) keep
every core. Linux only (``os.sched_setaffinity``); elsewhere the runs are left where they are.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

_TASKS = "/proc/self/task"


def usable_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on, in order; () where the platform cannot pin threads."""
    if not hasattr(os, "sched_getaffinity") or not os.path.isdir(_TASKS):
        return ()
    return tuple(sorted(os.sched_getaffinity(0)))


def _threads() -> list[int]:
    try:
        return [int(name) for name in os.listdir(_TASKS)]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Every thread of this process on ``cpu`` for the block (None: left alone); then put back.

    A thread that ends meanwhile is skipped; one started in the block (it inherits the
    pinning) gets the main thread's old CPU set back.
    """
    if cpu is None or not usable_cpus():
        yield
        return
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # gone, or not ours to move
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
    try:
        yield
    finally:
        fallback = before.get(os.getpid())
        for tid in _threads():
            cpus = before.get(tid, fallback)
            if cpus is not None:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, cpus)
