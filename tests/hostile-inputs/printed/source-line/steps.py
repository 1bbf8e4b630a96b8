import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def add_one(x):
    return x + 1.0


def setup():
    return (jnp.ones((8, 4), jnp.float32),)


def leaky(x):
    batch = np.ones((8, 4), np.float32)
    return add_one(x) + add_one(batch)  # [2J]8;;https://example.invalidlink]8;;  ::error::INJECTED
