"""Which core a held region's timed runs use: every thread of the worker on one CPU, then put back.

``run --base`` times the base and the head in paired rounds, each round's turns one after
the other, each tree's in its own worker. Left alone, each process keeps to the core it last
ran on: measured on the 2-core development machine, the two workers sat on different cores
for whole regions, so a busy neighbour on one core (another job on a shared runner) slowed
every run of one tree and few of the other's, and unchanged trees came out 1.1-1.3x "slower"
(docs/performance-log.md); on a quiet machine the same placement left a steady 3-7% between
them. So for each round the gate names one core, and both trees' turns run on it: whatever
that core is doing then, both turns of the round meet it (`gate.compare.session` rotates the
core from round to round over the cores the gate may use). Pinning also keeps a worker's
threads from drifting between cores within a round.

Every thread of the worker is moved (XLA's CPU client runs programs on threads of its own),
and stays there while the region is held (moving them is not free: ~0.3 ms for the 22 threads
of a CPU worker, ~2 ms for the 205 of a TPU v5e's, docs/performance-log.md), until the
worker lets the region go: the next region's phases (compiling above all) get every core back.
Linux only (``os.sched_setaffinity``); elsewhere the runs are left where they are.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

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


@dataclass
class _Pinning:
    """What `pin` changed in this process: each thread's CPU set before, and the CPU now."""

    cpu: int | None = None
    before: dict[int, set[int]] = field(default_factory=dict)


_pinning = _Pinning()


def pin(cpu: int | None) -> None:
    """Every thread of this process on ``cpu`` (None: left alone), until `unpin`.

    Kept between a held region's turns: a turn on the core the last one used moves nothing,
    and moving every thread (dozens: XLA's CPU client runs programs on threads of its own)
    there and back each turn cost ~1.5 ms, more than a short step's runs. A thread that
    ends meanwhile is skipped; one started since (it inherits the pinning) is moved too.
    """
    if cpu is None or cpu == _pinning.cpu or not usable_cpus():
        return
    for tid in _threads():
        with contextlib.suppress(OSError):  # gone, or not ours to move
            if tid not in _pinning.before:
                _pinning.before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
    _pinning.cpu = cpu


def unpin() -> None:
    """Every thread back on the CPUs it had before `pin`: a new region compiles on them all.

    A thread started while pinned gets the main thread's old CPU set.
    """
    if _pinning.cpu is None:
        return
    fallback = _pinning.before.get(os.getpid())
    for tid in _threads():
        cpus = _pinning.before.get(tid, fallback)
        if cpus is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
    _pinning.cpu = None
    _pinning.before.clear()
