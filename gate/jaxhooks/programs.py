"""A region's own programs: its step's first call cold, without ``jax.clear_caches()``.

A region's first call must take JAX's slow path, where JAX checks moves it skips on the C++
fast path (an uncommitted array sent to another device), and its programs must be traced
inside the region, where host callbacks are placed and compilations are counted. Until
now the gate called ``jax.clear_caches()`` before each region; that made every verdict
independent of the regions run before in the worker, but also threw away every program of
setup's (PRNG keys, initialisers), which each region then traced and lowered again: most of
the gate's own cost on small regions (docs/performance-log.md).

``jax.make_user_context`` (public since jax 0.6) gives a value that is part of every jit
cache key: tracing, lowering, compilation and the C++ dispatch cache. So each region gets a
value of its own (`RegionPrograms`), set globally while its step runs (threads the step
starts see it too): every program the step calls is new to JAX's caches, exactly as after
a clear, whatever ran before. Setup and the gate's own computations run under one shared
value instead (`shared_programs`, a thread-local override), so their programs are traced
once per worker. Where the user keeps JAX's persistent compilation cache
(`gate.isolation.compile_cache`), executables still come from it: its key is the program,
not the context.

Inside a step's trace, every jitted function of JAX's own the step calls (``jnp.multiply``
behind ``x * 2``, ``jnp.mean``, ``jax.random``'s helpers: a dozen in the benchmark's small
steps) would be traced again in every region too: ~12 ms a region on the CPU, a tenth of a
small region's cost (docs/performance-log.md). They run no code of the user's, place no host
callback, move nothing while traced and compile nothing of their own (a nested call is
inlined into the step's program), so nothing a verdict reads depends on whether their trace
is new. While a region's programs are entered, such a call (`_jax_own`: a function defined
in JAX's ``_src``, with no closure, called inside a trace and handed no callable) is traced
under the shared value instead, once per worker. The step's own programs, the user's
helpers, and anything that could reach the user's code stay the region's own.

The step's trace then transforms those shared traces (differentiates a nested ``jnp.mean``,
transposes it, works out each primitive's output shapes), and JAX caches each transform by
its arguments and the trace context, the region's value among them: every region made them
all again (~3 ms a small step on jax 0.12, ~13 ms a flax CNN's first call). What a transform
is handed decides what it runs, so while a region's programs are entered
(`_transforms_shared`) one runs under the shared value when it is handed a shared trace (or
one made from a shared trace so: `_own_traces`), or, for the output shapes, a primitive of
JAX's own whose every rule is JAX's code (`_jax_rule`) and whose parameters hold no function
and no trace of the user's. The user's traces are new objects in every region, so whatever
is made of them stays the region's own whichever value it ran under.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import itertools
import os
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from gate.jaxhooks.internals import (
    InternalMissing,
    TraceTransforms,
    jit_info,
    jit_tracing,
    trace_transforms,
)
from gate.jaxhooks.patches import SharedPatches, attribute_replaced

_numbers = itertools.count(1)
_REGION = "transfer-gate region"  # what a region's value starts with (`RegionPrograms`)


@functools.cache
def _context() -> Any:
    """The gate's jit cache context, made once per process (making one is not thread-safe)."""
    import jax

    return jax.make_user_context(None)


def made_at_startup() -> None:
    """Make the gate's jit cache context now, before any program is traced.

    Making it adds a value to JAX's trace context, part of every cache key: a program traced
    before (the capture probe's in the worker's first region, setup's and the user's module's
    programs made at import) missed every cache after it and was traced and compiled again in
    the second region, once per run (~7 ms for the probe's alone on the CPU, more on a TPU).
    """
    _context()


class RegionPrograms:
    """One region's jit cache context: its step's programs are its own, new to every cache."""

    def __init__(self) -> None:
        self._value = (_REGION, next(_numbers))
        self._kept: ExitStack | None = None  # the hooks `keep_hooks` keeps installed

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The block's jit calls (in every thread) use this region's programs; then put back."""
        context = _context()
        previous = context.get_global()
        context.set_global(self._value)
        try:
            with ExitStack() as stack:
                _hooked(stack)
                yield
        finally:
            context.set_global(previous)

    def keep_hooks(self) -> None:
        """Keep JAX's hooks that `entered` needs installed until `let_go`, for a region entered
        again and again: a held region's turns in `run --base`'s rounds (dozens a region).
        Installing them for each turn cost ~0.2 ms once the other tree's turn had had the core
        (~45 µs in a loop), a tenth of a short step's turn; entering installed ones costs a
        lock. Installed, they change nothing outside a region's programs: what they share is
        already shared there."""
        if self._kept is None:
            self._kept = ExitStack()
            _hooked(self._kept)

    def let_go(self, step: object) -> None:
        """The region is done with its programs: a jitted step's own go now.

        Its compiled programs are under this region's value, which no later call has, yet
        JAX keeps them as long as the step function lives (a user's module keeps it): ~1.8 MB
        a small region on the CPU, which until now waited for `release_programs` and the
        recompiling of setup's programs that comes with it. ``clear_cache`` (public, on a
        ``jax.jit`` function) lets go of the step's alone: under 0.1 MB a region left
        (docs/performance-log.md). A step that is no jitted function leaves its programs to the
        release. The hooks `keep_hooks` kept are removed.
        """
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.close()
        if jit_info(step) is None:
            return
        clear = getattr(step, "clear_cache", None)
        if callable(clear):
            clear()


def _hooked(stack: ExitStack) -> None:
    """JAX's hooks that trace its own nested functions and transforms under the shared value,
    active until ``stack`` closes. Where this JAX lacks one, its nested functions are traced in
    every region, slower and as correct."""
    with contextlib.suppress(InternalMissing):
        stack.enter_context(_jax_own_shared.active(lambda _: None))
    with contextlib.suppress(InternalMissing):
        stack.enter_context(_transforms_shared.active(lambda _: None))


def gates_value(value: object) -> bool:
    """Whether ``value`` is one the gate's jit cache context takes: a region's own, or the
    shared one (None) that setup and the gate's computations run under."""
    return value is None or (type(value) is tuple and len(value) == 2 and value[0] == _REGION)


def shared_programs() -> AbstractContextManager[None]:
    """This thread's jit calls in the block use programs shared by every region of the worker."""
    return _context()(None)  # type: ignore[no-any-return]


@functools.cache
def _jax_source() -> str:
    """The folder of JAX's own code (``jax/_src/``), as code objects name their files."""
    import jax

    return os.path.join(os.path.dirname(jax.__file__), "_src") + os.sep


def _jax_own(fun: object, args: tuple[Any, ...], kwargs: dict[str, Any], tracer: type) -> bool:
    """Whether a jitted call can share its trace with every region: a plain function of JAX's
    own (defined in ``jax/_src``, no closure: no user function can hide in it), called inside a
    trace (a tracer among its arguments), every other argument plain data (`_inert`): not
    ``jnp.piecewise``'s functions (in a frozenset), a ufunc object, a class of the user's."""
    if not (
        isinstance(fun, types.FunctionType)
        and fun.__closure__ is None
        and fun.__code__.co_filename.startswith(_jax_source())
    ):
        return False
    import jax

    traced = False
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        if isinstance(leaf, tracer):
            traced = True
        elif not _inert(leaf):
            return False
    return traced


_PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None)})
_LIBRARIES = ("jax", "jaxlib", "numpy", "ml_dtypes", "builtins")


def _inert(leaf: object) -> bool:
    """Data that runs no code of the user's when JAX reads it: a builtin scalar or string
    (exactly: a subclass could be the user's), an array, a NumPy scalar or dtype, and a
    class or enum member of JAX's, NumPy's or Python's own (``jnp.float32``, a precision)."""
    import jax
    import numpy as np

    if type(leaf) in _PLAIN or isinstance(leaf, jax.Array | np.ndarray | np.generic | np.dtype):
        return True
    kind = leaf if isinstance(leaf, type) else type(leaf) if isinstance(leaf, enum.Enum) else None
    return kind is not None and kind.__module__.split(".")[0] in _LIBRARIES


def _sharing(found: tuple[types.ModuleType, type]) -> AbstractContextManager[None]:
    """``pjit._infer_params`` tracing JAX's own nested functions under the shared value."""
    pjit, tracer = found
    original: Callable[..., Any] = pjit._infer_params

    def infer_params(fun: Any, ji: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _jax_own(fun, args, kwargs, tracer):
            with shared_programs():
                found = original(fun, ji, args, kwargs)
            _own_traces.add(_trace_in(found))
            return found
        return original(fun, ji, args, kwargs)

    return attribute_replaced(pjit, "_infer_params", infer_params, label="pjit._infer_params")


# Installed while any region's programs are entered (a held region's may overlap a new one's).
_jax_own_shared: SharedPatches[tuple[types.ModuleType, type], None] = SharedPatches(
    jit_tracing, _sharing
)


def _trace_in(found: Any) -> object:
    """The trace ``_infer_params`` returned (``(PjitParams, args)``: ``params["jaxpr"]``)."""
    params = getattr(found[0], "params", None) if isinstance(found, tuple) and found else None
    return params.get("jaxpr") if isinstance(params, dict) else None


class _OwnTraces:
    """The traces of JAX's own nested functions, and those the gate's transforms made of them.

    By identity (a user's trace equal to one of them is still the user's), held weakly: a
    trace JAX's caches let go of leaves the set with it.
    """

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}

    def add(self, trace: object) -> None:
        key = id(trace)
        if trace is None or key in self._refs:
            return
        refs = self._refs

        def gone(_: object) -> None:
            refs.pop(key, None)

        with contextlib.suppress(TypeError):  # not a trace JAX could cache weakly either
            refs[key] = weakref.ref(trace, gone)

    def __contains__(self, trace: object) -> bool:
        ref = self._refs.get(id(trace))
        return ref is not None and ref() is trace


_own_traces = _OwnTraces()
_jax_rules: dict[object, bool] = {}  # by primitive: whether its shapes rule is all JAX's code


def _written_by_jax(rule: object, depth: int = 0) -> bool:
    """Whether ``rule`` is JAX's code, and every function it binds or closes over too
    (``def_abstract_eval`` wraps the rule in a closure; standard primitives bind their shape,
    dtype and sharding rules in a ``functools.partial``)."""
    if depth > 4:
        return False
    if isinstance(rule, functools.partial):
        bound = (rule.func, *rule.args, *rule.keywords.values())
        return all(_written_by_jax(f, depth + 1) for f in bound if _is_function(f))
    if not isinstance(rule, types.FunctionType):
        return False
    if not rule.__code__.co_filename.startswith(_jax_source()):
        return False
    for cell in rule.__closure__ or ():
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if _is_function(held) and not _written_by_jax(held, depth + 1):
            return False
    return True


def _is_function(value: object) -> bool:
    return callable(value) and not isinstance(value, type)


def _jax_rule(primitive: object) -> bool:
    known = _jax_rules.get(primitive)
    if known is None:
        known = _written_by_jax(getattr(primitive, "abstract_eval", None))
        if len(_jax_rules) < 100_000:  # a primitive made per call would grow it
            _jax_rules[primitive] = known
    return known


def _transforming(found: TraceTransforms) -> AbstractContextManager[None]:
    """JAX's transforms of a shared trace (and its primitives' output shapes) run under the
    shared value, their results shared in turn (`_own_traces`)."""

    def shared(original: Callable[..., Any]) -> Callable[..., Any]:
        def transform(trace: Any, *args: Any, **kwargs: Any) -> Any:
            if trace not in _own_traces:
                return original(trace, *args, **kwargs)
            with shared_programs():
                made = original(trace, *args, **kwargs)
            for part in made if isinstance(made, tuple) else (made,):
                if isinstance(part, found.jaxprs):
                    _own_traces.add(part)
            return made

        return transform

    abstract_eval = found.partial_eval._cached_abstract_eval

    def own_parameters(params: dict[str, Any]) -> bool:
        for value in params.values():
            for part in value if type(value) is tuple else (value,):
                if isinstance(part, found.jaxprs):
                    if part not in _own_traces:
                        return False
                elif _is_function(part):
                    return False
        return True

    def shapes(primitive: Any, *avals: Any, **params: Any) -> Any:
        if type(primitive) is found.primitive and _jax_rule(primitive) and own_parameters(params):
            with shared_programs():
                return abstract_eval(primitive, *avals, **params)
        return abstract_eval(primitive, *avals, **params)

    return _replaced(
        (found.ad, "linearize_jaxpr", shared(found.ad.linearize_jaxpr)),
        (found.pjit, "_transpose_jaxpr_fancy", shared(found.pjit._transpose_jaxpr_fancy)),
        (found.partial_eval, "_cached_abstract_eval", shapes),
    )


@contextlib.contextmanager
def _replaced(*replacements: tuple[types.ModuleType, str, Any]) -> Iterator[None]:
    with ExitStack() as stack:
        for owner, name, replacement in replacements:
            label = f"{owner.__name__.rsplit('.', 1)[-1]}.{name}"
            stack.enter_context(attribute_replaced(owner, name, replacement, label=label))
        yield


# Installed with `_jax_own_shared`, apart: a JAX without these still shares the traces.
_transforms_shared: SharedPatches[TraceTransforms, None] = SharedPatches(
    trace_transforms, _transforming
)


def release_programs() -> None:
    """Let go of every program JAX holds for the regions run so far in this process.

    A finished region's programs are never called again: they are under its own context,
    which no later call uses. But JAX's caches keep them (traces, lowerings, executables)
    as long as the process lives, a worker's memory grows with every region, and its garbage
    collector walks them. Setup's shared programs go too, and are traced again by the next
    region that calls them: a worker does this once every many regions, between two of them,
    never while a held region (``run --base``) still calls its own.
    """
    import jax

    jax.clear_caches()
