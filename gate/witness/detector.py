"""Device-to-host fetches seen from Python, on every backend.

JAX's transfer guard never fires for a device-to-host transfer on the CPU
backend: the buffer already lives in host memory, so nothing is copied.
(Measured with jax and jaxlib 0.10.2 on CPU: under ``jax.transfer_guard("disallow")``
``float(x)``, ``np.asarray(x)`` and ``x.tolist()`` all succeed;
the guard itself is described in https://docs.jax.dev/en/latest/transfer_guard.html.)
The gate still wants to tell a step that calls ``float(loss)`` from one that
does not, so on CPU (and next to the guard on GPU and TPU, where the two can
be compared) it watches the three doors through which Python code reads an
array's value (each found and checked by `gate.jaxhooks.internals`):

1. ``ArrayImpl._value``, a property that every Python-level read goes
   through: ``print``/``str``/``repr``/``format``, ``float``/``int``/``bool``/
   ``complex``/``index``, ``tolist``, ``tobytes``, ``__array__`` (so
   ``np.asarray`` on GPU/TPU and on sharded arrays), pickling and
   ``jax.device_get``. A call while ``_npy_value`` is still None is a real
   fetch, unless the array is host-cached as `gate.witness.host_copies`
   models it; a value whose host copy is already cached is returned without
   a transfer and is not counted.
2. The Python buffer protocol: NumPy reads a single-device CPU array through
   it, so on CPU ``np.asarray(x)``, ``np.array(x)`` and ``x.item()`` never
   touch ``_value``. While the detector runs the array type's buffer export
   is switched off (`gate.jaxhooks.slots`); NumPy then falls back to
   ``__array__``, which reads ``_value``. Side effect while active:
   ``memoryview(x)`` and ``bytes(x)`` on a jax array raise ``TypeError``.
   Where the slot cannot be reached safely the detector still runs and
   `FetchLog.blind_spots` says what it cannot see.
3. ``ArrayImpl.copy_to_host_async`` (also reached through
   ``jax.copy_to_host_async(tree)``): it starts the copy into the host
   cache without waiting, and JAX's guard checks it on GPU and TPU as an
   implicit device-to-host transfer (``device_to_host_copy_to_host_async``
   in JAX's tests/transfer_guard_test.py). It is recorded like a read, with
   ``what="copy_to_host_async"``. JAX 0.12 hands a tree with two or more
   array leaves to jaxlib's ``batched_copy_to_host_async`` in one call, past
   the method (JAX 0.10.2's ``jax.copy_to_host_async`` called the method
   leaf by leaf), so while the detector runs ``jax.copy_to_host_async`` is
   interposed to call the method per leaf again.

Explicit fetches are told apart by interposing ``jax.device_get`` (see
`gate.jaxhooks.interpose`, so ``from jax import device_get`` call sites count too)
with a thread-local flag. In JAX 0.10.2 the only callers of
``device_get`` inside jax are ``device_get`` itself (extended dtypes) and
``multihost_utils.broadcast_one_to_all``, both explicit requests of the
user, so no implicit fetch is classified explicit. ``device_get`` first
calls ``copy_to_host_async`` on every leaf, then reads ``_value``: the first
is the explicit fetch, the read serves the copy it made.

Never seen here: ``__dlpack__``/``np.from_dlpack``, and host callbacks
inside jitted code (see `gate.witness.callbacks`).
"""

from __future__ import annotations

import functools
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from gate.jaxhooks import internals
from gate.jaxhooks.internals import InternalMissing, host_value
from gate.jaxhooks.interpose import interposed
from gate.jaxhooks.patches import SharedPatches, attribute_replaced
from gate.jaxhooks.slots import BufferSlot, buffer_export_off, buffer_slot
from gate.user_code import UserCode
from gate.witness.callbacks import in_host_callback
from gate.witness.fetches import DetectorUnavailable, FetchLog
from gate.witness.host_copies import host_copies

# Imported from here by the runner and the tests; they live beside this module.
__all__ = [
    "detect_fetches",
]


@dataclass(frozen=True)
class _Hooks:
    array_type: type
    value_property: property
    device_get: types.FunctionType
    copy_to_host_async: types.FunctionType | None  # None: cannot be wrapped here
    buffer_slot: BufferSlot | None
    blind_spots: tuple[str, ...]
    copy_tree: types.FunctionType | None  # jax.copy_to_host_async; None: not a Python function


def _find_hooks() -> _Hooks:
    """Everything the detector patches, checked before anything is patched."""
    import jax

    version = internals.jax_version()
    try:
        array_impl = internals.array_type()
    except InternalMissing as exc:
        raise DetectorUnavailable(
            f"jax {version} has no {exc}: device-to-host fetches cannot be watched"
        ) from exc
    try:
        internals.check_host_value(array_impl)
    except InternalMissing as exc:
        raise DetectorUnavailable(
            f"jax {version}: {exc}; a cached host copy cannot be told from a fetch"
        ) from exc
    try:
        prop = internals.value_property(array_impl)
    except InternalMissing as exc:
        raise DetectorUnavailable(
            f"jax {version}: {exc}; device-to-host fetches cannot be watched"
        ) from exc
    try:
        device_get = internals.python_function(jax.device_get, "jax.device_get")
    except InternalMissing as exc:
        raise DetectorUnavailable(
            f"jax {version}: {exc}; explicit fetches cannot be told from implicit ones"
        ) from exc
    slot = buffer_slot(array_impl)
    blind: list[str] = []
    if isinstance(slot, str):
        blind.append(
            "np.asarray(x), np.array(x) and x.item() on single-device CPU arrays "
            f"(NumPy reads them through the buffer protocol, which cannot be watched: {slot})"
        )
    copy_async = internals.copy_to_host_async_method(array_impl)
    if isinstance(copy_async, str):
        blind.append(f"x.copy_to_host_async() ({copy_async} in jax {version})")
    return _Hooks(
        array_impl,
        prop,
        device_get,
        None if isinstance(copy_async, str) else copy_async,
        None if isinstance(slot, str) else slot,
        tuple(blind),
        internals.copy_tree_function(),
    )


_local = threading.local()  # .explicit: device_get depth; .busy: inside our own code


def _explicit_depth() -> int:
    depth: int = getattr(_local, "explicit", 0)
    return depth


def _device_get_wrapper(
    original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    _local.explicit = _explicit_depth() + 1
    try:
        return original(*args, **kwargs)
    finally:
        _local.explicit -= 1


def _record_everywhere(array: Any, caller: types.FrameType, refused: str | None, hook: str) -> None:
    _local.busy = True
    try:
        frames = traceback.extract_stack(caller)
        explicit = _explicit_depth() > 0
        in_callback = in_host_callback()
        for log in _shared.logs():
            log._record(array, frames, explicit, in_callback, refused, hook=hook)
    finally:
        _local.busy = False


def _without_transfer(array: Any) -> bool:
    """Reading ``array`` now moves nothing, or is the detector's own work."""
    return (
        getattr(_local, "busy", False) or host_value(array) is not None or host_copies.holds(array)
    )


def _watched(hook: str, read: Callable[[Any], Any], array: Any, caller: types.FrameType) -> Any:
    """``read(array)``, recorded as a fetch unless another thread's read of it came first."""
    try:
        value = read(array)
    except Exception as exc:
        # The guard (GPU/TPU, disallow) raises here: record the attempt so
        # that the guard's finding and the detector's can be compared. A
        # refused read caches nothing.
        lines = str(exc).strip().splitlines()
        _record_everywhere(array, caller, lines[0] if lines else type(exc).__name__, hook)
        raise
    if not host_copies.add(array):
        _record_everywhere(array, caller, None, hook)
    return value


def _value_property(hooks: _Hooks) -> property:
    read = hooks.value_property.fget
    assert read is not None

    def _value(self: Any) -> Any:
        if _without_transfer(self):
            return read(self)
        return _watched("_value", read, self, sys._getframe(1))

    return property(_value, doc=hooks.value_property.__doc__)


def _copy_to_host_async_method(original: types.FunctionType) -> Callable[[Any], Any]:
    @functools.wraps(original)
    def copy_to_host_async(self: Any) -> Any:
        if _without_transfer(self):
            return original(self)
        return _watched("copy_to_host_async", original, self, sys._getframe(1))

    return copy_to_host_async


def _copy_tree_leaf_by_leaf(
    original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``jax.copy_to_host_async(x)`` as JAX 0.10.2 ran it: each leaf's own
    ``copy_to_host_async``, so the watched method sees every array (JAX 0.12
    batches two or more array leaves in C++, where nothing is seen)."""
    import jax

    x = args[0] if args else kwargs["x"]
    for leaf in jax.tree_util.tree_leaves(x):
        try:
            copy_fn = leaf.copy_to_host_async
        except AttributeError:
            continue
        copy_fn()
    return x


@contextmanager
def _patched(hooks: _Hooks) -> Iterator[None]:
    with ExitStack() as stack:
        tp = hooks.array_type
        stack.enter_context(
            attribute_replaced(tp, "_value", _value_property(hooks), label="ArrayImpl._value")
        )
        copy_async = hooks.copy_to_host_async
        if copy_async is not None:
            stack.enter_context(
                attribute_replaced(
                    tp,
                    "copy_to_host_async",
                    _copy_to_host_async_method(copy_async),
                    label="ArrayImpl.copy_to_host_async",
                )
            )
            if hooks.copy_tree is not None:
                stack.enter_context(interposed(hooks.copy_tree, _copy_tree_leaf_by_leaf))
        stack.enter_context(interposed(hooks.device_get, _device_get_wrapper))
        if hooks.buffer_slot is not None:
            stack.enter_context(buffer_export_off(hooks.buffer_slot))
        yield


# Looked up at each install, not bound now: a test (or a sitecustomize) may stand in for it.
_shared: SharedPatches[_Hooks, FetchLog] = SharedPatches(lambda: _find_hooks(), _patched)  # noqa: PLW0108


@contextmanager
def detect_fetches(code: UserCode, boundary_of: Callable[[], str | None]) -> Iterator[FetchLog]:
    """Record every device-to-host fetch, in any thread, while the block runs.

    ``boundary_of()`` is asked, in the fetching thread, which declared
    boundary is running (`gate.region.boundary.BoundaryMonitor.current`). Blocks
    may nest or overlap across threads: the hooks are installed while at
    least one is active and removed, in ``finally``, when the last ends
    (`SharedPatches`). Raises `DetectorUnavailable` before changing anything
    when this JAX lacks a hook.
    """
    with _shared.active(lambda hooks: FetchLog(code, boundary_of, hooks.blind_spots)) as log:
        yield log
