"""Judging the device memory a step keeps: a leak when every run leaves arrays alive.

The counts (`gate.witness.live_arrays`) are taken after warm-up and after each guarded run.
A leak is arrays born in every counted run but the last, all still alive after the last:
the live set grows with every step. A cache that keeps the last result (or the last few,
fewer than the runs) lets each run's arrays go when a later run replaces them, and passes.
One garbage collection, only when the counts look like a leak, clears arrays that were
merely waiting in a reference cycle. What holds the arrays is looked for only then
(`gate.witness.array_holders`).
"""

from __future__ import annotations

import gc
from collections import Counter

from gate.policy.model import LeakRule
from gate.results.leaks import KeptArrays, Leak, StepMemory
from gate.user_code import UserCode
from gate.witness.array_holders import find_holder
from gate.witness.live_arrays import LiveArrays, device_bytes

# Runs past warm-up needed to tell a growing live set from the last result kept: the first
# run's arrays must outlive the second.
MIN_RUNS = 2


def judge_memory(live: LiveArrays, rule: LeakRule, user: UserCode) -> StepMemory:
    """What the counts after warm-up say, judged by ``rule`` (never `LeakRule.ALLOW`: those
    regions are not counted)."""
    counts = live.counts[1:]  # counts[0]: after warm-up, before the first counted run
    arrays = tuple(c.arrays for c in counts)
    nbytes = tuple(c.nbytes for c in counts)
    runs = len(counts)
    if runs < MIN_RUNS:
        return StepMemory(
            arrays,
            nbytes,
            note=f"device memory not judged: {runs} run after warm-up was counted, and a leak "
            f"shows over {MIN_RUNS}; set guarded_runs: {MIN_RUNS} or more",
        )
    if not _grows(live, runs):
        return StepMemory(arrays, nbytes)
    gc.collect()  # an array that only waits in a reference cycle is no leak
    if not _grows(live, runs):
        return StepMemory(arrays, nbytes)
    kept = [(born, array) for born, array in live.survivors() if 1 <= born.run < runs]
    by_shape = Counter((born.dtype, born.shape) for born, _ in kept)
    each = {(born.dtype, born.shape): born.nbytes for born, _ in kept}
    counted = runs - 1
    shapes = sorted(by_shape, key=lambda k: (-each[k] * by_shape[k], k))
    earliest = min(born.run for born, _ in kept)
    first = [array for born, array in kept if born.run == earliest]
    later = [array for born, array in kept if born.run != earliest]
    on_devices = [device_bytes(array, born) for born, array in kept]
    total = sum(size for size, _ in on_devices)
    devices = max(n for _, n in on_devices)
    del kept  # its pairs hold the arrays too: the holder search must not find them
    holder = find_holder(first, later, user)
    leak = Leak(
        bytes_per_step=total // counted,
        devices=devices,
        arrays=tuple(KeptArrays(d, s, by_shape[(d, s)], counted) for d, s in shapes),
        holder=holder,
        failing=rule is LeakRule.FAIL,
        warning=rule is LeakRule.WARN,
    )
    return StepMemory(arrays, nbytes, leak)


def _grows(live: LiveArrays, runs: int) -> bool:
    """Whether arrays born in each counted run but the last are all still alive."""
    alive = {born.run for born, _ in live.survivors()}
    return all(run in alive for run in range(1, runs))
