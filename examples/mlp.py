"""A small multi-layer perceptron trained with plain SGD: the gate's worked example.

The step keeps everything on the device except one deliberate, declared
boundary: ``fetch_metrics`` brings the loss to the host with
``jax.device_get``, the way a training loop logs it.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Params = list[dict[str, jax.Array]]

LAYER_SIZES = (16, 32, 32, 4)
BATCH = 64
LEARNING_RATE = 0.05


def init_params(key: jax.Array) -> Params:
    params = []
    for fan_in, fan_out in itertools.pairwise(LAYER_SIZES):
        key, w_key = jax.random.split(key)
        w = jax.random.normal(w_key, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
        params.append({"w": w, "b": jnp.zeros((fan_out,))})
    return params


def forward(params: Params, x: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    last = params[-1]
    return x @ last["w"] + last["b"]


def loss_fn(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((forward(params, x) - y) ** 2)


@jax.jit
def sgd_update(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return params, loss


def make_inputs() -> tuple[Params, jax.Array, jax.Array]:
    """Fresh parameters and a batch, already on the device (called before every run)."""
    key = jax.random.PRNGKey(0)
    params_key, x_key, y_key = jax.random.split(key, 3)
    x = jax.random.normal(x_key, (BATCH, LAYER_SIZES[0]))
    y = jax.random.normal(y_key, (BATCH, LAYER_SIZES[-1]))
    return init_params(params_key), x, y


def fetch_metrics(loss: jax.Array) -> dict[str, float]:
    """The declared boundary: the host really needs the loss, to log it."""
    return {"loss": float(jax.device_get(loss))}


def train_step(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
    """One SGD step. The gate runs this under the transfer guard."""
    params, loss = sgd_update(params, x, y)
    metrics = fetch_metrics(loss)
    del metrics  # a real loop would log it
    return params, loss


def check_outputs(outputs: Any) -> bool:
    """A custom result check: the loss is a positive scalar and every layer kept its shape."""
    params, loss = outputs
    shapes_ok = all(
        layer["w"].shape == (fan_in, fan_out)
        for layer, fan_in, fan_out in zip(params, LAYER_SIZES[:-1], LAYER_SIZES[1:], strict=False)
    )
    return bool(np.ndim(loss) == 0 and float(loss) > 0.0 and shapes_ok)
