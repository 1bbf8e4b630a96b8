"""What watching a step costs: the shipped MLP step, plain and under the gate's map.

    .venv/bin/python benchmarks/gate_overhead.py [--runs N]

Prints medians (and the interquartile range) of:
- the plain step (what the timed runs measure);
- the step under the transfer map (guard at log_explicit, fd 2 captured, the
  user's code traced, the device-to-host detector on): what each mapped run costs;
- entering and leaving the guard alone;
- a whole `transfer-gate run` of the shipped policies, wall time, in a subprocess.

The map is paid on 1 + guarded_runs runs per region, never on the timed runs.
Runs on whatever backend JAX picks (JAX_PLATFORMS=cpu for CPU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gate.witness.guard_log import prepare_environment  # noqa: E402  (before jax loads)

prepare_environment(os.environ)

import jax  # noqa: E402

from examples.mlp import make_inputs, train_step  # noqa: E402
from gate.jaxhooks.guard import guarded  # noqa: E402
from gate.policy.levels import GuardLevel, GuardSpec  # noqa: E402
from gate.user_code import UserCode  # noqa: E402
from gate.witness.detector import detect_fetches  # noqa: E402
from gate.witness.transfer_map import mapped  # noqa: E402


def quartiles(samples: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"median {median * 1e3:8.3f} ms  (p25 {q1 * 1e3:.3f}, p75 {q3 * 1e3:.3f})"


def timed(runs: int, body: Callable[[], None]) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        body()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    code = UserCode(ROOT)
    log_all = GuardSpec.uniform(GuardLevel.LOG_EXPLICIT)

    def plain() -> None:
        inputs = make_inputs()
        start = time.perf_counter()
        jax.block_until_ready(train_step(*inputs))
        plain_samples.append(time.perf_counter() - start)

    def watched() -> None:
        inputs = make_inputs()
        start = time.perf_counter()
        with detect_fetches(code, lambda: None), mapped(code), guarded(log_all):
            jax.block_until_ready(train_step(*inputs))
        watched_samples.append(time.perf_counter() - start)

    def guard_only() -> None:
        with guarded(log_all):
            pass

    plain_samples: list[float] = []
    watched_samples: list[float] = []
    timed(5, plain)  # compile
    plain_samples.clear()
    timed(args.runs, plain)
    timed(args.runs, watched)
    guard = timed(args.runs, guard_only)

    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gate", "run", "--junit", f"{scratch}/report.xml"],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
        whole = time.perf_counter() - start

    device = jax.devices()[0]
    print(f"backend: {jax.default_backend()} ({device.device_kind}), jax {jax.__version__}")
    print(f"plain step          {quartiles(plain_samples)}")
    print(f"step under the map  {quartiles(watched_samples)}")
    print(f"guard enter + exit  {quartiles(guard)}")
    print(f"transfer-gate run of policies/ (2 regions): {whole:.2f} s wall")


if __name__ == "__main__":
    main()
