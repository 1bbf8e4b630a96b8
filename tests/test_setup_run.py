"""A setup that takes a parameter is handed the run's index, as a loop hands its step the step
number (issue 58), through the real CLI on throwaway repositories.

A bug that shows only as the loop's state moves on (a warmup learning rate passed as a static
Python float compiles the update again every step) is invisible to a region whose every run is
step 0, and caught once setup varies the step. The run's index must not cost the comparison
with the base its results: the inputs of the compared run are made again for the same index.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

STEPS = """
from functools import partial

import jax
import numpy as np

SEEN = []


def warmup_lr(step):
    return 0.1 * min(1.0, (step + 1) / 100)


@partial(jax.jit, static_argnames="lr")
def sgd(w, lr):
    return w - lr * w


def step_zero():
    return (jax.device_put(np.ones(4, np.float32)), 0)


def each_run(run):
    SEEN.append(run)
    return (jax.device_put(np.ones(4, np.float32)), run)


def with_default(size=4):
    return (jax.device_put(np.ones(size, np.float32)), 0)


def train_step(w, step):
    return sgd(w, lr=warmup_lr(step))


@jax.jit
def scaled(w, step):
    return w * (step + 1.0)


def device_step(w, step):
    return scaled(w, step)


def device_setup(run):
    return (jax.device_put(np.ones(4, np.float32)), jax.device_put(np.float32(run)))
"""

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 2, repeats: 2, timing: off}
regions:
  - {name: fixed_step, step: "steps:train_step", setup: "steps:step_zero"}
  - {name: moving_step, step: "steps:train_step", setup: "steps:each_run"}
  - {name: default_kept, step: "steps:train_step", setup: "steps:with_default"}
"""


def _regions(report: Path) -> dict[str, dict[str, object]]:
    document = json.loads(report.read_text())
    return {r["name"]: r for suite in document["suites"] for r in suite["regions"]}


def test_a_warmup_rate_compiled_anew_each_step_is_caught_once_setup_takes_the_run(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": POLICY})
    done = run_gate(repo, "run", "policies", "--json", "reports/r.json")
    assert done.returncode == 1, done
    regions = _regions(repo / "reports/r.json")
    # Every run step 0: the same static value each run, nothing compiles again.
    assert regions["fixed_step"]["status"] == "passed", done
    assert regions["default_kept"]["status"] == "passed", done
    moving = regions["moving_step"]
    assert moving["status"] == "failed", done
    recompiles = [r for r in moving["recompiles"] if r["failing"]]  # type: ignore[attr-defined]
    lines = (repo / "steps.py").read_text().splitlines()
    line = lines.index("    return sgd(w, lr=warmup_lr(step))") + 1
    assert [(r["path"], r["line"]) for r in recompiles] == [("steps.py", line)], done


def test_results_are_compared_with_the_base_for_a_setup_that_takes_the_run(
    tmp_path: Path,
) -> None:
    root = init(tmp_path / "repo")
    policy = (
        "version: 1\n"
        "defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}\n"
        "regions:\n"
        '  - {name: device, step: "steps:device_step", setup: "steps:device_setup",'
        " compare: always}\n"
    )
    commit(root, {"steps.py": STEPS, "policies/p.yaml": policy}, "base")
    done = run_gate(root, "run", "policies", "--base", "main", "--json", "reports/r.json")
    assert done.returncode == 0, done
    results = _regions(root / "reports/r.json")["device"]["base"]["results"]  # type: ignore[index]
    # Each run is another step, yet the compared run's inputs repeat for its own index.
    assert results["status"] == "matches", done
