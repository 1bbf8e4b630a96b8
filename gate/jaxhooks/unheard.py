"""A first call's lowering and compiling, run without the transfer map's trace function.

On Python 3.11 the map hears the user's code through ``sys.settrace``
(`gate.witness.code_events`), and while a trace function is set the interpreter runs every
line of Python on its slower tracing path, not only the calls it reports. After JAX has
traced a step (the user's code runs there, so the map must listen), it lowers the trace to a
program and compiles it: no line of the user's runs in either, and they cost ~8 ms of a small
region's ~110 ms first call on the 2-core CPU machine (docs/performance-log.md). While a block of
the map's is active, ``pjit._resolve_and_lower`` and ``pxla.MeshComputation.compile`` run with
the calling thread's trace function off, and put back after. What JAX moves in them is still
logged and charged, at the map's next event, to the line that called the step, as before.

Only a trace function the gate's blocks named is set aside: a debugger's or a coverage
tool's stays on. A JAX without these internals runs them traced, as before.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any

from gate.jaxhooks.internals import InternalMissing, lowering_and_compiling
from gate.jaxhooks.patches import SharedPatches, attribute_replaced

TraceFunction = Callable[..., Any]


@contextmanager
def lowering_unheard(trace: TraceFunction) -> Iterator[None]:
    """While the block runs, JAX lowers and compiles with ``trace`` off in the calling thread
    (when it is that thread's trace function then)."""
    with ExitStack() as stack:
        with suppress(InternalMissing):  # raised before anything was patched
            stack.enter_context(_patches.active(lambda _found: trace))
        yield


@contextmanager
def _install(found: tuple[types.ModuleType, type]) -> Iterator[None]:
    pjit, computation = found
    lower = _unheard(pjit._resolve_and_lower)
    compile_ = _unheard(computation.__dict__["compile"])
    with (
        attribute_replaced(pjit, "_resolve_and_lower", lower, label="pjit._resolve_and_lower"),
        attribute_replaced(computation, "compile", compile_, label="MeshComputation.compile"),
    ):
        yield


def _unheard(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def unheard(*args: Any, **kwargs: Any) -> Any:
        trace = sys.gettrace()
        if trace is None or not any(trace is ours for ours in _patches.logs()):
            return function(*args, **kwargs)
        sys.settrace(None)
        try:
            return function(*args, **kwargs)
        finally:
            sys.settrace(trace)  # the callers' own local trace functions were kept

    return unheard


# Installed while any of the map's blocks runs under sys.settrace (one per thread at most).
_patches: SharedPatches[tuple[types.ModuleType, type], TraceFunction] = SharedPatches(
    lowering_and_compiling, _install
)
