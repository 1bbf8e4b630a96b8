"""Pinning every thread of a worker to one core for its turns, and putting each back."""

from __future__ import annotations

import os
import threading

import pytest

from gate.region.cores import pin, unpin, usable_cpus

pytestmark = pytest.mark.skipif(
    not usable_cpus(), reason="this platform cannot pin threads (Linux only)"
)


def _thread_cpus() -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}


def test_every_thread_runs_on_the_core_named_and_gets_its_cpus_back() -> None:
    before = _thread_cpus()
    cpu = usable_cpus()[-1]
    stop = threading.Event()
    earlier = threading.Thread(target=stop.wait, name="earlier", daemon=True)
    earlier.start()
    later = threading.Thread(target=stop.wait, name="later", daemon=True)
    try:
        pin(cpu)
        try:
            later.start()  # inherits the pinning from this thread
            assert all(cpus == {cpu} for cpus in _thread_cpus().values()), _thread_cpus()
            pin(cpu)  # the same core again: nothing moves, nothing is forgotten
            other = usable_cpus()[0]
            pin(other)  # another core: every thread follows
            assert all(cpus == {other} for cpus in _thread_cpus().values()), _thread_cpus()
        finally:
            unpin()
        after = _thread_cpus()
        for tid, cpus in before.items():
            assert after.get(tid, cpus) == cpus, tid
        # Both helpers get the main thread's CPUs back: the one there before and the one born
        # pinned.
        assert after[earlier.native_id or 0] == before[os.getpid()]
        assert after[later.native_id or 0] == before[os.getpid()]
    finally:
        stop.set()
        earlier.join(10)
        later.join(10)


def test_none_leaves_every_thread_where_it_was() -> None:
    before = _thread_cpus()
    pin(None)
    assert _thread_cpus() == before
    unpin()  # nothing pinned: nothing to put back
    assert _thread_cpus() == before


def test_the_usable_cpus_are_this_process_s() -> None:
    assert usable_cpus() == tuple(sorted(os.sched_getaffinity(0)))
