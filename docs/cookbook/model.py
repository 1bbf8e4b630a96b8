"""The small linear model most recipes train: made once here so each recipe shows only its leak."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

FEATURES = 8
BATCH = 32
LEARNING_RATE = 0.1


def numpy_batch() -> tuple[np.ndarray, np.ndarray]:
    """A batch as a data loader makes it: NumPy arrays, on the host."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
    y = rng.standard_normal((BATCH, 1), dtype=np.float32)
    return x, y


def device_batch() -> tuple[jax.Array, jax.Array]:
    """The same batch, put on the device explicitly (setup runs outside the guard)."""
    x, y = numpy_batch()
    return jax.device_put(x), jax.device_put(y)


def init_weights() -> jax.Array:
    return jax.device_put(np.zeros((FEATURES, 1), dtype=np.float32))


def make_inputs() -> tuple[jax.Array, jax.Array, jax.Array]:
    """Weights and a batch on the device: setup for the recipes whose leak is in the step."""
    return init_weights(), *device_batch()


def loss_fn(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ w - y) ** 2)


@jax.jit
def sgd_update(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
    return w - LEARNING_RATE * grad, loss
