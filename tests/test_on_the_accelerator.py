"""What the gate measures on an accelerator, tested on every backend: the CPU here and in CI, a
GPU or a TPU where the suite runs on one (`gpu` and `tpu` marks; skipped elsewhere).

- A step's time includes the device work JAX dispatches asynchronously: the gate waits for the
  outputs, so a step that returns at once while the device computes for milliseconds is timed
  for those milliseconds. JAX's CPU backend dispatches asynchronously too, which is what lets
  the CPU run check the same logic.
- A step's compiled cost is XLA's figure for its programs on that backend.

On an accelerator the gate runs in a process of its own, with JAX free to pick the device and
the machine's PYTHONPATH kept (a TPU VM may bring JAX that way), and ``--require-platform``
makes a run that landed on the CPU fail instead of passing for the wrong reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import GateRun, make_repo, run_gate
from jax_scripts import run_script

PLATFORMS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("gpu", id="gpu", marks=pytest.mark.gpu),
    pytest.param("tpu", id="tpu", marks=pytest.mark.tpu),
]
# Large enough that the device computes for milliseconds per call on each backend.
SIZES = {"cpu": (384, 20), "gpu": (2048, 50), "tpu": (2048, 50)}


def accelerator_env(platform: str) -> dict[str, str | None]:
    """The environment of a gate under test on ``platform`` (None removes a variable)."""
    if platform == "cpu":
        return {}
    return {"JAX_PLATFORMS": None, "PYTHONPATH": os.environ.get("PYTHONPATH")}


def run_on(platform: str, repo: Path, *args: str) -> GateRun:
    return run_gate(
        repo,
        "run",
        "--require-platform",
        platform,
        *args,
        env=accelerator_env(platform),
        process=platform != "cpu",
    )


def regions(repo: Path, report: str) -> dict[str, Any]:
    suites = json.loads((repo / report).read_text())["suites"]
    return {r["name"]: r for suite in suites for r in suite["regions"]}


HEAVY = """
import jax
import jax.numpy as jnp

N, LOOPS = {n}, {loops}


@jax.jit
def heavy(x):
    return jax.lax.fori_loop(0, LOOPS, lambda i, y: jnp.tanh(y @ x), x)


def inputs():
    return (jnp.ones((N, N), jnp.float32) / N,)


def step(x):
    return heavy(x)  # returns as soon as the work is dispatched
"""

TIMED_POLICY = """
version: 1
defaults: {warmup: 2, guarded_runs: 1, repeats: 10}
regions:
  - {name: heavy, step: "steps:step", setup: "steps:inputs"}
"""

# The same step timed by hand: what dispatch alone costs, and what the device's work costs.
BY_HAND = """
import time
import steps

(x,) = steps.inputs()
steps.heavy(x).block_until_ready()
dispatch, blocked = [], []
for _ in range(10):
    start = time.perf_counter()
    y = steps.heavy(x)
    dispatch.append(time.perf_counter() - start)
    y.block_until_ready()
    start = time.perf_counter()
    steps.heavy(x).block_until_ready()
    blocked.append(time.perf_counter() - start)
emit({"backend": steps.jax.default_backend(), "dispatch": min(dispatch), "blocked": min(blocked)})
"""


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_step_is_timed_with_the_device_work_it_dispatched(tmp_path: Path, platform: str) -> None:
    n, loops = SIZES[platform]
    repo = make_repo(
        tmp_path,
        {"steps.py": HEAVY.format(n=n, loops=loops), "policies/p.yaml": TIMED_POLICY},
    )
    run = run_on(platform, repo, "--json", "r.json")
    assert run.returncode == 0, run
    gate_median = regions(repo, "r.json")["heavy"]["timing"]["median_s"]

    env = {"JAX_PLATFORMS": "cpu"} if platform == "cpu" else None
    drop = () if platform == "cpu" else ("JAX_PLATFORMS",)
    hand = run_script(
        tmp_path / "hand", {"steps.py": HEAVY.format(n=n, loops=loops)}, BY_HAND, env, drop
    )
    assert hand["backend"] == platform, hand
    # The backend dispatches asynchronously: a call returns long before its work is done. The
    # minima are the figures load cannot inflate.
    assert hand["blocked"] >= 5 * hand["dispatch"], hand
    # So a gate that timed the call alone would report a fraction of the device's time.
    assert gate_median >= 0.5 * hand["blocked"], (gate_median, hand)


COST_STEPS = """
import jax
import jax.numpy as jnp

N = 256


@jax.jit
def square(x):
    return x @ x


def inputs():
    return (jnp.ones((N, N), jnp.float32),)


def step(x):
    return square(x)
"""

COST_POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2}
regions:
  - {name: square, step: "steps:step", setup: "steps:inputs", timing: off}
"""


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_steps_compiled_cost_is_xlas_figure_on_the_backend(tmp_path: Path, platform: str) -> None:
    repo = make_repo(tmp_path, {"steps.py": COST_STEPS, "policies/p.yaml": COST_POLICY})
    run = run_on(platform, repo, "--json", "r.json")
    assert run.returncode == 0, run
    cost = regions(repo, "r.json")["square"]["cost"]
    assert cost["measured"], cost
    n = 256
    # XLA counts a matmul as 2 n^3 flops; a backend's compiler may add a little around it.
    assert 2 * n**3 <= cost["totals"]["flops"] <= 1.25 * 2 * n**3, cost
    assert [f["name"] for f in cost["functions"]] == ["jit(square)"], cost
    # XLA's memory figures for the program: the argument and the output, n x n float32 each.
    assert cost["totals"]["argument_bytes"] == n * n * 4, cost
    if platform == "cpu":
        assert cost["peak_memory"] is None, cost  # the CPU reports no memory statistics
    else:
        # A GPU or TPU reports its high-water mark: at least the output was live at the peak.
        assert cost["peak_memory"], cost
        assert all(p["peak_bytes"] >= n * n * 4 for p in cost["peak_memory"]), cost
