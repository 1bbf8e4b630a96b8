"""Recipe: an equinox loop that appends ``float(loss)`` to a history every step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from cookbook.model import FEATURES, device_batch

TX = optax.sgd(1e-2)
LOG_EVERY = 100
Batch = tuple[jax.Array, jax.Array]


@dataclass
class LossLog:
    """The loop's own bookkeeping: plain Python on the host, never passed to jit."""

    step: int = 0
    history: list[float] = field(default_factory=list)


def make_model_and_state() -> tuple[eqx.nn.Linear, Any]:
    model = eqx.nn.Linear(FEATURES, 1, key=jax.random.key(0))
    return model, TX.init(eqx.filter(model, eqx.is_array))


@eqx.filter_jit
def train(model: eqx.nn.Linear, opt_state: Any, batch: Batch) -> tuple[eqx.nn.Linear, Any, Any]:
    x, y = batch

    def loss_fn(model: eqx.nn.Linear) -> jax.Array:
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = TX.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def leaky_setup() -> tuple[eqx.nn.Linear, Any, Batch, LossLog]:
    return (*make_model_and_state(), device_batch(), LossLog())


def leaky_step(
    model: eqx.nn.Linear, opt_state: Any, batch: Batch, log: LossLog
) -> tuple[eqx.nn.Linear, Any]:
    model, opt_state, loss = train(model, opt_state, batch)
    log.history.append(float(loss))  # LEAK: waits for the step and fetches, every step
    log.step += 1
    return model, opt_state


@eqx.filter_jit
def train_summed(
    model: eqx.nn.Linear, opt_state: Any, loss_sum: jax.Array, batch: Batch
) -> tuple[eqx.nn.Linear, Any, jax.Array]:
    model, opt_state, loss = train(model, opt_state, batch)
    return model, opt_state, loss_sum + loss


def fetch_mean_loss(loss_sum: jax.Array) -> float:
    """The declared boundary: the summed loss, fetched once per LOG_EVERY steps."""
    return float(jax.device_get(loss_sum)) / LOG_EVERY


def fixed_setup() -> tuple[eqx.nn.Linear, Any, jax.Array, Batch, LossLog]:
    loss_sum = jax.device_put(jnp.float32(0))
    return (*make_model_and_state(), loss_sum, device_batch(), LossLog())


def fixed_step(
    model: eqx.nn.Linear, opt_state: Any, loss_sum: jax.Array, batch: Batch, log: LossLog
) -> tuple[eqx.nn.Linear, Any, jax.Array]:
    model, opt_state, loss_sum = train_summed(model, opt_state, loss_sum, batch)
    if log.step % LOG_EVERY == 0:  # a host int: reading it moves nothing
        log.history.append(fetch_mean_loss(loss_sum))
    log.step += 1
    return model, opt_state, loss_sum
