"""Every compiled program a block runs, and how often: jit's C++ fast path switched off for it.

A jitted call that has run once is dispatched by jaxlib's C++ fast path, which
runs the executable without any Python; so does an eager op. Nothing in
Python sees those runs. For one dedicated run (`gate.witness.costs`) the gate
therefore makes every call take Python's path, where the compiled program is
run through ``ExecuteReplicated.__call__``, and counts those calls per
executable:

- jit and AOT calls hand jaxlib a ``MeshExecutableFastpathData`` after a miss
  to install the fast path; replaced by a function returning None, jaxlib
  keeps sending that call to Python (its documented fallback), so every call,
  not only the first, is seen;
- ``PjitFunctionCache.clear_all()`` before the block drops the fast-path
  entries warm-up installed, and after it the fallback entries the block
  left, so the next call installs its fast path again. It clears nothing
  compiled: the executables stay in Python's caches (no compile happens).

All three (`internals.dispatch_internals`) are checked when installed; one
missing raises `InternalMissing` and nothing is changed. Restoring checks that
each patched attribute is still the gate's (`gate.jaxhooks.patches`).

``jax.pmap`` is built on jit in the JAX versions the gate supports, and is
counted like it (checked on jax 0.10.2 and 0.12).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from gate.jaxhooks.internals import dispatch_internals
from gate.jaxhooks.patches import attribute_replaced


@dataclass(frozen=True)
class Executed:
    """One compiled program the block ran: JAX's name for it, how often, and the program."""

    name: str  # "jit(step)", as JAX names it
    runs: int
    executable: Any  # jaxlib's LoadedExecutable


@dataclass
class ExecutionLog:
    """What `every_execution_seen` counted, in the order each program first ran."""

    _runs: dict[int, list[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _ran(self, call: Any) -> None:
        with self._lock:
            entry = self._runs.get(id(call))
            if entry is None:
                self._runs[id(call)] = [call, 1]  # keeps `call` alive, so its id stays its own
            else:
                entry[1] += 1

    def executed(self) -> tuple[Executed, ...]:
        with self._lock:
            entries = list(self._runs.values())
        return tuple(
            Executed(
                name=str(call.name),
                runs=runs,
                executable=call.xla_executable,
            )
            for call, runs in entries
        )


def _no_fast_path(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``MeshExecutableFastpathData``: no fast path, so jaxlib asks Python again."""
    # (None, the value jaxlib reads as "no fast path")


@contextmanager
def every_execution_seen() -> Iterator[ExecutionLog]:
    """Count every compiled program the block runs, from any thread.

    Raises `InternalMissing` before changing anything when this JAX lacks a
    piece; puts everything back in ``finally``.
    """
    execute, pxla, clear_all = dispatch_internals()
    log = ExecutionLog()
    run_program = execute.__dict__["__call__"]

    def counted(self: Any, *args: Any) -> Any:
        log._ran(self)
        return run_program(self, *args)

    with ExitStack() as patched:
        patched.callback(clear_all)  # last out: after both attributes are back
        patched.enter_context(
            attribute_replaced(execute, "__call__", counted, label="ExecuteReplicated.__call__")
        )
        patched.enter_context(
            attribute_replaced(
                pxla,
                "MeshExecutableFastpathData",
                _no_fast_path,
                label="pxla.MeshExecutableFastpathData",
            )
        )
        clear_all()
        yield log


def cost_analysis(executable: Any) -> dict[str, float] | str:
    """XLA's cost analysis of one program (``flops``, ``bytes accessed``, ...), or why not.

    jaxlib returns a dict; older ones a list with one dict per program.
    """
    try:
        found = executable.cost_analysis()
    except Exception as exc:  # UNIMPLEMENTED on some backends
        return _raised("cost_analysis()", exc)
    if isinstance(found, list | tuple) and len(found) == 1:
        found = found[0]
    if not isinstance(found, dict):
        return f"cost_analysis() gave a {type(found).__name__}, not a dict"
    return {str(k): float(v) for k, v in found.items() if isinstance(v, int | float)}


MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)


def memory_analysis(executable: Any) -> dict[str, int] | str:
    """``get_compiled_memory_stats()`` of one program, the fields in `MEMORY_FIELDS`, or why not."""
    try:
        stats = executable.get_compiled_memory_stats()
    except Exception as exc:
        return _raised("get_compiled_memory_stats()", exc)
    missing = [name for name in MEMORY_FIELDS if not isinstance(getattr(stats, name, None), int)]
    if missing:
        return f"get_compiled_memory_stats() has no {', '.join(missing)}"
    return {name: int(getattr(stats, name)) for name in MEMORY_FIELDS}


def _raised(call: str, exc: Exception) -> str:
    first = next(iter(str(exc).splitlines()), "")[:200]
    return f"{call} raised {type(exc).__name__}" + (f": {first}" if first else "")
