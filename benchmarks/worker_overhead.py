"""What running regions in worker processes costs (gate.isolation.scheduler, gate.isolation.worker).

    .venv/bin/python -m benchmarks worker_overhead [--regions N] [--starts K]

Prints:
- a worker's start-up (spawn until ready: interpreter, ``import jax``, backend
  start), paid once per run and again after every crash or timeout;
- the per-region price of isolation with a reused worker: the region's wall
  time seen by the scheduler minus the wall time `run_region` measured inside
  the worker (pickling the job and the result, the pipes, the bookkeeping).
  Measured on the same region in the same run, this stays meaningful on a
  busy machine, where comparing against a separate in-process run would not.

Runs on whatever backend JAX picks (JAX_PLATFORMS=cpu for CPU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

STEPS = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def batch():
    return (jax.device_put(np.ones(4, np.float32)),)


def step(x):
    return double(x)
"""

POLICY = """
version: 1
defaults: {warmup: 0, guarded_runs: 1, repeats: 1}
regions:
  - name: trivial
    step: steps:step
    setup: steps:batch
"""


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=30, help="regions timed each way")
    parser.add_argument("--starts", type=int, default=3, help="fresh workers started")
    args = parser.parse_args(argv)

    from gate.isolation.scheduler import Scheduler
    from gate.policy.load import load_policy

    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        (repo / "steps.py").write_text(textwrap.dedent(STEPS))
        (repo / "policies").mkdir()
        (repo / "policies" / "p.yaml").write_text(textwrap.dedent(POLICY).lstrip())
        os.chdir(repo)
        policy = load_policy(repo / "policies" / "p.yaml", repo)
        region = policy.regions[0]

        # Fresh workers: what the first region and every region after a crash wait for.
        spawn, inside = [], []
        for _ in range(args.starts):
            with Scheduler(repo) as scheduler:
                started = time.perf_counter()
                result = scheduler.run(policy, region)
                spawn.append(time.perf_counter() - started - result.wall_s)
                inside.append(scheduler.startups[0].startup_s)

        # One reused worker.
        outside, inside_region = [], []
        with Scheduler(repo) as scheduler:
            scheduler.run(policy, region)  # start-up and first compile, not timed
            for _ in range(args.regions):
                started = time.perf_counter()
                result = scheduler.run(policy, region)
                outside.append(time.perf_counter() - started)
                inside_region.append(result.wall_s)
                assert result.error is None, result.error
            pids = {ready.pid for ready in scheduler.startups}
        assert len(pids) == 1, "the worker was not reused"

    import jax

    overhead = [out - ins for out, ins in zip(outside, inside_region, strict=True)]
    backend = f"backend: {jax.default_backend()}; python {sys.version.split()[0]}"
    print(f"{backend}; jax {jax.__version__}")
    print(
        f"fresh worker, spawn until ready ({args.starts} workers, median): "
        f"{statistics.median(spawn):.3f} s"
    )
    print(f"  of which import jax + backend start: {statistics.median(inside):.3f} s")
    print(
        f"trivial region, wall time inside the worker ({args.regions} runs, median): "
        f"{_ms(statistics.median(inside_region))}"
    )
    print(
        "isolation overhead per region, reused worker (median, max): "
        f"{_ms(statistics.median(overhead))}, {_ms(max(overhead))}"
    )
    return 0
