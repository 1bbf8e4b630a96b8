"""The regions the scenarios run: distinct small jitted steps sharing one setup, in a repository.

Most scenarios time the gate on the same repository (`build`): N regions, each a small MLP
training step of its own (depth, width and constants differ by region) under one shared setup
(PRNG keys and an initialiser, as real suites share them), with the gate's default phases
spelled out (first call, 2 warm-ups, 3 guarded runs, 20 timed runs, a finite check) and
``compare: always``, since the repository is committed and ``run --base HEAD`` compares the
tree with itself (an unchanged footprint would otherwise run once). The floor
(`benchmarks.floor`) runs the same steps by hand; a scenario that runs them inside its own
process writes them with `benchmarks.worker.steps_in_a_worker`.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.floor import FLOOR, FLOOR_BOTH, FLOOR_PROCESSES, FLOOR_REGIONS
from benchmarks.processes import commit_all

STEPS_MODULE = "bench_steps"  # the module the steps are written to

STEPS = '''
"""Distinct small jitted steps sharing one setup (written by benchmarks/regions.py)."""
import jax
import jax.numpy as jnp

BATCH, FEATURES = 32, 8


def make_inputs():
    key = jax.random.PRNGKey(0)
    x_key, y_key, w_key = jax.random.split(key, 3)
    x = jax.random.normal(x_key, (BATCH, FEATURES))
    y = jax.random.normal(y_key, (BATCH, 1))
    w = jax.nn.initializers.glorot_normal()(w_key, (FEATURES, 1))
    return w, x, y


def _make_step(i):
    depth, width, scale = 1 + i % 3, 8 + 4 * (i % 5), 0.01 * (i + 1)

    def loss(w, x, y):
        h = x
        for layer in range(depth):
            h = jnp.tanh(h * (scale + layer)) + jnp.sin(h * (i + 1))
        z = jnp.concatenate([h] * (width // FEATURES + 1), axis=1)[:, :FEATURES]
        return jnp.mean((z @ w - y) ** 2)

    def step(w, x, y):
        value, grad = jax.value_and_grad(loss)(w, x, y)
        return w - scale * grad, value

    step.__name__ = step.__qualname__ = f"step_{i}"
    return jax.jit(step)


for _i in range(N_REGIONS):
    globals()[f"step_{_i}"] = _make_step(_i)
'''


# Steps like users': a flax Linen CNN and a small transformer, their models and optimisers made
# once at import, setup making fresh parameters, optimiser state and a batch with a jitted
# initialiser (`realistic_steps`, `line_overhead`).
MODELS = '''
"""A flax CNN and a small transformer, as a project writes them (from benchmarks/regions.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


class Block(nn.Module):
    width: int = 64

    @nn.compact
    def __call__(self, x):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + nn.SelfAttention(num_heads=4)(nn.LayerNorm()(x), mask=mask)
        h = nn.Dense(2 * self.width)(nn.LayerNorm()(x))
        return x + nn.Dense(self.width)(nn.gelu(h))


class Transformer(nn.Module):
    vocab: int = 256

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, 64)(tokens)
        x = x + self.param("position", nn.initializers.normal(0.02), (tokens.shape[1], 64))
        for _ in range(2):
            x = Block()(x)
        return nn.Dense(self.vocab)(nn.LayerNorm()(x))


CNN_MODEL, CNN_TX = CNN(), optax.adam(1e-3)
LM_MODEL, LM_TX = Transformer(), optax.adamw(1e-3)
_cnn_init = jax.jit(lambda key: CNN_MODEL.init(key, jnp.ones((1, 28, 28, 1)))["params"])
_lm_init = jax.jit(lambda key: LM_MODEL.init(key, jnp.ones((1, 64), jnp.int32))["params"])
_cnn_opt = jax.jit(CNN_TX.init)
_lm_opt = jax.jit(LM_TX.init)


def cnn_inputs():
    params = _cnn_init(jax.random.key(0))
    rng = np.random.default_rng(0)
    images = jax.device_put(rng.normal(size=(32, 28, 28, 1)).astype(np.float32))
    labels = jax.device_put(rng.integers(0, 10, 32).astype(np.int32))
    return params, _cnn_opt(params), images, labels


@jax.jit
def cnn_step(params, opt_state, images, labels):
    def loss_fn(p):
        logits = CNN_MODEL.apply({"params": p}, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = CNN_TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def lm_inputs():
    params = _lm_init(jax.random.key(1))
    tokens = np.random.default_rng(1).integers(0, 256, (8, 65)).astype(np.int32)
    return params, _lm_opt(params), jax.device_put(tokens)


@jax.jit
def lm_step(params, opt_state, tokens):
    def loss_fn(p):
        logits = LM_MODEL.apply({"params": p}, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = LM_TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
'''


def steps_text(regions: int) -> str:
    """The steps module's text for ``regions`` regions."""
    return f"N_REGIONS = {regions}\n" + STEPS


def policy_text(
    regions: int, suite: str = "bench", phases: bool = True, compared: int | None = None
) -> str:
    """The policy of ``regions`` steps, every one compared under ``--base`` (``compared``: the
    first that many only, the rest unchanged); with ``phases``, the gate's phases and the
    finite check spelled out, as the floor does them."""
    lines = ["version: 1", f"suite: {suite}", "defaults:", "  guard: disallow"]
    if phases:
        lines += ["  warmup: 2", "  guarded_runs: 3", "  repeats: 20"]
    # The same tree as its base would run once (its footprint unchanged): a scenario that
    # compares the tree with itself measures what comparing costs, so every region is compared.
    if compared is None:
        lines.append("  compare: always")
    lines.append("regions:")
    for i in range(regions):
        lines += [
            f"  - name: step_{i}",
            f"    step: {STEPS_MODULE}:step_{i}",
            f"    setup: {STEPS_MODULE}:make_inputs",
        ]
        if compared is not None and i < compared:
            lines.append("    compare: always")
        if phases:
            lines.append("    checks: {finite: true}")
    return "\n".join(lines) + "\n"


def build(repo: Path, regions: int, compared: int | None = None) -> None:
    """The repository of ``regions`` steps, its policy (``compared``: `policy_text`) and the
    floor scripts, committed."""
    (repo / "policies").mkdir(parents=True)
    (repo / f"{STEPS_MODULE}.py").write_text(steps_text(regions))
    (repo / "policies" / "bench.yaml").write_text(policy_text(regions, compared=compared))
    write_floor(repo, STEPS_MODULE, [(f"step_{i}", "make_inputs") for i in range(regions)])
    (repo / "floor_both.py").write_text(FLOOR_BOTH)
    (repo / "floor_processes.py").write_text(FLOOR_PROCESSES)
    commit_all(repo)


def write_floor(repo: Path, module: str, regions: list[tuple[str, str]]) -> None:
    """The floor script in ``repo`` (``floor.py``), for ``regions``: (step, setup) names of
    ``module``, run in that order."""
    (repo / "floor.py").write_text(FLOOR)
    document = {"module": module, "regions": [list(pair) for pair in regions]}
    (repo / FLOOR_REGIONS).write_text(json.dumps(document))
