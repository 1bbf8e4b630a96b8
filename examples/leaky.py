"""The worked example's step with the usual leaks in it: what a failing region reads like.

``transfer-gate run examples/policies/leaky.yaml`` fails on purpose (docs/reports.md
shows its output): the NumPy batch handed to the jitted update is copied to the device
every step, the Python learning rate too, and printing the loss copies it back to the
host.
"""

from __future__ import annotations

import jax
import numpy as np

from examples.mlp import LAYER_SIZES, Params, init_params, loss_fn

BATCH = 64
LEARNING_RATE = 0.05


@jax.jit
def sgd_update(params: Params, x: jax.Array, y: jax.Array, lr: float) -> tuple[Params, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss


def make_inputs() -> tuple[Params, np.ndarray, np.ndarray]:
    """Parameters on the device, but the batch left in NumPy, as a data loader makes it."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, LAYER_SIZES[0]), dtype=np.float32)
    y = rng.standard_normal((BATCH, LAYER_SIZES[-1]), dtype=np.float32)
    return init_params(jax.random.PRNGKey(0)), x, y


def train_step(params: Params, x: np.ndarray, y: np.ndarray) -> tuple[Params, jax.Array]:
    params, loss = sgd_update(params, x, y, LEARNING_RATE)
    print("loss", loss)
    return params, loss
