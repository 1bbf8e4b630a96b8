"""What watching a step's device memory costs a region: the counts, the judging, side by side.

    .venv/bin/python -m benchmarks leak_overhead [--rounds N]

On the CPU unless ``JAX_PLATFORMS`` names another platform (``JAX_PLATFORMS=tpu`` on a TPU).

- One count of the live device arrays (`LiveArrays.count`) with 100, 1,000 and 10,000 arrays
  alive: the first, which meets every array, and a later one, which meets one new array
  (a step's new state replaces the last). A region makes one first count and
  ``guarded_runs + 1`` later ones (``guarded_runs`` without the map), none in a timed run.
- Judging a leaking region's counts (`judge_memory`: one garbage collection, then the walk
  that finds what holds the arrays), with flax, optax and equinox imported, as a real
  project's worker has them: what a leak adds, once; and the collection alone. (A worker
  freezes what it holds after start-up, so its collections are cheaper than this process's.)
- A whole region of the shipped MLP step (`gate.check_region`, in this process) under
  ``memory: {leaks: fail}`` against ``allow``, alternating, so load on the machine hits
  both alike: the region's wall time, median over the rounds, and the ratio.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.processes import ROOT

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import equinox  # noqa: F401  (a real project's heap: the walk and the collection see it)
import flax.nnx  # noqa: F401
import jax
import jax.numpy as jnp
import optax  # noqa: F401

import gate.region.engine
from examples.mlp import make_inputs, train_step
from gate.api import check_region
from gate.policy.model import LeakRule
from gate.region.leaks import judge_memory
from gate.user_code import UserCode
from gate.witness.live_arrays import LiveArrays


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, float, float]:
    """Median, p25 and p75 of ``fn``'s wall time over ``runs`` calls, in ms."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    q = statistics.quantiles(times, n=4)
    return statistics.median(times), q[0], q[2]


def counting(rounds: int) -> None:
    for n in (100, 1_000, 10_000):
        first, later = _count_costs(n, rounds)
        print(
            f"{n:>6} arrays alive: first count {first[0]:.3f} ms "
            f"(p25-p75 {first[1]:.3f}-{first[2]:.3f}), later count {later[0]:.3f} ms "
            f"({later[1]:.3f}-{later[2]:.3f})"
        )


def _count_costs(n: int, rounds: int) -> tuple[tuple[float, float, float], ...]:
    alive = [jnp.full((4,), float(i)) for i in range(n)]
    jax.block_until_ready(alive)
    first = median_ms(lambda: LiveArrays().count(), rounds)
    live = LiveArrays()
    live.count()

    def later() -> None:
        alive[-1] = jnp.full((4,), 0.5)  # the step's one new array, the old one gone
        live.count()

    return first, median_ms(later, rounds)


history: list[Any] = []  # the leak judged below: a loss kept every run


def judging(rounds: int) -> None:
    user = UserCode(ROOT)
    add = jax.jit(lambda x: x + 1.0)
    times = []
    for _ in range(rounds):
        history.clear()
        live = LiveArrays()
        live.count()
        for _ in range(4):
            history.append(add(jnp.zeros(())))
            live.count()
        start = time.perf_counter()
        memory = judge_memory(live, LeakRule.FAIL, user)
        times.append((time.perf_counter() - start) * 1e3)
        assert memory.leak is not None, memory
        assert memory.leak.holder is not None, memory
    q = statistics.quantiles(times, n=4)
    collection = median_ms(gc.collect, rounds)
    print(
        f"judging a leak (gc + the holder's walk): {statistics.median(times):.1f} ms "
        f"(p25-p75 {q[0]:.1f}-{q[2]:.1f}), of which gc.collect() alone {collection[0]:.1f} ms; "
        f"found {memory.leak.holder if memory.leak else 'no leak'}"
    )


def region(rounds: int) -> None:
    """The counts and the judging timed inside real regions, then whole regions alternating."""
    spent: list[float] = []

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.append((time.perf_counter() - start) * 1e3)

        return wrapper

    walls: dict[str, list[float]] = {"fail": [], "allow": []}
    inside: list[float] = []
    # The engine's own name for it: what a region calls (imported there by name).
    engine: Any = gate.region.engine
    count, judge = LiveArrays.count, engine.judge_memory
    for _ in range(rounds):
        for rule in ("fail", "allow"):  # alternating: load hits both alike
            spent.clear()
            LiveArrays.count = timed(count)  # type: ignore[method-assign]
            engine.judge_memory = timed(judge)
            try:
                result = check_region(train_step, setup=make_inputs, leaks=rule, repeats=20)
            finally:
                LiveArrays.count = count  # type: ignore[method-assign]
                engine.judge_memory = judge
            assert result.passed, result
            walls[rule].append(result.wall_s * 1e3)
            if rule == "fail":
                inside.append(sum(spent))
    fail, allow = (statistics.median(walls[r]) for r in ("fail", "allow"))
    q = statistics.quantiles(inside, n=4)
    print(
        f"shipped MLP region: counting and judging inside it {statistics.median(inside):.2f} ms "
        f"(p25-p75 {q[0]:.2f}-{q[2]:.2f}); whole region, {rounds} rounds alternating: "
        f"leaks: fail {fail:.0f} ms, allow {allow:.0f} ms, ratio {fail / allow:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}")
    counting(args.rounds)
    judging(args.rounds)
    region(args.rounds)
