"""A fixed computation of the gate's own, timed beside the step to tell the two workers apart.

``run --base`` compares two processes. When the machine treats them
differently (one shares a core with a busy neighbour, sits on another NUMA
node, or gets throttled), every run of one is slower whatever code it runs,
and that reads as a slowdown of the change. Measured on the loaded 2-core
development machine: unchanged trees judged 3.2x slower and 0.38x "faster".
So once the step's rounds decide a change, both workers time this computation, the same
program in both, in paired rounds of its own; when the two workers' times for it differ as
much as the change, the step's verdict is left open (`gate.compare.rounds`) instead of
blaming the change. Not to be confused with a region's reference outputs
(``checks.reference``, `gate.region.checks`): this is about the workers, not the results.

The computation is a small jitted matrix product on the default device: it
uses the same device, dispatch path and host thread as the step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from gate.jaxhooks.programs import shared_programs


@functools.cache
def _reference() -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    @jax.jit
    def product(a: Any) -> Any:
        return jnp.tanh(a @ a) @ a

    matrix = jax.device_put(np.linspace(-1.0, 1.0, 128 * 128, dtype=np.float32).reshape(128, 128))
    with shared_programs():
        jax.block_until_ready(product(matrix))  # compiled here, outside every timed call

    def run() -> Any:
        return jax.block_until_ready(product(matrix))

    return run


def warm_reference() -> None:
    """Run it once untimed, so that no timed run of it compiles."""
    with shared_programs():
        _reference()()


def time_reference() -> float:
    """Seconds the reference computation takes once, on this worker, now."""
    run = _reference()
    with shared_programs():  # the same program for every region (`gate.jaxhooks.programs`)
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
