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

`FLOOR_PROCESSES` does `FLOOR_BOTH`'s work with each tree in a process of its own, as issue
53 has the gate do: paired rounds whose turn passes from one process to the other through a
pipe, or, on a device that admits one process, each tree's process in turn. It is the least a
process per tree costs, so what lies between it and the gate is the gate's own.
"""

from __future__ import annotations

import itertools
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from gate.isolation.device_pool import DevicePool
from gate.machine.diagnosis import CPU_ASYNC_DISPATCH

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

# Every floor's JAX runs a CPU computation inline, as the gate's workers do
# (`gate.isolation.backend`): the same work, so what lies between a floor and the gate is the
# gate's own. Spliced in after each script's imports, before anything starts the backend (and
# into the other scripts that time a step by hand, `benchmarks.base_power`).
AS_THE_WORKERS = f"""
jax.config.update("{CPU_ASYNC_DISPATCH}", False)
"""

FLOOR = (
    '''
"""The floor: the gate's phases by hand, region after region, in one process."""
import importlib
import json
import sys
import time

import jax
import numpy as np
'''
    + AS_THE_WORKERS
    + """
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
"""
)

# Both two-tree floors' settings, a region's phases and a turn of timed runs: one text, spliced
# into each script after its imports.
_TWO_TREES = (
    AS_THE_WORKERS
    + """
WARMUP, GUARDED, REPEATS, ROUNDS, TURN_S, MAX_TURN_RUNS = 2, 3, 20, 16, 2e-3, 32


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


# By tree: the region its turns time now and the inputs of its first turn, which every later
# turn of the region takes, as the gate's held region does; a new region's turns replace them.
held_inputs = {}


def turn(steps, step, runs):
    held = held_inputs.get(steps)
    if held is None or held[0] is not step:
        held = held_inputs[steps] = (step, steps.make_inputs())
    inputs = held[1]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(step(*inputs))
        times.append(time.perf_counter() - start)
    return statistics.median(times)
"""
)

FLOOR_BOTH = (
    '''
"""The floor for two trees: both trees' phases by hand, then paired rounds, in one process."""
import importlib.util
import json
import math
import statistics
import sys
import time

import jax
import numpy as np
'''
    + _TWO_TREES
    + """

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


for i in range(head.N_REGIONS):
    head_step, head_s = phases(head, i)
    base_step, base_s = phases(base, i)
    runs = max(1, min(MAX_TURN_RUNS, math.ceil(TURN_S / max(head_s, base_s))))
    ratios = []
    for _ in range(rounds_of[i]):
        b1, h1 = turn(base, base_step, runs), turn(head, head_step, runs)
        h2, b2 = turn(head, head_step, runs), turn(base, base_step, runs)
        ratios.append(math.log(h1 * h2 / (b1 * b2)) / 2)
"""
)


FLOOR_PROCESSES = (
    """
\"\"\"The floor for two trees, each in a process of its own (what issue 53 asks of the gate).

    python floor_processes.py paired BASE_STEPS [ROUNDS_JSON]
    python floor_processes.py apart BASE_STEPS [ROUNDS_JSON] &&
        python floor_processes.py apart-base BASE_STEPS [ROUNDS_JSON]

``paired`` (a device two processes may hold: the CPU, a GPU): the head's process starts the
base's, both import JAX at once; each region's phases run in the head's process, then the
base's; then paired rounds, the turn handed straight from one process to the other through a
pipe, with no parent in between: base, head, head, base, two hand-overs a round.
``apart`` (a TPU chip, which admits one process): each tree's process runs every region's
phases and a block of turns, two a round of the first look, the base's after the head's exits.
A region of ROUNDS_JSON with 0 rounds is not compared: only the head's process runs it, as the
gate runs a region the change did not reach. The least any design with a process per tree can
pay for the work `FLOOR_BOTH` does in one.
FLOOR_PINNED=1 (``paired`` only): each round's turns on one core, both processes' threads moved
there, the core rotating from round to round, as the gate pins them (`gate.region.cores`: a
busy neighbour then meets both trees' turns of a round alike).
\"\"\"
import importlib.util
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import time

MODE, BASE_STEPS = sys.argv[1], sys.argv[2]
ROUNDS_JSON = sys.argv[3] if len(sys.argv) > 3 else ""
BASE = MODE.endswith("-base")

if MODE == "paired":  # the head: start the base's process first, so both import JAX at once
    from_head, to_base = os.pipe()  # (read, write)
    from_base, to_head = os.pipe()
    peer = subprocess.Popen(
        [sys.executable, sys.argv[0], "paired-base", BASE_STEPS, ROUNDS_JSON,
         str(from_head), str(to_head)],
        pass_fds=(from_head, to_head),
    )
    os.close(from_head)
    os.close(to_head)
    send_fd, receive_fd = to_base, from_base
elif MODE == "paired-base":
    receive_fd, send_fd = int(sys.argv[4]), int(sys.argv[5])

import jax
import numpy as np
"""
    + _TWO_TREES
    + """

def send(*values):
    os.write(send_fd, struct.pack(f"<{len(values)}d", *values))


def receive(count):
    data = b""
    while len(data) < 8 * count:
        chunk = os.read(receive_fd, 8 * count - len(data))
        if not chunk:
            sys.exit("the other tree's process is gone")
        data += chunk
    return struct.unpack(f"<{count}d", data)


spec = importlib.util.spec_from_file_location("steps", BASE_STEPS if BASE else "bench_steps.py")
steps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(steps)
if ROUNDS_JSON:  # the rounds the gate took, by region; 0: not compared, the base's not run
    with open(ROUNDS_JSON) as f:
        rounds_of = [n and max(ROUNDS, n) for n in json.load(f)]
else:
    rounds_of = [ROUNDS] * steps.N_REGIONS


def runs_for(*medians):
    return max(1, min(MAX_TURN_RUNS, math.ceil(TURN_S / max(medians))))


PINNED = os.environ.get("FLOOR_PINNED") == "1" and hasattr(os, "sched_setaffinity")
CPUS = sorted(os.sched_getaffinity(0)) if PINNED else []
pinned = {"cpu": None, "before": {}}


def pin(round_):
    \"\"\"Every thread of this process on the round's core (moved only when it changes).\"\"\"
    if not PINNED or CPUS[round_ % len(CPUS)] == pinned["cpu"]:
        return
    pinned["cpu"] = CPUS[round_ % len(CPUS)]
    for name in os.listdir("/proc/self/task"):
        try:
            pinned["before"].setdefault(int(name), os.sched_getaffinity(int(name)))
            os.sched_setaffinity(int(name), {pinned["cpu"]})
        except OSError:
            pass


def unpin():
    \"\"\"Every thread back where it was: the next region compiles on every core.\"\"\"
    for tid, cpus in pinned["before"].items():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass
    pinned["cpu"], pinned["before"] = None, {}


for i in range(steps.N_REGIONS):
    if MODE.startswith("apart"):
        if BASE and not rounds_of[i]:
            continue
        step, own_s = phases(steps, i)
        turns = 2 * ROUNDS if rounds_of[i] else 0  # the head's block, for a compared region
        block = [turn(steps, step, runs_for(own_s)) for _ in range(turns)]
    elif BASE:
        (rounds,) = receive(1)  # the head's phases are done
        if not rounds:
            continue
        step, own_s = phases(steps, i)
        send(own_s)
        (runs,) = receive(1)
        for round_ in range(int(rounds)):
            pin(round_)
            send(turn(steps, step, int(runs)))
            receive(1)  # the head's two turns
            send(turn(steps, step, int(runs)))
        unpin()
    else:
        step, own_s = phases(steps, i)
        send(rounds_of[i])
        if not rounds_of[i]:
            continue
        (base_s,) = receive(1)
        runs = runs_for(own_s, base_s)
        send(runs)
        ratios = []
        for round_ in range(rounds_of[i]):
            (b1,) = receive(1)
            pin(round_)
            h1, h2 = turn(steps, step, runs), turn(steps, step, runs)
            send(h2)
            (b2,) = receive(1)
            ratios.append(math.log(h1 * h2 / (b1 * b2)) / 2)
        unpin()
if MODE == "paired" and peer.wait(timeout=60) != 0:
    sys.exit("the base's process failed")
"""
)


def region_seconds(spent: list[dict[str, float]]) -> list[float]:
    """Each region's seconds, from what `FLOOR` wrote."""
    return [sum(phases.values()) for phases in spent]


def phase_means(spent: list[dict[str, float]], skip: int = 1) -> dict[str, float]:
    """Each phase's mean seconds a region over the regions after the first ``skip`` (the first
    starts JAX's once-per-process machinery)."""
    later = spent[skip:]
    names = dict.fromkeys(itertools.chain.from_iterable(later))
    return {name: sum(p.get(name, 0.0) for p in later) / len(later) for name in names}


def paired(env: Mapping[str, str]) -> bool:
    """Whether two processes may hold the device ``env`` names, so that the floor with a
    process per tree pairs its rounds (the CPU, a GPU; not a TPU chip)."""
    pool = DevicePool.for_environment(env)
    return pool is None or pool.admits_two


def processes_command(
    base_steps: Path, rounds: Path | None, env: Mapping[str, str], *, pinned: bool = False
) -> list[str]:
    """The command of `FLOOR_PROCESSES`, written as ``floor_processes.py`` beside the head's
    ``bench_steps.py``, for the base's steps at ``base_steps``: paired rounds (at the gate's
    ``rounds``, a `GATE_ROUNDS` file, else 16) where two processes may hold the device, as the
    gate pairs them, each round on one core when ``pinned``; else each tree's process in turn,
    the base's once the head's has let the chip go, as the gate's workers take it."""
    script = [sys.executable, "floor_processes.py"]
    trees = [str(base_steps)] + ([str(rounds)] if rounds is not None else [])
    if paired(env):
        return ["env", f"FLOOR_PINNED={int(pinned)}", *script, "paired", *trees]
    head, base = (shlex.join([*script, mode, *trees]) for mode in ("apart", "apart-base"))
    return ["sh", "-c", f"{head} && {base}"]
