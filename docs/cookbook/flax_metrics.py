"""Recipe: a flax NNX + optax step whose metrics dict is made of ``float(...)`` calls."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from cookbook.model import FEATURES, device_batch

# Made once, at import: a new optax.adam() per run would be a new static argument of the
# jitted step and compile it again every run.
TX = optax.adam(1e-2)


def make_model_and_optimizer() -> tuple[nnx.Linear, nnx.Optimizer[nnx.Linear]]:
    model = nnx.Linear(FEATURES, 1, rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, TX, wrt=nnx.Param)


def setup() -> tuple[nnx.Linear, nnx.Optimizer[nnx.Linear], jax.Array, jax.Array]:
    return (*make_model_and_optimizer(), *device_batch())


@nnx.jit
def train(
    model: nnx.Linear, optimizer: nnx.Optimizer[nnx.Linear], x: jax.Array, y: jax.Array
) -> dict[str, jax.Array]:
    def loss_fn(model: nnx.Linear) -> tuple[jax.Array, jax.Array]:
        error = model(x) - y
        return jnp.mean(error**2), jnp.mean(jnp.abs(error))

    (loss, mae), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    optimizer.update(model, grads)
    return {"loss": loss, "mae": mae}


def leaky_step(
    model: nnx.Linear, optimizer: nnx.Optimizer[nnx.Linear], x: jax.Array, y: jax.Array
) -> tuple[nnx.Linear, dict[str, float]]:
    metrics = train(model, optimizer, x, y)
    logged = {"loss": float(metrics["loss"]), "mae": float(metrics["mae"])}  # LEAK: two fetches
    return model, logged


def fetch_metrics(metrics: dict[str, jax.Array]) -> dict[str, float]:
    """The declared boundary: the whole dict in one explicit ``jax.device_get``."""
    return {name: float(value) for name, value in jax.device_get(metrics).items()}


def fixed_step(
    model: nnx.Linear, optimizer: nnx.Optimizer[nnx.Linear], x: jax.Array, y: jax.Array
) -> tuple[nnx.Linear, dict[str, float]]:
    metrics = train(model, optimizer, x, y)
    logged = fetch_metrics(metrics)
    return model, logged
