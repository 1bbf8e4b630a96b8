"""What regions leave behind in a worker, with and without the worker's handling between them.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks leftovers [--regions 500]

Runs N regions in this process as a worker runs them (gate.isolation.leftovers): each a
distinct small jitted training step (`benchmarks.regions`), called 6 times under the region's
own jit context with fresh inputs from a shared setup. Twice, each in a process of its own:
with nothing done between regions (``none``: what the worker did before issue 40) and as the
worker does now (``leftovers``): each region's jitted step lets go of its programs when the
region ends (`RegionPrograms.let_go`), and `Leftovers.between_regions` runs after each.
Prints per mode: the process's resident memory at region 20, N/4, N/2, 3N/4 and N; the
objects the garbage collector watches at 20, N/2 and N; the collector's seconds over all
regions (``gc.callbacks``); the mean CPU seconds of regions 2-21 and of the last 20. Memory
and object counts do not depend on the machine's load; the seconds do.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

from benchmarks.processes import ROOT, gate_env, run_grouped
from benchmarks.worker import steps_in_a_worker


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def regions(mode: str, n: int) -> dict[str, object]:
    """N regions in this process; what they left, as the module docstring lists."""
    steps_in_a_worker(n, "leftovers-")
    import bench_steps  # type: ignore[import-not-found]
    import jax

    from gate.isolation.leftovers import Leftovers
    from gate.jaxhooks.programs import RegionPrograms, shared_programs

    leftovers = Leftovers()
    leftovers.after_startup()
    collecting = [0.0, 0.0]  # seconds so far, start of the running collection

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[1] = time.process_time()
        else:
            collecting[0] += time.process_time() - collecting[1]

    gc.callbacks.append(timed)

    cpu, collected, watched, memory = [], [], [], []
    for i in range(n):
        if mode == "leftovers" and i:  # as the worker: after a region
            leftovers.between_regions()
        started, before = time.process_time(), collecting[0]
        step = getattr(bench_steps, f"step_{i}")  # the user's module keeps it
        programs = RegionPrograms()
        with programs.entered():
            for _ in range(6):
                with shared_programs():
                    inputs = bench_steps.make_inputs()
                jax.block_until_ready(step(*inputs))
        if mode == "leftovers":
            programs.let_go(step)  # as the engine, once the region is done with it
        cpu.append(time.process_time() - started)
        collected.append(collecting[0] - before)
        watched.append(len(gc.get_objects()))
        memory.append(_rss_mb())
    mean = statistics.mean
    return {
        "mode": mode,
        "memory_mb": [round(memory[k]) for k in (20, n // 4, n // 2, 3 * n // 4, n - 1)],
        "watched": [watched[k] for k in (20, n // 2, n - 1)],
        "collections_s": round(sum(collected), 2),
        "cpu_first_20_s": round(mean(cpu[1:21]), 3),
        "cpu_last_20_s": round(mean(cpu[-20:]), 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=500)
    parser.add_argument("--mode", choices=["none", "leftovers"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode:  # one mode, in this process
        print(json.dumps(regions(args.mode, args.regions)))
        return
    for mode in ("none", "leftovers"):
        command = [sys.executable, "-m", "benchmarks", "leftovers", "--regions", str(args.regions)]
        done = run_grouped([*command, "--mode", mode], ROOT, gate_env(keep_cache=True), 3600)
        if done.returncode != 0:
            raise SystemExit(f"{mode}: exited {done.returncode}:\n{done.stderr[-3000:]}")
        print(done.stdout.strip(), flush=True)
