"""Issue 58's walk-through, through the real CLI on a throwaway flax + optax repository: from
``transfer-gate init`` on the team's own code to a merged pull request.

1. ``init`` writes the policy for the training step; main records it.
2. A pull request adds a metric to the step's outputs: ``run --base main`` fails, and each
   failing comparison ends with the edit that accepts it. Made as printed (a reason in place of
   the placeholder), the run passes, and the change reads as accepted. It merges.
3. The next pull request doubles the learning rate. Main's entry accepted the metric, not this:
   it fails again and says to give the entry a new reason; given one, it passes.
4. A regression in the same pull request, ``np.asarray(logits)`` in the step, fails at its line:
   the acceptance of the results does not hide a transfer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import GateRun, make_repo, run_gate
from git_helpers import commit, init

TRAIN = """
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

LEARNING_RATE = 1e-3


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(4)(nn.relu(nn.Dense(16)(x)))


MODEL = MLP()
TX = optax.adam(LEARNING_RATE)


def loss_fn(params, x, y):
    logits = MODEL.apply(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits


@jax.jit
def update(params, opt_state, x, y):
    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
    updates, opt_state = TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, {"loss": loss}, logits


def setup():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8), dtype=np.float32)
    y = rng.integers(0, 4, 16).astype(np.int32)
    params = MODEL.init(jax.random.key(0), jnp.zeros((1, 8), jnp.float32))
    return params, TX.init(params), jax.device_put(x), jax.device_put(y)


def train_step(params, opt_state, x, y):
    params, opt_state, metrics, logits = update(params, opt_state, x, y)
    return params, opt_state, metrics
"""

# The pull requests, each an edit of the file as the base has it.
NEW_METRIC = (
    '{"loss": loss}, logits',
    '{"loss": loss, "confident": (jax.nn.softmax(logits).max(-1) > 0.5).mean()}, logits',
)
NEW_RATE = ("LEARNING_RATE = 1e-3", "LEARNING_RATE = 2e-3")
REGRESSION = (
    "    return params, opt_state, metrics\n",
    "    metrics['top'] = np.asarray(logits).argmax(-1)\n    return params, opt_state, metrics\n",
)
# The edit a failing comparison ends with, whichever kinds of change it names.
EDIT = re.compile(r"to accept it, add `accept: \{(\w+): <why this change is meant>\}` to region")
RENEW = re.compile(r"to accept it, give `accept: (\w+):` at policies/train\.yaml:(\d+) a new")


def _edited(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    return text


def _run(repo: Path) -> GateRun:
    return run_gate(repo, "run", "policies", "--base", "main", "--json", "reports/r.json")


def _started(tmp_path: Path) -> tuple[Path, str]:
    """1. The team's repository with the policy ``init`` wrote for its step, on main."""
    repo = init(tmp_path / "repo")
    make_repo(repo, {"mytrain/__init__.py": "", "mytrain/train.py": TRAIN})
    done = run_gate(repo, "init", "mytrain.train:train_step", "--setup", "mytrain.train:setup")
    assert done.returncode == 0, done
    # Short runs for a test: the user's policy as init wrote it, timing off.
    policy = (
        (repo / "policies/train.yaml")
        .read_text()
        .replace(
            "  guard: disallow ",
            "  warmup: 1\n  guarded_runs: 1\n  repeats: 2\n  timing: off\n  guard: disallow ",
        )
    )
    commit(repo, {"policies/train.yaml": policy, ".gitignore": "reports/\n"}, "the gate")
    return repo, policy


# Runs of a flax + optax step from two trees each: minutes on a busy 2-core machine.
@pytest.mark.timeout(600)
def test_an_intended_change_fails_with_its_edit_and_passes_once_accepted(tmp_path: Path) -> None:
    repo, policy = _started(tmp_path)
    # 2. A new metric: fails, each failure naming its edit.
    make_repo(repo, {"mytrain/train.py": _edited(TRAIN, NEW_METRIC)})
    done = _run(repo)
    assert done.returncode == 1, done
    flat = " ".join(done.stdout.split())
    assert "results vs base: 1 leaf differs: [2]['confident']" in flat, done
    kinds = sorted(set(EDIT.findall(flat)))
    assert "results" in kinds, done
    accept = "    accept:\n" + "".join(f"      {k}: adds the confident metric\n" for k in kinds)
    make_repo(repo, {"policies/train.yaml": policy + accept})
    done = _run(repo)
    assert done.returncode == 0, done
    assert "accepted at policies/train.yaml:" in done.stdout, done


@pytest.mark.timeout(600)
def test_a_merged_acceptance_does_not_accept_the_next_change_nor_hide_a_transfer(
    tmp_path: Path,
) -> None:
    repo, policy = _started(tmp_path)
    # The metric's pull request, merged with its acceptance (every kind it may change).
    accept = "".join(f"      {k}: adds the confident metric\n" for k in ("results", "cost"))
    merged = policy + "    accept:\n" + accept
    metric = _edited(TRAIN, NEW_METRIC)
    commit(repo, {"mytrain/train.py": metric, "policies/train.yaml": merged}, "a metric")

    # 3. A new learning rate: main's entry accepted the metric, not this.
    make_repo(repo, {"mytrain/train.py": _edited(metric, NEW_RATE)})
    done = _run(repo)
    assert done.returncode == 1, done
    flat = " ".join(done.stdout.split())
    assert "leaves differ" in flat, done
    assert "results" in dict(RENEW.findall(flat)), done
    renewed = merged.replace(
        "      results: adds the confident metric", "      results: learning rate 1e-3 → 2e-3"
    )
    make_repo(repo, {"policies/train.yaml": renewed})
    done = _run(repo)
    assert done.returncode == 0, done
    assert "learning rate 1e-3 → 2e-3" in done.stdout, done

    # 4. A regression beside it: the accepted results do not hide the new transfer.
    source = _edited(metric, NEW_RATE)
    make_repo(repo, {"mytrain/train.py": _edited(source, REGRESSION)})
    done = _run(repo)
    assert done.returncode == 1, done
    written = (repo / "mytrain/train.py").read_text().splitlines()
    line = written.index(REGRESSION[1].splitlines()[0]) + 1
    assert f"mytrain/train.py:{line}: implicit device-to-host" in done.stdout, done
    assert "np.asarray(logits)" in done.stdout, done
    # It too ends with what accepts it, were it meant: the baseline file, which outlives the PR.
    accept = "next step: `transfer-gate baseline policies --baseline policies/transfer-gate-"
    assert accept + "baseline.json --region train.train_step --transfers-only`" in done.stdout, done
    document = json.loads((repo / "reports/r.json").read_text())
    (region,) = [r for suite in document["suites"] for r in suite["regions"]]
    assert region["base"]["failing"] is False, done  # the transfer alone fails it
    assert [t["line"] for t in region["transfers"] if t["failing"]] == [line], done
