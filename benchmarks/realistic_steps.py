"""The gate's own cost on steps like users': a flax CNN and a small transformer, warm cache.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/realistic_steps.py [--rounds 3]

Builds a throwaway repository with two regions written the way a project writes them
(model and optimiser made once at import; setup makes fresh parameters, optimiser state and
a batch before every run, with a jitted initialiser):

- ``cnn``: a flax Linen CNN (two 3x3 convolutions of 16 and 32 channels, average pooling, a
  dense layer of 10), adam, a batch of 32 28x28 images;
- ``transformer``: a flax Linen encoder (2 blocks, width 64, 4 heads, MLP 128), adamw,
  next-token cross-entropy on a batch of 8 sequences of 64 tokens from a vocabulary of 256.

Both compile for longer than they run (the first call dominates), as most users' steps do
in CI. It times, alternating (A B C A B C ...) so that load drifts hit all alike:

- the floor: one script doing the gate's phases by hand (first call, 2 warm-ups, 3 runs
  under ``jax.transfer_guard("disallow")``, 20 timed runs, a finite check);
- ``transfer-gate run`` of the policy;
- ``transfer-gate run --base HEAD`` (the repository committed: base and head the same tree).

Every command runs with ``JAX_COMPILATION_CACHE_DIR`` pointing at one folder, warmed by an
untimed run of each first: what a CI job with its cache restored sees; all with the cache
thresholds the gate gives its workers (every program kept, however fast it compiled).
Prints the medians over ``--rounds`` (wall and CPU seconds) and the gate/floor ratios, and
the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from gate_vs_floor import _medians, timed
from grouped import git, load_average

ROOT = Path(__file__).resolve().parent.parent

MODELS = '''
"""A flax CNN and a small transformer, as a project writes them (made by realistic_steps.py)."""
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

POLICY = """version: 1
suite: models
regions:
  - {name: cnn, step: "models:cnn_step", setup: "models:cnn_inputs", checks: {finite: true}}
  - {name: transformer, step: "models:lm_step", setup: "models:lm_inputs", checks: {finite: true}}
"""

FLOOR = '''
"""The floor: the gate's phases by hand, region after region, in one process."""
import sys

import jax
import numpy as np

import models

WARMUP, GUARDED, REPEATS = 2, 3, 20

for step, setup in ((models.cnn_step, models.cnn_inputs), (models.lm_step, models.lm_inputs)):
    jax.block_until_ready(step(*setup()))  # first call
    for _ in range(WARMUP):
        jax.block_until_ready(step(*setup()))
    for _ in range(GUARDED):
        inputs = setup()
        with jax.transfer_guard("disallow"):
            jax.block_until_ready(step(*inputs))
    for _ in range(REPEATS):
        out = jax.block_until_ready(step(*setup()))
    if not all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree_util.tree_leaves(out)):
        sys.exit(f"{step.__name__}: not finite")
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        (repo / "policies").mkdir(parents=True)
        (repo / "models.py").write_text(MODELS)
        (repo / "floor.py").write_text(FLOOR)
        (repo / "policies" / "models.yaml").write_text(POLICY)
        for git_args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "b"]):
            git(repo, *git_args)
        env = dict(os.environ)
        env["JAX_COMPILATION_CACHE_DIR"] = str(Path(scratch) / "jax-cache")
        # The thresholds the gate gives its workers (`gate.isolation.compile_cache`), for the
        # floor too: with JAX's defaults (1 s) the floor's programs, each compiled in less,
        # were never cached, and the floor compiled everything again each round.
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        gate = [sys.executable, "-m", "gate", "run", "--junit", str(Path(scratch) / "r.xml")]
        cases = {
            "floor": [sys.executable, "floor.py"],
            "gate": gate,
            "gate --base HEAD": [*gate, "--base", "HEAD"],
        }
        for command in cases.values():  # the cache warmed: what a job with it restored sees
            timed(command, repo, env, ok=(0, 1))
        seconds: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
        for i in range(args.rounds):
            for case, command in cases.items():
                seconds[case].append(timed(command, repo, env, ok=(0, 1)))
                wall, cpu = seconds[case][-1]
                print(f"round {i + 1}: {case} {wall:.1f} s ({cpu:.1f} s CPU)", file=sys.stderr)
    floor = _medians(seconds["floor"])
    print("| run | wall s | CPU s | wall / floor | CPU / floor |")
    print("|---|---|---|---|---|")
    for case in cases:
        wall, cpu = _medians(seconds[case])
        ratios = f"{wall / floor[0]:.2f}x | {cpu / floor[1]:.2f}x"
        print(f"| {case} | {wall:.1f} | {cpu:.1f} | {ratios} |")
    print(f"\nload average: {load_before} before, {load_average()} after")


if __name__ == "__main__":
    main()
