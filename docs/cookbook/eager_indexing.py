"""Recipe: ``.item()``, ``np.asarray`` and indexing with a host value, outside jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ROWS, COLUMNS = 16, 8


def setup() -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((ROWS, COLUMNS), dtype=np.float32)
    scores = rng.standard_normal((ROWS,), dtype=np.float32)
    return jax.device_put(table), jax.device_put(scores)


def leaky_step(table: jax.Array, scores: jax.Array) -> tuple[jax.Array, np.ndarray]:
    best = scores.argmax().item()  # LEAK: .item() fetches the index to the host
    row = table[best]  # LEAK: eager indexing sends the Python int back to the device
    probs = np.asarray(jax.nn.softmax(scores))  # LEAK: NumPy reads the device array
    return row, probs


@jax.jit
def best_row(table: jax.Array, scores: jax.Array) -> tuple[jax.Array, jax.Array]:
    return table[jnp.argmax(scores)], jax.nn.softmax(scores)


def fixed_step(table: jax.Array, scores: jax.Array) -> tuple[jax.Array, jax.Array]:
    row, probs = best_row(table, scores)
    return row, probs
