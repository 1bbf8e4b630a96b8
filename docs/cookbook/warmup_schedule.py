"""Recipe: a warmup learning rate computed in Python and passed as a static argument.

Its cost shows only as the loop's step moves on: the setups take the run's index (`run`), as a
training loop hands its step the step number, so each run of the region is a later step.
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np
import optax

from cookbook.model import device_batch, init_weights, loss_fn

PEAK_LR = 0.1
WARMUP_STEPS = 100


def warmup_lr(step: int) -> float:
    return PEAK_LR * min(1.0, (step + 1) / WARMUP_STEPS)


@partial(jax.jit, static_argnames="lr")
def sgd_at(w: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
    return w - lr * grad, loss


def leaky_setup(run: int) -> tuple[jax.Array, jax.Array, jax.Array, int]:
    return init_weights(), *device_batch(), run


def leaky_step(w: jax.Array, x: jax.Array, y: jax.Array, step: int) -> tuple[jax.Array, jax.Array]:
    return sgd_at(w, x, y, lr=warmup_lr(step))  # RECOMPILE: a new static value each step


SCHEDULE = optax.linear_schedule(PEAK_LR / WARMUP_STEPS, PEAK_LR, WARMUP_STEPS)


@jax.jit
def scheduled_sgd(
    w: jax.Array, x: jax.Array, y: jax.Array, step: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    # The schedule is evaluated in the program, on the device's counter.
    loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
    return w - SCHEDULE(step) * grad, loss, step + 1


def fixed_setup(run: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    return init_weights(), *device_batch(), jax.device_put(np.int32(run))


def fixed_step(
    w: jax.Array, x: jax.Array, y: jax.Array, step: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    return scheduled_sgd(w, x, y, step)
