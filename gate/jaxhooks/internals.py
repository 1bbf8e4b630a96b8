"""The private parts of JAX and jaxlib the gate reaches, each looked up and checked here.

Nothing outside `gate.jaxhooks` names a JAX internal. A lookup the gate cannot
do without returns what it found, checked to have the shape the gate hooks, or
raises `InternalMissing`, whose text names the internal and how it does not
fit; the witness that asked adds what that leaves unchecked and raises its own
"not checked" error (never a pass). A lookup the gate can do without (the
doctor's extras, the C++ log level, a jitted function's static arguments)
returns None instead, and the caller falls back to something that still tells
the truth.

Where each lives, in JAX 0.10.2:

- ``jax._src.array.ArrayImpl`` (defined in jaxlib's ``py_array.cc``; the
  Python half in ``jax/_src/array.py``): ``_value``, the property every
  Python-level read of an array's value goes through; ``_npy_value``, its
  cached host copy (None until a read copied); ``copy_to_host_async``, the
  method that starts a copy into that cache.
- ``jax._src.debugging._format_print_callback(fmt, ...)``: the host function
  ``jax.debug.print``'s lowering builds from its format string.
- ``jax._src.config.State.__call__`` and ``jax._src.config.Config.update``:
  what ``jax.transfer_guard_*(level)`` and ``jax.config.update`` run.
- ``jax._src.lib.utils.absl_set_min_log_level``: jaxlib's C++ log level, where
  the guard's ``log`` lines are written.
- ``jax._src.lib.cuda_versions`` (the CUDA plugin's ``_versions`` module) and
  ``jax._src.xla_bridge._backend_errors`` (why a backend failed to start).
- ``PjitFunction._jit_info``: a jitted function's signature and static arguments.
- ``ArrayImpl.__mul__`` & co. (``jax._src.numpy.array_methods._operator_mul``, Python
  functions of ``(self, other)``): an eager operator's host operand, which jit's C++ fast
  path moves without describing it.
- ``jax._src.interpreters.pxla``: ``ExecuteReplicated.__call__`` (a compiled
  program run from Python) and ``MeshExecutableFastpathData`` (what hands a
  call to jaxlib's C++ fast path); ``jax._src.lib._jax.config.Config`` (a value of the
  gate's own in jit's C++ cache key, outside JAX's tracing caches).
- ``jax/_src/pmap.py``'s ``wrapped`` frame: its ``infer_params`` closure's ``wrapped_fun``
  carries the trace info (``traced_for``, ``func_src_info``) that names a pmap's function,
  where its program is named after JAX's own wrapper (``jit(_fun)``); optional.
- ``jax._src.pjit._infer_params(fun, ji, args, kwargs)``: what every jitted call on Python's
  path runs to find or make its function's trace (a call inside a trace among them), and
  ``jax._src.core.Tracer``; `gate.jaxhooks.programs` wraps the first so that JAX's own
  functions nested in a step are traced once per worker; optional.
- ``jax._src.pjit._resolve_and_lower`` and ``pxla.MeshComputation.compile``: a first call's
  lowering and compiling, which `gate.jaxhooks.unheard` runs without the map's trace
  function (Python 3.11); optional.
- ``jax._src.interpreters.ad.linearize_jaxpr``, ``jax._src.pjit._transpose_jaxpr_fancy`` and
  ``jax._src.interpreters.partial_eval._cached_abstract_eval``: cached transforms of a nested
  call's trace, which `gate.jaxhooks.programs` makes once per worker for JAX's own; optional.
- jax 0.12's ``jax._src.flattree`` (``FTStatic`` and the nodes around it) and
  ``partial_eval.diff_tracing_cache_keys``: looked up in `gate.jaxhooks.static_misses`,
  optional (without them a changed static argument goes unexplained).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import operator
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class InternalMissing(LookupError):
    """A JAX internal the gate hooks is absent or no longer has the expected shape.

    The text names the internal and what is wrong with it, without the JAX
    version: the witness puts the version and the consequence around it.
    """


def jax_version() -> str:
    """``jax.__version__``, as every refusal names it."""
    import jax

    return str(jax.__version__)


# --- device arrays -------------------------------------------------------------------------------


def array_type() -> type:
    """``jax._src.array.ArrayImpl``, the type of every concrete ``jax.Array``."""
    try:
        from jax._src.array import ArrayImpl
    except ImportError as exc:
        raise InternalMissing(f"jax._src.array.ArrayImpl ({exc})") from exc
    found: type = ArrayImpl
    return found


def check_host_value(array_impl: type) -> None:
    """``ArrayImpl._npy_value`` exists: without it a cached host copy looks like a fetch."""
    if not hasattr(array_impl, "_npy_value"):
        raise InternalMissing("ArrayImpl has no _npy_value")


# An array's cached host copy, or None; fast (it is read on every watched read).
# Raises AttributeError on a JAX without it (see `check_host_value`).
host_value: Callable[[Any], Any] = operator.attrgetter("_npy_value")


def value_property(array_impl: type) -> property:
    """``ArrayImpl._value``: a property with a getter, defined on the type itself."""
    prop = array_impl.__dict__.get("_value")
    if not isinstance(prop, property) or prop.fget is None:
        raise InternalMissing(f"ArrayImpl._value is no longer a property ({type(prop).__name__})")
    return prop


def copy_to_host_async_method(array_impl: type) -> types.FunctionType | str:
    """``ArrayImpl.copy_to_host_async(self)``, or why it cannot be wrapped."""
    method = array_impl.__dict__.get("copy_to_host_async")
    if not isinstance(method, types.FunctionType):
        return "ArrayImpl.copy_to_host_async is not a Python function"
    if list(inspect.signature(method).parameters) != ["self"]:
        return "ArrayImpl.copy_to_host_async(self) changed its signature"
    return method


def copy_tree_function() -> types.FunctionType | None:
    """``jax.copy_to_host_async(x)`` where it is a Python function taking ``x``."""
    import jax

    fn = getattr(jax, "copy_to_host_async", None)
    if not isinstance(fn, types.FunctionType):
        return None
    if next(iter(inspect.signature(fn).parameters), None) != "x":
        return None
    return fn


# jax.Array's binary operators whose other operand always reaches the jitted ufunc as an
# argument: a host operand is moved by the call. Not ``pow``: an integer exponent becomes a
# static ``integer_pow``, and nothing moves.
BINARY_OPERATORS = (
    *("add", "sub", "mul", "truediv", "floordiv", "mod", "matmul"),
    *("and", "or", "xor", "lshift", "rshift"),
)
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def array_operator_codes(array_impl: type) -> frozenset[types.CodeType]:
    """The code of each of ``ArrayImpl``'s binary operators (``__mul__``, ``__rmul__``, ...,
    `BINARY_OPERATORS` both ways round, `COMPARISONS`) that is a Python function of
    ``(self, other)``, as ``jax._src.numpy.array_methods`` defines them (jax 0.10.1 to 0.12).

    Optional: one that is not (a JAX that moved them to C++) is left out, and a host operand
    of it stays as JAX's guard described it.
    """
    names = [*BINARY_OPERATORS, *(f"r{name}" for name in BINARY_OPERATORS), *COMPARISONS]
    found = set()
    for name in names:
        method = array_impl.__dict__.get(f"__{name}__")
        if isinstance(method, types.FunctionType) and method.__code__.co_argcount == 2:
            found.add(method.__code__)
    return frozenset(found)


def python_function(fn: object, label: str) -> types.FunctionType:
    """``fn`` itself, checked to be a Python function (only those can be interposed)."""
    if not isinstance(fn, types.FunctionType):
        raise InternalMissing(f"{label} is a {type(fn).__name__}, not a Python function")
    return fn


# --- host callbacks ------------------------------------------------------------------------------


def module_function(module: str, name: str) -> types.FunctionType:
    """``module.name``, imported and checked to be a Python function."""
    try:
        fn = getattr(importlib.import_module(module), name, None)
    except ImportError:
        fn = None
    if not isinstance(fn, types.FunctionType):
        raise InternalMissing(f"{module}.{name} ({'absent' if fn is None else type(fn).__name__})")
    return fn


PRINT_RUNNER = ("jax._src.debugging", "_format_print_callback")


def format_print_callback() -> types.FunctionType:
    """The host function of ``jax.debug.print``, taking the format string first as ``fmt``."""
    runner = module_function(*PRINT_RUNNER)
    if next(iter(inspect.signature(runner).parameters), None) != "fmt":
        raise InternalMissing(f"{'.'.join(PRINT_RUNNER)}(fmt, ...) (its signature changed)")
    return runner


# --- the guard's own switches --------------------------------------------------------------------


def guard_setters() -> tuple[types.FunctionType | None, types.FunctionType | None]:
    """``State.__call__`` (what ``jax.transfer_guard_*(level)`` runs) and ``Config.update``.

    None for one this JAX moved or made native: the gate then cannot keep the
    guard against that way of loosening it, and each region's notes say so.
    """
    from jax._src import config as jax_config

    found = []
    for owner, name in ((jax_config.State, "__call__"), (jax_config.Config, "update")):
        fn = getattr(owner, name, None)
        found.append(fn if isinstance(fn, types.FunctionType) else None)
    return found[0], found[1]


def set_cpp_log_level(level: int) -> bool:
    """Set jaxlib's C++ minimum log level; False where this jaxlib has no such call."""
    try:
        from jax._src import lib as jaxlib_bindings

        getattr(jaxlib_bindings, "utils").absl_set_min_log_level(level)  # noqa: B009
    except (ImportError, AttributeError):
        return False
    return True


# --- the machine ---------------------------------------------------------------------------------


def cuda_versions_module() -> Any | None:
    """The CUDA plugin's versions module as ``jax._src.lib`` loaded it; None without one."""
    try:
        from jax._src.lib import cuda_versions
    except ImportError:
        return None
    return cuda_versions


def backend_errors() -> dict[Any, Any] | None:
    """``xla_bridge._backend_errors``: why each backend failed to start; None where absent."""
    try:
        from jax._src import xla_bridge
    except ImportError:
        return None
    errors: Any = getattr(xla_bridge, "_backend_errors", None)
    return errors if isinstance(errors, dict) else None


# --- jitted functions ----------------------------------------------------------------------------


def jit_info(fn: object) -> Any | None:
    """A jitted function's ``_jit_info`` (signature, static arguments); None without one."""
    return getattr(fn, "_jit_info", None)


# A pmap's program is a jit of JAX's own wrapper (``jit(_fun)`` in jax 0.10); the user's
# function is in the trace info of the pmap whose call is compiling: the ``wrapped`` frame of
# ``jax/_src/pmap.py``, through its ``infer_params`` closure's ``wrapped_fun``.
_PMAP_FILE = os.path.join("jax", "_src", "pmap.py")
# The names JAX gives a pmap's program: its wrapper's, whatever the user's function is.
PMAP_PROGRAM_NAMES = frozenset({"jit(_fun)"})


def traced_function(frame: types.FrameType | None) -> tuple[str, str] | None:
    """``("pmap", "<lambda> at /repo/train.py:25")``: what the innermost pmap call on the stack
    from ``frame`` outward traces, as JAX's trace info says it; None when there is none, or
    this JAX keeps it elsewhere (the program then keeps JAX's own name)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wrapped" and code.co_filename.endswith(_PMAP_FILE):
            infer = frame.f_locals.get("infer_params")
            closure = getattr(infer, "__closure__", None) or ()
            names = getattr(getattr(infer, "__code__", None), "co_freevars", ())
            cells = dict(zip(names, closure, strict=False))
            wrapped = cells["wrapped_fun"].cell_contents if "wrapped_fun" in cells else None
            info = getattr(wrapped, "debug_info", None)
            traced_for = getattr(info, "traced_for", None)
            source = getattr(info, "func_src_info", None)
            if isinstance(traced_for, str) and isinstance(source, str) and source:
                return traced_for, source
            return None
        frame = frame.f_back
    return None


def jit_tracing() -> tuple[types.ModuleType, type]:
    """``jax._src.pjit``, whose ``_infer_params(fun, ji, args, kwargs)`` every jitted call
    on Python's path runs to find or make the function's trace (a call nested in a trace
    among them, with tracers for arguments), and ``jax._src.core.Tracer``.

    Optional: without them each region traces JAX's own nested functions again
    (`gate.jaxhooks.programs`), slower and as correct.
    """
    try:
        from jax._src import core, pjit
    except ImportError as exc:
        raise InternalMissing(f"jax._src.pjit ({exc})") from exc
    infer = pjit.__dict__.get("_infer_params")
    if not isinstance(infer, types.FunctionType):
        raise InternalMissing("jax._src.pjit._infer_params (absent)")
    if list(inspect.signature(infer).parameters) != ["fun", "ji", "args", "kwargs"]:
        raise InternalMissing("jax._src.pjit._infer_params no longer takes (fun, ji, args, kwargs)")
    tracer = getattr(core, "Tracer", None)
    if not isinstance(tracer, type):
        raise InternalMissing("jax._src.core.Tracer (absent)")
    return pjit, tracer


def lowering_and_compiling() -> tuple[types.ModuleType, type]:
    """``jax._src.pjit``, whose ``_resolve_and_lower`` lowers a jitted call's trace to the
    program XLA compiles, and ``pxla.MeshComputation``, whose ``compile`` compiles it: what a
    first call runs after tracing, with no line of the user's in it.

    Optional: without them the transfer map's ``sys.settrace`` stays on while they run
    (`gate.jaxhooks.unheard`), slower and as correct.
    """
    try:
        from jax._src import pjit
        from jax._src.interpreters import pxla
    except ImportError as exc:
        raise InternalMissing(f"jax._src.pjit or jax._src.interpreters.pxla ({exc})") from exc
    if not isinstance(pjit.__dict__.get("_resolve_and_lower"), types.FunctionType):
        raise InternalMissing("jax._src.pjit._resolve_and_lower (absent)")
    computation = getattr(pxla, "MeshComputation", None)
    if not isinstance(computation, type) or not isinstance(
        computation.__dict__.get("compile"), types.FunctionType
    ):
        raise InternalMissing("pxla.MeshComputation.compile (absent)")
    return pjit, computation


@dataclass(frozen=True)
class TraceTransforms:
    """What `trace_transforms` found: JAX's cached transforms of a trace, and its types."""

    ad: types.ModuleType  # ``linearize_jaxpr(jaxpr, ...)``
    pjit: types.ModuleType  # ``_transpose_jaxpr_fancy(jaxpr, ...)``
    partial_eval: types.ModuleType  # ``_cached_abstract_eval(primitive, *avals, **params)``
    primitive: type  # ``jax._src.core.Primitive``
    jaxprs: tuple[type, ...]  # ``Jaxpr`` (and ``ClosedJaxpr`` before jax 0.12 merged them)


def trace_transforms() -> TraceTransforms:
    """The cached transforms JAX applies, inside a step's trace, to the trace of a jitted call
    nested in it: ``ad.linearize_jaxpr`` (differentiating it), ``pjit._transpose_jaxpr_fancy``
    (its backward pass) and ``partial_eval._cached_abstract_eval`` (every primitive's output
    shapes, a nested call's among them). Each is cached by its arguments and the trace
    context, which holds a region's jit context.

    Optional: without them a region transforms JAX's own nested traces again
    (`gate.jaxhooks.programs`), slower and as correct.
    """
    linearize = module_function("jax._src.interpreters.ad", "linearize_jaxpr")
    if next(iter(inspect.signature(linearize).parameters), None) != "jaxpr":
        raise InternalMissing("jax._src.interpreters.ad.linearize_jaxpr takes no jaxpr first")
    from jax._src import core, pjit
    from jax._src.interpreters import ad
    from jax._src.interpreters import partial_eval as pe

    for module, name in ((pjit, "_transpose_jaxpr_fancy"), (pe, "_cached_abstract_eval")):
        # Cached functions: jaxlib's cache objects, not Python functions.
        if not callable(module.__dict__.get(name)):
            raise InternalMissing(f"{module.__name__}.{name} (absent)")
    primitive = getattr(core, "Primitive", None)
    jaxprs = tuple(
        kind
        for kind in (getattr(core, "Jaxpr", None), getattr(core, "ClosedJaxpr", None))
        if isinstance(kind, type)
    )
    if not isinstance(primitive, type) or not jaxprs:
        raise InternalMissing("jax._src.core.Primitive or Jaxpr (absent)")
    return TraceTransforms(ad, pjit, pe, primitive, jaxprs)


# --- executions ----------------------------------------------------------------------------------


def dispatch_internals() -> tuple[type, types.ModuleType, Any]:
    """What `gate.jaxhooks.executables` needs to see every execution of a step's programs.

    ``jax._src.interpreters.pxla.ExecuteReplicated``, whose ``__call__`` runs a
    compiled program from Python (``xla_executable``, ``name``); the ``pxla``
    module, whose ``MeshExecutableFastpathData`` jit and AOT calls build to hand
    a call to jaxlib's C++ fast path; and the gate's fast-path key (`fast_path_key`).
    """
    try:
        from jax._src.interpreters import pxla
    except ImportError as exc:
        raise InternalMissing(f"jax._src.interpreters.pxla ({exc})") from exc
    execute = getattr(pxla, "ExecuteReplicated", None)
    if not isinstance(execute, type) or not callable(execute.__dict__.get("__call__")):
        raise InternalMissing("pxla.ExecuteReplicated.__call__ (absent)")
    slots = set(getattr(execute, "__slots__", ()))
    if not {"xla_executable", "name"} <= slots:
        raise InternalMissing("pxla.ExecuteReplicated no longer holds xla_executable and name")
    fast_path = getattr(pxla, "MeshExecutableFastpathData", None)
    if not (isinstance(fast_path, type) and issubclass(fast_path, tuple)):
        raise InternalMissing("pxla.MeshExecutableFastpathData is no longer a NamedTuple")
    return execute, pxla, fast_path_key()


@functools.cache
def fast_path_key() -> Any:
    """A value of the gate's own in jaxlib's C++ jit cache key, and in no JAX tracing cache.

    jaxlib's fast path finds a jitted call's executable by its arguments and the values of
    every option "in the jit key"; JAX's Python caches (tracing, lowering, compiling) by the
    options "in the trace context". This option is only in the first. Under a value no call
    has seen, every jitted call and eager op misses the fast path and takes Python's path,
    which finds everything already traced and compiled; whatever fast-path entries it leaves
    there are under that value alone, so the entries made before (setup's programs, the
    step's own after warm-up) are found again once the value is put back: nothing is cleared,
    and nothing takes Python's path again to put its fast path back. Made once per process:
    JAX says making an option is not thread-safe. Checked on jax 0.10.1, 0.10.2 and 0.12.
    """
    try:
        from jax._src.lib import _jax  # type: ignore[attr-defined]

        key = _jax.config.Config("transfer_gate_fast_path", None, include_in_jit_key=True)
    except (ImportError, AttributeError, TypeError) as exc:
        raise InternalMissing(f"jax._src.lib._jax.config.Config ({exc})") from exc
    if not all(callable(getattr(key, name, None)) for name in ("get_global", "set_global")):
        raise InternalMissing("jax._src.lib._jax.config.Config has no get_global and set_global")
    return key
