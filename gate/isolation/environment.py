"""A worker's environment, decided before it imports jax.

`gate.isolation.scheduler` starts each worker with `worker_environment`. The gate's own
process never starts JAX's backend: everything that needs JAX, the user's modules included,
runs in a worker (a TPU chip admits one process; a GPU's memory is one pool).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gate.isolation.compile_cache import use_compile_cache

if TYPE_CHECKING:  # imported before the rest of the gate (gate.isolation.spawn)
    from gate.policy.model import Policy

# The files a GitHub Actions step writes its outputs, environment, PATH, state and job summary
# to. The gate writes the summary itself; a region's code must not reach the others, or a step
# under test could set the job's outputs and the environment of the steps after it.
STEP_FILES = ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")


def worker_environment(parent: Mapping[str, str], policy: Policy | None) -> dict[str, str]:
    """The environment a worker for ``policy``'s regions starts with.

    This is the place for what must be set before ``import jax``: XLA_FLAGS,
    JAX_PLATFORMS, TF_CPP_MIN_LOG_LEVEL (jaxlib reads it once, when it loads;
    CI images often set it to 2, which hides every ``log``-level guard line).
    The gate decides it here rather than leaving it to the caller's shell. A
    region whose environment differs from the running worker's gets a fresh
    worker, so this may depend on the policy.

    The gate's own environment (whose TF_CPP_MIN_LOG_LEVEL `gate.cli.main` has
    already made safe), plus the policy's ``env:``, plus JAX's persistent
    compilation cache settings when the user keeps one
    (`gate.isolation.compile_cache`), less the step's GitHub Actions files (`STEP_FILES`).
    """
    env = {**parent, **(dict(policy.env) if policy is not None else {})}
    for name in STEP_FILES:
        env.pop(name, None)
    prepare_environment(env)  # a policy's env must not hide the guard's log lines either
    use_compile_cache(env)
    return env


def prepare_environment(environ: dict[str, str] | os._Environ[str]) -> None:
    """Make sure jaxlib will write the guard's warnings, before jax is imported.

    CI images often set ``TF_CPP_MIN_LOG_LEVEL=2`` to cut noise; it is read
    once, when jaxlib loads, and hides every guard line. Level 1 keeps the
    warnings (the guard's) and drops jaxlib's info chatter.
    """
    level = environ.get("TF_CPP_MIN_LOG_LEVEL", "")
    if not level.isdigit() or int(level) > 1:
        environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
