"""Recipe: a Python learning rate and step counter passed to a jitted function on every call."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cookbook.model import device_batch, init_weights, loss_fn

BASE_LR = 0.1
DECAY_EVERY = 1000


@jax.jit
def scheduled_update(
    w: jax.Array, x: jax.Array, y: jax.Array, lr: float, step: int
) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
    return w - lr * 0.5 ** (step // DECAY_EVERY) * grad, loss


def leaky_setup() -> tuple[jax.Array, jax.Array, jax.Array, int]:
    return init_weights(), *device_batch(), 0


def leaky_step(w: jax.Array, x: jax.Array, y: jax.Array, step: int) -> tuple[jax.Array, jax.Array]:
    w, loss = scheduled_update(w, x, y, BASE_LR, step)  # LEAK: both numbers are copied
    return w, loss


@jax.jit
def counted_update(
    w: jax.Array, x: jax.Array, y: jax.Array, step: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    # BASE_LR is a constant of the compiled program; the counter lives on the device.
    loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
    return w - BASE_LR * 0.5 ** (step // DECAY_EVERY) * grad, loss, step + 1


def fixed_setup() -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    return init_weights(), *device_batch(), jax.device_put(jnp.int32(0))


def fixed_step(
    w: jax.Array, x: jax.Array, y: jax.Array, step: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    w, loss, step = counted_update(w, x, y, step)
    return w, loss, step
