"""The CPU job's compilation cache: the folder JAX keeps it in, and the key it is stored under.

The key names JAX's version and the device: its kind, and the host CPU's model (XLA compiles for
the host's instruction set, and GitHub's hosted runners differ), so that a runner never loads
programs compiled for another. The step runs after the gate's install, in its environment: it
is the one step here that imports JAX.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from gate.ci.step import env, set_env, set_outputs

# Under HOME; the workflow's actions/cache step keeps the same folder (~/.cache/transfer-gate-jax).
CACHE_FOLDER = os.path.join(".cache", "transfer-gate-jax")


def cache_key(jax_version: str, device_kind: str, processor: str) -> str:
    """``jax-0.10.2-cpu-<12 hex>``: the version, the device kind, the CPU model's hash."""
    model = hashlib.sha256(processor.encode()).hexdigest()[:12]
    return f"jax-{jax_version}-{device_kind.replace(' ', '_')}-{model}"


def cache_key_step(environ: Mapping[str, str]) -> int:
    """The step "Read the JAX version and device": JAX_COMPILATION_CACHE_DIR for the job's
    later steps, and the output ``key``."""
    # Here, not at the top: the steps that run from the gate's checkout have no JAX.
    import jax

    from gate.machine.diagnosis import processor_model

    key = cache_key(jax.__version__, jax.devices()[0].device_kind, processor_model())
    set_env(environ, JAX_COMPILATION_CACHE_DIR=os.path.join(env("HOME", environ), CACHE_FOLDER))
    set_outputs(environ, key=key)
    return 0
