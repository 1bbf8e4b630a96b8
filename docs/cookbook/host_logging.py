"""Recipe: ``print(loss)`` and ``bool(...)`` checks inside the step fetch to the host."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cookbook.model import sgd_update


def leaky_step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    w, loss = sgd_update(w, x, y)
    print("loss", loss)  # LEAK: printing a device array fetches it
    if not bool(jnp.isfinite(w).all()):  # LEAK: bool() waits for the device and fetches
        raise FloatingPointError("the weights diverged")
    return w, loss


def fetch_metrics(loss: jax.Array, finite: jax.Array) -> dict[str, float | bool]:
    """The declared boundary: one explicit fetch of everything the host needs this step."""
    host = jax.device_get({"loss": loss, "finite": finite})
    return {"loss": float(host["loss"]), "finite": bool(host["finite"])}


def fixed_step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    w, loss = sgd_update(w, x, y)
    metrics = fetch_metrics(loss, jnp.isfinite(w).all())
    if not metrics["finite"]:  # a host value now: reading it moves nothing
        raise FloatingPointError("the weights diverged")
    return w, loss
