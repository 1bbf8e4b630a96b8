"""What one timed run's clock holds: the step alone from an idle device, against the same step
queued behind setup's work, as a hand-written loop runs it.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/timed_run_wait.py [--rounds 5] [--runs 20]
    (on a TPU: `bash benchmarks/tpu_check.sh wait`)

On the TPU v5e the gate's timed stage cost ~0.5 ms a run more than the floor's
(docs/performance.md): the gate makes a batch of setup's inputs, waits for them, then times
each step alone (`gate.region.region_run.RegionRun.timed_calls`), where the floor calls setup
and the step back to back and waits once. For one small step of gate_vs_floor.py, after its
first call and warm-up, in one process, the ways alternating in each of ``--rounds``:

- the gate's: inputs made ahead and waited for, then each step timed alone (dispatch to
  outputs ready): the sample, ms;
- the floor's: setup and the step, waited for once, a run's wall time; and setup alone
  the same way: what the step adds behind setup is the difference;
- the step alone right after a tiny program was waited for (the device just used): the
  sample, ms;
- the steps back to back: ``--runs`` of them dispatched one after another, waited for
  once, the time divided by their number (what a training loop, which never waits, sees).

Prints the medians. On the CPU the ways agree within noise: nothing runs asynchronously.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    from gate_vs_floor import steps_in_a_worker

    steps_in_a_worker(1, "timed-run-wait-")
    import bench_steps  # type: ignore[import-not-found]
    import jax
    import jax.numpy as jnp

    step, setup = bench_steps.step_0, bench_steps.make_inputs
    tiny = jax.jit(lambda x: x + 1)
    one = jnp.zeros(())
    for _ in range(3):  # first call and warm-up, of the step and of the tiny program
        jax.block_until_ready(step(*setup()))
        jax.block_until_ready(tiny(one))

    spent: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        spent.setdefault(name, []).append(seconds * 1e3)

    def alone() -> None:
        batch: list[Any] = jax.block_until_ready([setup() for _ in range(args.runs)])
        for inputs in batch:
            started = time.perf_counter()
            jax.block_until_ready(step(*inputs))
            add("gate's: the step alone, inputs made ahead (sample)", time.perf_counter() - started)

    def queued() -> None:
        for _ in range(args.runs):
            started = time.perf_counter()
            jax.block_until_ready(step(*setup()))
            add("floor's: setup and the step, one wait (a run)", time.perf_counter() - started)
        for _ in range(args.runs):
            started = time.perf_counter()
            jax.block_until_ready(setup())
            add("setup alone, one wait (a run)", time.perf_counter() - started)

    def woken() -> None:
        batch: list[Any] = jax.block_until_ready([setup() for _ in range(args.runs)])
        for inputs in batch:
            jax.block_until_ready(tiny(one))
            started = time.perf_counter()
            jax.block_until_ready(step(*inputs))
            sample = time.perf_counter() - started
            add("the step alone, right after a tiny program (sample)", sample)

    def back_to_back() -> None:
        batch: list[Any] = jax.block_until_ready([setup() for _ in range(args.runs)])
        started = time.perf_counter()
        outputs = [step(*inputs) for inputs in batch]
        jax.block_until_ready(outputs)
        add("steps back to back, one wait (per step)", (time.perf_counter() - started) / args.runs)

    ways = [alone, queued, woken, back_to_back]
    for round_ in range(args.rounds):
        for way in ways[round_ % len(ways) :] + ways[: round_ % len(ways)]:
            way()
    print(f"{jax.default_backend()}, jax {jax.__version__}, medians over {args.rounds} rounds:\n")
    print("| what | ms |\n|---|---|")
    for name, values in spent.items():
        print(f"| {name} | {statistics.median(values):.3f} |")
    behind = statistics.median(spent["floor's: setup and the step, one wait (a run)"])
    behind -= statistics.median(spent["setup alone, one wait (a run)"])
    print(f"| what the step adds behind setup (the two above) | {behind:.3f} |")


if __name__ == "__main__":
    main()
