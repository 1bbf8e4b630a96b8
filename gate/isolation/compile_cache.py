"""The run's persistent compilation cache, shared by its workers.

Each region's step runs its own programs (`gate.jaxhooks.programs`): its first
call traces, lowers and dispatches on JAX's slow path, where JAX checks moves
such as an uncommitted array sent to another device, whatever ran before in
the worker. Without a persistent cache each region would also compile them
again, and ``run --base`` compiles every program twice, once per tree.

JAX's persistent compilation cache keeps the XLA executables on disk, keyed on
the program itself: the first call still traces, lowers and dispatches on the
slow path (what the first-call check needs), but reads the executable back
instead of compiling it. Workers get, through their environment:

- ``JAX_COMPILATION_CACHE_DIR``: the user's own when it is set (in the gate's
  environment or the policy's ``env:``), else a temporary folder for the run,
  removed when the run ends;
- ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0`` and
  ``JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0`` unless set, so that the small,
  fast-compiling programs of a CPU run are kept too (JAX's defaults keep only
  programs that took a second or more to compile).

JAX decides what it may cache (programs with host callbacks it never serves
from the cache); a cache hit is still reported as a compile by JAX's
monitoring events, which `gate.jaxhooks.compiles` counts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, MutableMapping

CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"
MIN_COMPILE_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
MIN_ENTRY_SIZE = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"


def use_compile_cache(env: MutableMapping[str, str], run_cache: Callable[[], str] | None) -> None:
    """Point a worker's ``env`` at the persistent cache: the user's, else ``run_cache()``."""
    if CACHE_DIR not in env:
        if run_cache is None:
            return
        env[CACHE_DIR] = run_cache()
    env.setdefault(MIN_COMPILE_TIME, "0")
    env.setdefault(MIN_ENTRY_SIZE, "0")


class RunCache:
    """A temporary folder for the run's compilation cache, made when first asked for."""

    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def path(self) -> str:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="transfer-gate-jax-cache-")
        return self._folder.name

    def remove(self) -> None:
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.cleanup()
