"""What regions leave behind in a worker, with and without the worker's handling between them.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/leftovers.py [--regions 500]

Runs N regions in this process as a worker runs them (gate.isolation.leftovers): each a
distinct small jitted training step (gate_vs_floor.py's), called 6 times under the region's
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
from pathlib import Path

from grouped import run_grouped

ROOT = Path(__file__).resolve().parent.parent


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def regions(mode: str, n: int) -> dict[str, object]:
    """N regions in this process; what they left, as the module docstring lists."""
    import jax
    import jax.numpy as jnp

    from gate.isolation.leftovers import Leftovers
    from gate.jaxhooks.programs import RegionPrograms, shared_programs

    jax.devices()
    leftovers = Leftovers()
    leftovers.after_startup()
    collecting = [0.0, 0.0]  # seconds so far, start of the running collection

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[1] = time.process_time()
        else:
            collecting[0] += time.process_time() - collecting[1]

    gc.callbacks.append(timed)

    def make_inputs() -> tuple[jax.Array, jax.Array, jax.Array]:
        x_key, y_key, w_key = jax.random.split(jax.random.PRNGKey(0), 3)
        w = jax.nn.initializers.glorot_normal()(w_key, (8, 1))
        return w, jax.random.normal(x_key, (32, 8)), jax.random.normal(y_key, (32, 1))

    def make_step(i: int) -> object:
        depth, width, scale = 1 + i % 3, 8 + 4 * (i % 5), 0.01 * (i + 1)

        def loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
            h = x
            for layer in range(depth):
                h = jnp.tanh(h * (scale + layer)) + jnp.sin(h * (i + 1))
            z = jnp.concatenate([h] * (width // 8 + 1), axis=1)[:, :8]
            return jnp.mean((z @ w - y) ** 2)

        def step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
            value, grad = jax.value_and_grad(loss)(w, x, y)
            return w - scale * grad, value

        return jax.jit(step)

    kept, cpu, collected, watched, memory = [], [], [], [], []
    for i in range(n):
        if mode == "leftovers" and i:  # as the worker: after a region
            leftovers.between_regions()
        started, before = time.process_time(), collecting[0]
        step = make_step(i)
        kept.append(step)  # as the user's module keeps it
        programs = RegionPrograms()
        with programs.entered():
            for _ in range(6):
                with shared_programs():
                    inputs = make_inputs()
                jax.block_until_ready(step(*inputs))  # type: ignore[operator]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=500)
    parser.add_argument("--mode", choices=["none", "leftovers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # one mode, in this process
        print(json.dumps(regions(args.mode, args.regions)))
        return
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    for mode in ("none", "leftovers"):
        command = [sys.executable, __file__, "--regions", str(args.regions), "--mode", mode]
        done = run_grouped(command, ROOT, env, 3600)
        if done.returncode != 0:
            raise SystemExit(f"{mode}: exited {done.returncode}:\n{done.stderr[-3000:]}")
        print(done.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
