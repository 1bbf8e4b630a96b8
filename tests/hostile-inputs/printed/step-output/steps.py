import jax
import jax.numpy as jnp
import numpy as np

# Workflow commands (new and old form) on lines of their own, terminal escapes (clear the
# screen, an OSC 8 link) and raw control characters: issue 36's payload.
PAYLOAD = (
    "\x1b[2J\x1b]8;;https://example.invalid\x07link\x1b]8;;\x07 \x00\x01 \u202e\n"
    "::error file=README.md,line=1::INJECTED\r\n"
    "::add-mask::secret\n"
    "::set-output name=x::y\n"
    "##[error]INJECTED-OLD"
)


@jax.jit
def add_one(x):
    return x + 1.0


def setup():
    return (jnp.ones((8, 4), jnp.float32),)


def leaky(x):
    print(PAYLOAD, flush=True)
    batch = np.ones((8, 4), np.float32)
    return add_one(x) + add_one(batch)
