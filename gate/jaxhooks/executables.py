"""Every compiled program a block runs, and how often: jit's C++ fast path switched off for it.

A jitted call that has run once is dispatched by jaxlib's C++ fast path, which
runs the executable without any Python; so does an eager op. Nothing in
Python sees those runs. For one dedicated run (`gate.witness.costs`) the gate
therefore makes every call take Python's path, where the compiled program is
run through ``ExecuteReplicated.__call__``, and counts those calls per
executable:

- the block runs under a value of the gate's own in jit's C++ cache key
  (`internals.fast_path_key`), new to every cache entry, so the fast-path entries
  warm-up installed are not found and each call misses once; the value is in no
  tracing cache, so Python's path finds everything traced and compiled;
- jit and AOT calls hand jaxlib a ``MeshExecutableFastpathData`` after a miss
  to install the fast path; replaced by a function returning None, jaxlib
  keeps sending that call to Python (its documented fallback), so every call,
  not only the first, is seen. Those fallback entries are under the block's value,
  which no later call has: once the value is put back, every call finds its own fast
  path again. Nothing is cleared (an earlier version cleared every fast-path entry of
  the process, before and after: each region's setup then took Python's path three
  times, ~20 ms each on the benchmark's regions).

`fast_path_off` is that without the counting: a region's first call runs under it, since
Python's path describes every host value it moves in the guard's log, where the fast path
logs an empty line.

All three (`internals.dispatch_internals`) are checked when installed; one
missing raises `InternalMissing` and nothing is changed. Restoring checks that
each patched attribute is still the gate's (`gate.jaxhooks.patches`).

``jax.pmap`` is built on jit in the JAX versions the gate supports, and is
counted like it (checked on jax 0.10.2 and 0.12).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from gate.jaxhooks.internals import dispatch_internals
from gate.jaxhooks.patches import attribute_replaced

_blocks = itertools.count(1)  # each block's own value of the fast-path key


@dataclass(frozen=True)
class StepMesh:
    """A mesh the step's program was sharded over, as JAX named it: axes, sizes, devices."""

    axis_names: tuple[str, ...]
    shape: tuple[int, ...]
    device_ids: tuple[int, ...]  # JAX device ids, in the mesh's row-major order


@dataclass(frozen=True)
class Executed:
    """One compiled program the block ran: JAX's name for it, how often, and the program."""

    name: str  # "jit(step)", as JAX names it
    runs: int
    executable: Any  # jaxlib's LoadedExecutable
    # The JAX device ids of the program's device assignment: partition (or replica) number i
    # of its collectives is device ``devices[i]``; () when jaxlib did not say.
    devices: tuple[int, ...] = ()
    # The meshes of its arguments' and results' shardings, which name its collectives' axes.
    meshes: tuple[StepMesh, ...] = ()
    where: str | None = None  # the caller's line that first ran it ("train.py:44"), if known


@dataclass
class ExecutionLog:
    """What `every_execution_seen` counted, in the order each program first ran."""

    _runs: dict[int, list[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _ran(self, call: Any, locate: Callable[[], str | None] | None) -> None:
        with self._lock:
            entry = self._runs.get(id(call))
            if entry is None:
                # Keeps `call` alive, so its id stays its own; the stack is read once per program.
                self._runs[id(call)] = [call, 1, locate() if locate is not None else None]
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
                devices=_device_ids(call.xla_executable),
                meshes=_meshes(call),
                where=where,
            )
            for call, runs, where in entries
        )


def _device_ids(executable: Any) -> tuple[int, ...]:
    try:
        return tuple(int(d.id) for d in executable.local_devices())
    except Exception:  # a jaxlib without local_devices(): the groups keep XLA's numbers
        return ()


def _meshes(call: Any) -> tuple[StepMesh, ...]:
    """The distinct meshes of ``call``'s input and output shardings (``NamedSharding.mesh``).

    Read through ``in_handler.in_shardings`` and ``out_handler.out_shardings`` (jax 0.10 and
    0.12); a JAX without them gives none, and collectives are then named by device groups.
    """
    shardings = [
        *(getattr(getattr(call, "in_handler", None), "in_shardings", None) or ()),
        *(getattr(getattr(call, "out_handler", None), "out_shardings", None) or ()),
    ]
    found: dict[StepMesh, None] = {}
    for sharding in shardings:
        mesh = getattr(sharding, "mesh", None)
        devices = getattr(mesh, "devices", None)  # an AbstractMesh has none
        names = getattr(mesh, "axis_names", None)
        if devices is None or names is None or not hasattr(devices, "flat"):
            continue
        try:
            view = StepMesh(
                tuple(str(n) for n in names),
                tuple(int(n) for n in devices.shape),
                tuple(int(d.id) for d in devices.flat),
            )
        except (AttributeError, TypeError, ValueError):
            continue
        found[view] = None
    return tuple(found)


def _no_fast_path(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``MeshExecutableFastpathData``: no fast path, so jaxlib asks Python again."""
    # (None, the value jaxlib reads as "no fast path")


@contextmanager
def fast_path_off() -> Iterator[None]:
    """Every jitted call and eager op in the block takes Python's path, from any thread.

    That path describes each host value it moves in the guard's log (``aval=...``), where
    the C++ fast path logs an empty line; a region's first call runs so
    (`gate.region.region_run`), so that a program it runs at a second line (``* 100`` twice)
    is described there too. Raises `InternalMissing` before changing anything when this JAX
    lacks a piece; puts everything back in ``finally``, and every call outside finds the
    fast path it had before.
    """
    _, pxla, key = dispatch_internals()
    with ExitStack() as patched:
        patched.enter_context(
            attribute_replaced(
                pxla,
                "MeshExecutableFastpathData",
                _no_fast_path,
                label="pxla.MeshExecutableFastpathData",
            )
        )
        previous = key.get_global()
        # Global, not this thread's: a thread the step starts is seen too.
        key.set_global(("transfer-gate", next(_blocks)))
        patched.callback(key.set_global, previous)
        yield


@contextmanager
def every_execution_seen(
    locate: Callable[[], str | None] | None = None,
) -> Iterator[ExecutionLog]:
    """Count every compiled program the block runs, from any thread.

    ``locate``, called in the running thread when a program first runs, names the line
    that ran it (`Executed.where`). Raises `InternalMissing` before changing anything
    when this JAX lacks a piece; puts everything back in ``finally``.
    """
    execute, _, _ = dispatch_internals()
    log = ExecutionLog()
    run_program = execute.__dict__["__call__"]

    def counted(self: Any, *args: Any) -> Any:
        log._ran(self, locate)
        return run_program(self, *args)

    with ExitStack() as patched:
        patched.enter_context(fast_path_off())
        patched.enter_context(
            attribute_replaced(execute, "__call__", counted, label="ExecuteReplicated.__call__")
        )
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


def program_texts(executable: Any) -> tuple[str, ...] | str:
    """The HLO text of each module of a compiled program, or why it cannot be read.

    ``hlo_modules()`` (each module's ``to_string()``) where jaxlib has it, else
    ``get_hlo_text()``: both give the optimized program the executable runs, the same
    text in every process and on a persistent-cache hit.
    """
    modules = getattr(executable, "hlo_modules", None)
    if callable(modules):
        try:
            return tuple(str(module.to_string()) for module in modules())
        except Exception as exc:
            first = _raised("hlo_modules()", exc)
    else:
        first = "the executable has no hlo_modules()"
    text = getattr(executable, "get_hlo_text", None)
    if callable(text):
        try:
            return (str(text()),)
        except Exception as exc:
            return f"{first}; {_raised('get_hlo_text()', exc)}"
    return f"{first} and no get_hlo_text()"


def _raised(call: str, exc: Exception) -> str:
    first = next(iter(str(exc).splitlines()), "")[:200]
    return f"{call} raised {type(exc).__name__}" + (f": {first}" if first else "")
