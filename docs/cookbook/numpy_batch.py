"""Recipe: a NumPy batch handed to a jitted step is copied to the device on every call."""

from __future__ import annotations

import jax
import numpy as np

from cookbook.model import init_weights, numpy_batch, sgd_update


def leaky_setup() -> tuple[jax.Array, np.ndarray, np.ndarray]:
    return init_weights(), *numpy_batch()


def step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    w, loss = sgd_update(w, x, y)  # LEAK: x and y are NumPy arrays under leaky_setup
    return w, loss


def fixed_setup() -> tuple[jax.Array, jax.Array, jax.Array]:
    x, y = numpy_batch()
    return init_weights(), jax.device_put(x), jax.device_put(y)
