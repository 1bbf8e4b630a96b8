"""JAX's persistent compilation cache, when the user keeps one: what the workers get.

When ``JAX_COMPILATION_CACHE_DIR`` is set (in the gate's environment or a policy's ``env:``;
the reusable workflow keeps one between CI runs), JAX reads compiled executables back instead
of compiling the same programs again: the first call still traces, lowers and dispatches on
JAX's slow path (what the first-call check needs), but does not compile. Workers then also get,
unless set:

- ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0`` and
  ``JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0``, so that the small, fast-compiling programs
  of a CPU run are kept too (JAX's defaults keep only programs that took a second or more);
- ``JAX_COMPILATION_CACHE_INCLUDE_METADATA_IN_KEY=true``: by default JAX's key leaves out
  the programs' source locations, so an executable read back carries the file names and line
  numbers of whichever program wrote it. The gate reads them (a collective's line, a cost's
  function): ``run --base``'s base, whose files lie in another checkout, would get the head's
  lines, and a moved line its old number. That checkout lies in the same folder every run
  (`gate.compare.worktree`), so the base's own entries are found again next run.

Without one, the gate makes none: each program of a run is compiled once anyway (a region's
step is its own, `gate.jaxhooks.programs`; the base's programs are the base's files), and
writing every one to disk cost more than it saved.

JAX decides what it may cache (programs with host callbacks it never serves from the cache);
a cache hit is still reported as a compile by JAX's monitoring events, which
`gate.jaxhooks.compiles` counts.
"""

from __future__ import annotations

from collections.abc import MutableMapping

CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"
MIN_COMPILE_TIME = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
MIN_ENTRY_SIZE = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
METADATA_IN_KEY = "JAX_COMPILATION_CACHE_INCLUDE_METADATA_IN_KEY"


def use_compile_cache(env: MutableMapping[str, str]) -> None:
    """Set a worker's ``env`` up for the user's persistent cache, if it names one."""
    if not env.get(CACHE_DIR):
        return
    env.setdefault(MIN_COMPILE_TIME, "0")
    env.setdefault(MIN_ENTRY_SIZE, "0")
    env.setdefault(METADATA_IN_KEY, "true")
