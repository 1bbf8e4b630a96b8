"""Capture JAX's transfer-guard lines and refusals on 8 CPU devices, as this folder keeps them.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/guard-lines/capture.py \
        > tests/guard-lines/jax-$(python -c 'import jax; print(jax.__version__)').log 2>&1

Not a test: the files it wrote, from each JAX version CI tests, are the fixtures of
tests/test_guard_text.py. Each scenario's distinct lines are kept once, verbatim, under a
``# scenario:`` line; a refusal (the guard at ``disallow``) is kept as ``# refused: ...``.
"""

import os
import re
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((8,), ("data",))  # Explicit axes, as jax.make_mesh makes them
auto = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
grid = jax.make_mesh((4, 2), ("data", "model"))
split, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
put = jax.device_put(x, split)
uncommitted = jnp.ones((64, 16), np.float32)
two = jax.device_put(
    x, NamedSharding(jax.make_mesh((2,), ("data",), devices=jax.devices()[:2]), P("data"))
)
other_two = NamedSharding(jax.make_mesh((2,), ("data",), devices=jax.devices()[2:4]), P("data"))
replicated_params = jax.device_put(np.ones((16, 4), np.float32), whole)


@jax.jit
def loss(w, batch):
    return jnp.sum(batch @ w)


auto_grid = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


def constrained(a, sharding):
    return jax.jit(lambda b: jax.lax.with_sharding_constraint(b, sharding))(a)


def under_mesh(a):
    with jax.set_mesh(mesh):
        return jnp.asarray(a)


one_device = jax.device_put(x, jax.devices()[0])
SCENARIOS = {
    # The second multiplication takes JAX's C++ fast path: its line carries no description.
    "python scalar in an eager op, twice": lambda: (one_device * 2.0, one_device * 3.0),
    "numpy batch to a jit with replicated params": lambda: loss(replicated_params, x),
    "numpy batch to a jit with in_shardings P('data')": lambda: jax.jit(
        lambda a: a * 2, in_shardings=split
    )(x),
    "python scalar to a jit": lambda: jax.jit(lambda a, b: a * b)(put, 2.0),
    "uncommitted array meets a sharded one": lambda: jax.jit(lambda a, b: a + b)(put, uncommitted),
    "np.asarray of a split array": lambda: np.asarray(jax.device_put(x, split)),
    "device_put of a split array to P()": lambda: jax.device_put(jax.device_put(x, split), whole),
    "device_put of a numpy array to a 4x2 mesh, P('data', 'model')": lambda: jax.device_put(
        x, NamedSharding(grid, P("data", "model"))
    ),
    "device_put of a numpy array to a 4x2 mesh, P('data')": lambda: jax.device_put(
        x, NamedSharding(grid, P("data"))
    ),
    "reshard of a numpy array": lambda: jax.sharding.reshard(x, split),
    "with_sharding_constraint helper on a numpy array (Auto mesh)": lambda: constrained(
        x, NamedSharding(auto, P("data"))
    ),
    "with_sharding_constraint helper to P('data') of a 4x2 Auto mesh": lambda: constrained(
        x, NamedSharding(auto_grid, P("data"))
    ),
    "jnp.asarray of a numpy array under jax.set_mesh": lambda: under_mesh(x),
    "a 2-device array copied to 2 other devices": lambda: jax.device_put(two, other_two),
    "a one-device array put on the mesh": lambda: jax.device_put(
        jax.device_put(x, jax.devices()[1]), split
    ),
    "bfloat16 read of a split array": lambda: np.asarray(
        jax.device_put(x.astype(jnp.bfloat16), split)
    ),
    "int32 vector read of a split array": lambda: np.asarray(
        jax.device_put(np.arange(8, dtype=np.int32), split)
    ),
}


def main() -> None:
    print(f"# jax {jax.__version__}, jaxlib {jax.lib.__version__}, {jax.device_count()} devices")
    for name, make in SCENARIOS.items():
        with tempfile.TemporaryFile(mode="w+") as log:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(log.fileno(), 2)
            try:
                with jax.transfer_guard("log_explicit"):
                    jax.block_until_ready(make())
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
            log.seek(0)
            lines = [line.rstrip("\n") for line in log if "transfer" in line]
        print(f"# scenario: {name}")
        seen = set()
        for line in lines:
            description = re.sub(r"^.*?\] ", "", line)
            if description not in seen:
                seen.add(description)
                print(line)
        try:
            with jax.transfer_guard("disallow"):
                jax.block_until_ready(make())
        except Exception as exc:  # the guard's refusal, as the gate parses it
            print(f"# refused: {str(exc).splitlines()[0]}")


main()
