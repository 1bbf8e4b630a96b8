"""Recipe: an uncommitted array meets one committed to another device and is copied there.

Needs two devices: ``two_devices.yaml`` sets ``XLA_FLAGS=--xla_force_host_platform_device_count=2``
for its worker, before jax is imported, so the CPU backend has two.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cookbook.model import numpy_batch, sgd_update


def leaky_setup() -> tuple[jax.Array, jax.Array, jax.Array]:
    second = jax.devices()[1]
    w = jax.device_put(jnp.zeros((8, 1)), second)  # the model lives on the second device
    x, y = numpy_batch()
    return w, jnp.asarray(x), jnp.asarray(y)  # uncommitted: on the default (first) device


def step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    w, loss = sgd_update(w, x, y)  # LEAK: x and y are copied to w's device under leaky_setup
    return w, loss


def fixed_setup() -> tuple[jax.Array, jax.Array, jax.Array]:
    second = jax.devices()[1]
    x, y = numpy_batch()
    w = jnp.zeros((8, 1))
    return jax.device_put(w, second), jax.device_put(x, second), jax.device_put(y, second)
