"""A worker's environment, decided before it imports jax; the gate's own process off the GPU.

`gate.isolation.scheduler` starts each worker with `worker_environment`, and
`keep_accelerators_for_workers` keeps the accelerators for the workers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence

from gate.isolation.compile_cache import use_compile_cache
from gate.machine.devices import forced_cpu_devices, local_accelerators
from gate.policy.model import Policy, Region


def worker_environment(
    parent: Mapping[str, str],
    policy: Policy,
    region: Region,
    *,
    run_cache: Callable[[], str] | None = None,
) -> dict[str, str]:
    """The environment a worker for ``region`` starts with.

    This is the place for what must be set before ``import jax``: XLA_FLAGS,
    JAX_PLATFORMS, TF_CPP_MIN_LOG_LEVEL (jaxlib reads it once, when it loads;
    CI images often set it to 2, which hides every ``log``-level guard line).
    The gate decides it here rather than leaving it to the caller's shell. A
    region whose environment differs from the running worker's gets a fresh
    worker, so this may depend on the region.

    The gate's own environment (whose TF_CPP_MIN_LOG_LEVEL `gate.cli.main` has
    already made safe), plus the policy's ``env:``, plus JAX's persistent
    compilation cache (`gate.isolation.compile_cache`): the user's
    JAX_COMPILATION_CACHE_DIR when set, else ``run_cache()``, the run's own.
    """
    del region  # a policy's regions share its environment
    env = {**parent, **dict(policy.env)}
    prepare_environment(env)  # a policy's env must not hide the guard's log lines either
    use_compile_cache(env, run_cache)
    return env


def keep_accelerators_for_workers(policies: Sequence[Policy] = ()) -> None:
    """Keep the gate's own process off GPUs and TPUs; call before importing the user's modules.

    The gate imports the user's modules to check a policy, and a module that
    makes an array when imported would start JAX's backend in the gate's
    process: on a GPU, JAX then preallocates most of the memory
    (XLA_PYTHON_CLIENT_PREALLOCATE) in a process that runs no region, and
    the worker runs out. Only this process's JAX config changes; workers
    start with the environment as it is.

    The CPU here gets as many devices as the ``policies``' workers will have
    (`import_devices`), so a module that builds an 8-device mesh at import
    imports here too.
    """
    import jax

    jax.config.update("jax_platforms", "cpu")
    devices = import_devices(os.environ, policies)
    if devices > 1:
        # Where JAX already started here (an earlier call), it keeps its count.
        with contextlib.suppress(RuntimeError):
            jax.config.update("jax_num_cpu_devices", devices)


def import_devices(environ: Mapping[str, str], policies: Sequence[Policy]) -> int:
    """How many devices the most demanding of ``policies``' workers will see: the CPU devices
    its ``XLA_FLAGS`` force, or this machine's GPUs or TPU devices, whichever is more (a
    worker's environment is ``environ`` with its policy's ``env:`` over it)."""
    environments: list[Mapping[str, str]] = [{**environ, **dict(p.env)} for p in policies]
    environments = environments or [environ]
    return max(
        count
        for env in environments
        for count in (forced_cpu_devices(env.get("XLA_FLAGS", "")), local_accelerators(env))
    )


def prepare_environment(environ: dict[str, str] | os._Environ[str]) -> None:
    """Make sure jaxlib will write the guard's warnings, before jax is imported.

    CI images often set ``TF_CPP_MIN_LOG_LEVEL=2`` to cut noise; it is read
    once, when jaxlib loads, and hides every guard line. Level 1 keeps the
    warnings (the guard's) and drops jaxlib's info chatter.
    """
    level = environ.get("TF_CPP_MIN_LOG_LEVEL", "")
    if not level.isdigit() or int(level) > 1:
        environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
