"""Recipe: a ``jax.debug.callback`` in compiled code sends its operands to the host every step."""

from __future__ import annotations

import jax

from cookbook.model import loss_fn, sgd_update

LOSSES: list[float] = []


def record_loss(loss: jax.Array) -> None:
    LOSSES.append(float(loss))


@jax.jit
def logged_update(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
    jax.debug.callback(record_loss, loss)  # LEAK: runs on the host, every step
    return w - 0.1 * grad, loss


def leaky_step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    w, loss = logged_update(w, x, y)
    return w, loss


def fetch_loss(loss: jax.Array) -> float:
    """The declared boundary: the loss comes back as an output and is fetched here."""
    return float(jax.device_get(loss))


def fixed_step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    w, loss = sgd_update(w, x, y)
    LOSSES.append(fetch_loss(loss))
    return w, loss
