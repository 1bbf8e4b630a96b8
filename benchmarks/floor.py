"""The floor: what a hand-written script doing the gate's work costs, the figure the gate is
measured against.

`FLOOR` runs regions as the gate's phases do, by hand, in one process: each region's first
call, 2 warm-ups, 3 runs under ``jax.transfer_guard("disallow")``, 20 timed runs (fresh inputs
each), ``np.isfinite`` on the last outputs. It reads which steps to run from ``floor.json``
beside it (`benchmarks.regions.write_floor`), and, given a path, writes each region's seconds
by phase there: the whole-run scenarios time the process, `region_phases` reads the phases.

`FLOOR_BOTH` is the floor for two trees (`run --base`): it imports a copy of the tree beside the
repository under another module name, runs each region's phases for both trees, then 16 rounds
of base, head, head, base turns of as many runs as fill 2 ms (the gate's first look, with the
gate's turn length; the gate takes more rounds when 16 do not decide). Given a second path, a
JSON list of rounds by region (`GATE_ROUNDS`, what the gate's run took), it runs those
instead: the same work as the gate's, so that what is left between them is the gate's own.
"""

from __future__ import annotations

import itertools

FLOOR_REGIONS = "floor.json"  # which steps the floor runs, beside it
GATE_ROUNDS = "gate-rounds.json"  # the paired rounds a gate's run took, by region

# The phases' names, as `region_phases` prints them beside the gate's stages.
FIRST_CALL, WARMUP, GUARDED, REPEATS, FINITE = (
    "first call",
    "warm-up",
    "guarded runs",
    "timed runs",
    "finite check",
)

FLOOR = '''
"""The floor: the gate's phases by hand, region after region, in one process."""
import importlib
import json
import sys
import time

import jax
import numpy as np

WARMUP, GUARDED, REPEATS = 2, 3, 20

with open("floor.json") as f:
    plan = json.load(f)
module = importlib.import_module(plan["module"])
spent = []  # each region's seconds by phase
for step_name, setup_name in plan["regions"]:
    step, setup = getattr(module, step_name), getattr(module, setup_name)
    phases = {}
    start = time.perf_counter()
    jax.block_until_ready(step(*setup()))
    phases["first call"], start = time.perf_counter() - start, time.perf_counter()
    for _ in range(WARMUP):
        jax.block_until_ready(step(*setup()))
    phases["warm-up"], start = time.perf_counter() - start, time.perf_counter()
    for _ in range(GUARDED):
        inputs = setup()
        with jax.transfer_guard("disallow"):
            jax.block_until_ready(step(*inputs))
    phases["guarded runs"], start = time.perf_counter() - start, time.perf_counter()
    for _ in range(REPEATS):
        out = jax.block_until_ready(step(*setup()))
    phases["timed runs"], start = time.perf_counter() - start, time.perf_counter()
    if not all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree_util.tree_leaves(out)):
        sys.exit(f"{step_name}: not finite")
    phases["finite check"] = time.perf_counter() - start
    spent.append(phases)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        json.dump(spent, f)
'''

FLOOR_BOTH = '''
"""The floor for two trees: both trees' phases by hand, then paired rounds, in one process."""
import importlib.util
import json
import math
import statistics
import sys
import time

import jax
import numpy as np

WARMUP, GUARDED, REPEATS, ROUNDS, TURN_S, MAX_TURN_RUNS = 2, 3, 20, 16, 2e-3, 32


def tree(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


head, base = tree("head_steps", "bench_steps.py"), tree("base_steps", sys.argv[1])
if len(sys.argv) > 2:  # the rounds the gate took, region by region
    with open(sys.argv[2]) as f:
        rounds_of = [max(ROUNDS, n) for n in json.load(f)]
else:
    rounds_of = [ROUNDS] * head.N_REGIONS


def phases(steps, i):
    step = getattr(steps, f"step_{i}")
    jax.block_until_ready(step(*steps.make_inputs()))  # first call
    for _ in range(WARMUP):
        jax.block_until_ready(step(*steps.make_inputs()))
    for _ in range(GUARDED):
        inputs = steps.make_inputs()
        with jax.transfer_guard("disallow"):
            jax.block_until_ready(step(*inputs))
    times = []
    for _ in range(REPEATS):
        inputs = steps.make_inputs()
        start = time.perf_counter()
        out = jax.block_until_ready(step(*inputs))
        times.append(time.perf_counter() - start)
    if not all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree_util.tree_leaves(out)):
        sys.exit(f"step_{i}: not finite")
    return step, statistics.median(times)


def turn(steps, step, runs):
    inputs = steps.make_inputs()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(step(*inputs))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


for i in range(head.N_REGIONS):
    head_step, head_s = phases(head, i)
    base_step, base_s = phases(base, i)
    runs = max(1, min(MAX_TURN_RUNS, math.ceil(TURN_S / max(head_s, base_s))))
    ratios = []
    for _ in range(rounds_of[i]):
        b1, h1 = turn(base, base_step, runs), turn(head, head_step, runs)
        h2, b2 = turn(head, head_step, runs), turn(base, base_step, runs)
        ratios.append(math.log(h1 * h2 / (b1 * b2)) / 2)
'''


def region_seconds(spent: list[dict[str, float]]) -> list[float]:
    """Each region's seconds, from what `FLOOR` wrote."""
    return [sum(phases.values()) for phases in spent]


def phase_means(spent: list[dict[str, float]], skip: int = 1) -> dict[str, float]:
    """Each phase's mean seconds a region over the regions after the first ``skip`` (the first
    starts JAX's once-per-process machinery)."""
    later = spent[skip:]
    names = dict.fromkeys(itertools.chain.from_iterable(later))
    return {name: sum(p.get(name, 0.0) for p in later) / len(later) for name in names}
