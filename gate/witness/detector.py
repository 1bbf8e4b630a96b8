"""Device-to-host fetches seen from Python, on every backend.

JAX's transfer guard never fires for a device-to-host transfer on the CPU
backend: the buffer already lives in host memory, so nothing is copied
(FIELD-NOTES, "What is and isn't caught"). The gate still wants to tell a
step that calls ``float(loss)`` from one that does not, so on CPU (and next
to the guard on GPU and TPU, where the two can be compared) it watches the
three doors through which Python code reads an array's value:

1. ``jax._src.array.ArrayImpl._value``, a property that every Python-level
   read goes through: ``print``/``str``/``repr``/``format``, ``float``/
   ``int``/``bool``/``complex``/``index``, ``tolist``, ``tobytes``,
   ``__array__`` (so ``np.asarray`` on GPU/TPU and on sharded arrays),
   pickling and ``jax.device_get``. See ``ArrayImpl._value`` in
   https://github.com/jax-ml/jax/blob/main/jax/_src/array.py. A call while
   ``_npy_value`` is still None is a real fetch, unless the array is
   host-cached as modelled below; a value whose host copy is already cached
   is returned without a transfer and is not counted.
2. The Python buffer protocol. jaxlib exports a zero-copy buffer for a
   single-device CPU array (``PyArray_bf_getbuffer`` in jaxlib's
   ``py_array.cc``), and NumPy tries that before ``__array__``, so on CPU
   ``np.asarray(x)``, ``np.array(x)`` and ``x.item()`` never touch
   ``_value``. While the detector runs, the array type's buffer export is
   switched off (its ``tp_as_buffer`` slot points at a copy without
   ``bf_getbuffer``); NumPy then falls back to ``__array__``, which reads
   ``_value``, with the same zero-copy result. Side effect while active:
   ``memoryview(x)`` and ``bytes(x)`` on a jax array raise ``TypeError``.
   Where the slot cannot be reached safely (not CPython, a free-threaded or
   ``Py_TRACE_REFS`` build, an unexpected type layout) the detector still
   runs and `FetchLog.blind_spots` says what it cannot see.
3. ``jax._src.array.ArrayImpl.copy_to_host_async`` (also reached through
   ``jax.copy_to_host_async(tree)``): it starts the copy into the host
   cache without waiting, and JAX's guard checks it on GPU and TPU as an
   implicit device-to-host transfer (``device_to_host_copy_to_host_async``
   in JAX's tests/transfer_guard_test.py). It is recorded like a read, with
   ``what="copy_to_host_async"``. JAX 0.12 hands a tree with two or more
   array leaves to jaxlib's ``batched_copy_to_host_async`` in one call, past
   the method (``copy_to_host_async`` in jax/_src/api.py; JAX 0.10.2 called
   the method leaf by leaf), so while the detector runs
   ``jax.copy_to_host_async`` is interposed to call the method per leaf again.

Explicit fetches are told apart by interposing ``jax.device_get`` (see
`gate.jaxhooks.interpose`, so ``from jax import device_get`` call sites count too)
with a thread-local flag. In JAX 0.10.2 the only callers of
``device_get`` inside jax are ``device_get`` itself (extended dtypes) and
``multihost_utils.broadcast_one_to_all``, both explicit requests of the
user, so no implicit fetch is classified explicit. ``device_get`` first
calls ``copy_to_host_async`` on every leaf, then reads ``_value``: the first
is the explicit fetch, the read serves the copy it made.

The host-copy cache, as GPU and TPU keep it and as it is modelled here.
On an accelerator a read fills a host copy that every later read of the same
array object returns without a transfer, and without the guard:
``_value`` stores it in ``_npy_value`` (a sharded array's gathered value,
and a single-device or fully-replicated one's whenever the read copied,
``did_copy``), and jaxlib keeps the copy that ``copy_to_host_async`` or a
read started in the array's ``PyHostValue`` (``CopyToHostAsync`` returns
before the guard once one exists; ``py_array.cc``). On CPU a single-device
read is zero-copy (``did_copy`` is False), nothing is cached, and every
read of the same array would look like a new fetch: a setup that reads the
array it returns would make the step's read of it fail, where JAX on a GPU
allows it (``test_disallow_ignores_arrays_on_cpu`` in JAX's tests). So the
detector models the accelerator's rule on every backend: the first
successful read of an array object, by any door above and in any
`detect_fetches` block (the runner watches a region's import, its setups,
warm-up, runs and what happens between them), is the transfer; from then
on that object counts as host-cached for the whole process
(`host_copy_cached`), and its reads are no transfer and are not recorded.
As on an accelerator the copy belongs to the object: a slice or a shard of
it is another array. A refused read caches nothing. Reads while no block is
active (the timed runs, the result checks) are not seen, so they are not
modelled: on CPU an array read only there would be counted at its next
watched read, where a GPU would serve it from the cache.

Never seen here: ``__dlpack__``/``np.from_dlpack``, and host callbacks
inside jitted code (see `gate.witness.callbacks`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import sysconfig
import threading
import traceback
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from gate.jaxhooks.interpose import interposed, is_trampoline_frame
from gate.policy.levels import Direction
from gate.results.records import Phase, SourceLocation, Transfer
from gate.witness.callbacks import in_host_callback
from gate.witness.user_code import UserCode


class DetectorUnavailable(RuntimeError):
    """A JAX hook the detector relies on is missing: device-to-host is not checked."""


@dataclass(frozen=True)
class Fetch:
    """One read of a device array's value by host code."""

    direction: Direction  # always DEVICE_TO_HOST; kept so fetches read like transfers
    dtype: str  # e.g. "float32"
    shape: tuple[int, ...]
    nbytes: int
    explicit: bool  # inside jax.device_get
    boundary: str | None  # the declared boundary running in that thread, if any
    location: SourceLocation | None  # the user's line
    thread: str  # threading name of the thread that fetched
    what: str  # how the host read it: "__str__", "__array__", "copy_to_host_async", ...
    in_callback: bool = False  # inside a host callback counted by gate.witness.callbacks
    # The read raised, so nothing reached the host: on GPU/TPU the guard
    # refuses it this way under ``disallow``. JAX's message, one line.
    refused: str | None = None

    def describe(self) -> str:
        """``device-to-host float32[8,4]``, as `Transfer.describe` spells it."""
        return f"{self.direction.label} {self.dtype}[{','.join(str(d) for d in self.shape)}]"

    def as_transfer(self, phase: Phase, failing: bool) -> Transfer:
        """The record reporters read; the runner decides ``phase`` and ``failing``."""
        kind = "explicit" if self.explicit else "implicit"
        message = (
            f"gate detector: {kind} {self.describe()} ({self.nbytes} bytes) read by "
            f"{self.what} in thread {self.thread}"
        )
        if self.refused is not None:
            message += f"; refused: {self.refused}"
        return Transfer(
            direction=self.direction,
            explicit=self.explicit,
            dtype=self.dtype,
            shape=self.shape,
            location=self.location,
            phase=phase,
            failing=failing,
            message=message,
            boundary=self.boundary,
        )


@dataclass
class FetchLog:
    """What one `detect_fetches` block saw. Safe to read from any thread."""

    code: UserCode
    boundary_of: Callable[[], str | None]
    blind_spots: tuple[str, ...] = ()  # what this log cannot see on this interpreter
    _fetches: list[Fetch] = field(default_factory=list)
    # id(array) -> weak reference: arrays are unhashable, and ids are reused
    # once an array dies, so the reference confirms it is the same object.
    _seen: dict[int, weakref.ref[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def fetches(self) -> tuple[Fetch, ...]:
        """Every fetch, in the order seen.

        Each moved data (or tried to, if refused): a read of a host-cached
        array (see the module's docstring) is not recorded.
        """
        with self._lock:
            return tuple(self._fetches)

    @property
    def transfers(self) -> tuple[Fetch, ...]:
        """The same as `fetches`: every recorded fetch is a transfer."""
        return self.fetches

    def fetched_earlier(self, tree: Any) -> bool:
        """True if any array leaf of ``tree`` is an object this log saw fetched."""
        import jax

        with self._lock:
            return any(self._is_seen(leaf) for leaf in jax.tree_util.tree_leaves(tree))

    def _is_seen(self, array: Any) -> bool:
        ref = self._seen.get(id(array))
        return ref is not None and ref() is array

    def _record(
        self,
        array: Any,
        frames: Sequence[traceback.FrameSummary],
        explicit: bool,
        in_callback: bool,
        refused: str | None,
        *,
        hook: str,
    ) -> None:
        user = _user_index(self.code, frames)
        fetch_what = _what(frames, user, hook)
        location = self.code.locate(frames)
        boundary = self.boundary_of()
        with self._lock:
            if refused is None:
                self._seen[id(array)] = weakref.ref(array)
            self._fetches.append(
                Fetch(
                    direction=Direction.DEVICE_TO_HOST,
                    dtype=str(array.dtype),
                    shape=tuple(int(d) for d in array.shape),
                    nbytes=int(array.nbytes),
                    explicit=explicit,
                    boundary=boundary,
                    location=location,
                    thread=threading.current_thread().name,
                    what=fetch_what,
                    in_callback=in_callback,
                    refused=refused,
                )
            )


# --- how the host read the value -----------------------------------------------------------------

# Frames between the user's line and ``_value`` that name the operation,
# mapped to the name reported. ``_item`` is how jax spells ``Array.item``.
_READERS = {
    name: name
    for name in (
        "__str__",
        "__repr__",
        "__format__",
        "__float__",
        "__int__",
        "__bool__",
        "__complex__",
        "__index__",
        "__hex__",
        "__oct__",
        "__array__",
        "__iter__",
        "__reduce__",
        "tolist",
        "tobytes",
        "item",
        "device_get",
        "copy_to_host_async",
    )
} | {"_item": "item"}
_JAX_DIR = f"{os.sep}jax{os.sep}"


def _user_index(code: UserCode, frames: Sequence[traceback.FrameSummary]) -> int | None:
    """Index of the frame `UserCode.locate` names, with the same fallback."""
    for accept in (code.is_user, lambda f: not code.is_library(f)):
        for index in range(len(frames) - 1, -1, -1):
            if accept(frames[index].filename):
                return index
    return None


def _what(frames: Sequence[traceback.FrameSummary], user: int | None, hook: str) -> str:
    """The outermost jax reader between the user's line and the hook (``_value`` or
    ``copy_to_host_async``).

    Outermost, because jax readers call each other (``device_get`` ends in
    ``__array__``) and the one the user's line called says what they did.
    ``copy_to_host_async`` called by the user's line itself is named so;
    a ``_value`` read falls back to the frame that read it (e.g. a jax
    internal that folds a closed-over array into a constant).
    """
    after = frames[user + 1 :] if user is not None else frames
    for frame in after:
        name = _READERS.get(frame.name)
        if name and (_JAX_DIR in frame.filename or is_trampoline_frame(frame.filename)):
            return name
    if hook != "_value":
        return hook
    return after[-1].name if after else "_value"


# --- the hooks ---------------------------------------------------------------------------------


class _BufferProcs(ctypes.Structure):
    # CPython's PyBufferProcs: two function pointers.
    _fields_ = (("bf_getbuffer", ctypes.c_void_p), ("bf_releasebuffer", ctypes.c_void_p))


_WORD = ctypes.sizeof(ctypes.c_void_p)
# Word offsets in CPython's PyTypeObject (Include/cpython/object.h, 3.10 to
# 3.14, default builds): three words of PyObject_VAR_HEAD, then tp_name,
# tp_basicsize, tp_itemsize, tp_dealloc, tp_vectorcall_offset, tp_getattr,
# tp_setattr, tp_as_async, tp_repr, tp_as_number, tp_as_sequence,
# tp_as_mapping, tp_hash, tp_call, tp_str, tp_getattro, tp_setattro,
# tp_as_buffer. Checked against known types before anything is written.
_TP_NAME, _TP_BASICSIZE, _TP_ITEMSIZE, _TP_AS_BUFFER = 3, 4, 5, 20


def _type_word(tp: type, index: int) -> ctypes.c_void_p:
    return ctypes.c_void_p.from_address(id(tp) + index * _WORD)


def _layout_matches(tp: type) -> bool:
    name = ctypes.c_char_p.from_address(id(tp) + _TP_NAME * _WORD).value or b""
    basicsize = ctypes.c_ssize_t.from_address(id(tp) + _TP_BASICSIZE * _WORD).value
    itemsize = ctypes.c_ssize_t.from_address(id(tp) + _TP_ITEMSIZE * _WORD).value
    return (
        name.decode(errors="replace").rpartition(".")[2] == tp.__name__
        and basicsize == tp.__basicsize__
        and itemsize == tp.__itemsize__
    )


def _buffer_slot(tp: type) -> ctypes.c_void_p | str:
    """``tp``'s ``tp_as_buffer`` slot, or why it cannot be reached safely."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "free-threaded CPython has another type layout"
    if hasattr(sys, "getobjects"):
        return "a Py_TRACE_REFS build of CPython has another type layout"
    for known in (int, bytearray, tp):
        if not _layout_matches(known):
            return f"{known.__name__} does not have the expected PyTypeObject layout"
    # int exports no buffer, bytearray does: the offset points at tp_as_buffer.
    if _type_word(int, _TP_AS_BUFFER).value or not _type_word(bytearray, _TP_AS_BUFFER).value:
        return "tp_as_buffer is not where expected"
    slot = _type_word(tp, _TP_AS_BUFFER)
    if not slot.value or not _BufferProcs.from_address(slot.value).bf_getbuffer:
        return f"{tp.__name__} exports no buffer"
    return slot


# The replacement procs must outlive any reader; they are a few bytes.
_kept_procs: list[_BufferProcs] = []


@contextmanager
def _buffer_export_off(slot: ctypes.c_void_p) -> Iterator[None]:
    """Point ``slot`` at procs without ``bf_getbuffer`` for the block.

    ``bf_releasebuffer`` stays, so a view exported before the block is
    still released properly during it. The GIL makes the pointer swap
    atomic for other threads.
    """
    saved = slot.value
    assert saved is not None
    procs = _BufferProcs(None, _BufferProcs.from_address(saved).bf_releasebuffer)
    _kept_procs.append(procs)
    try:
        slot.value = ctypes.addressof(procs)
        yield
    finally:
        slot.value = saved


@dataclass(frozen=True)
class _Hooks:
    array_type: type
    value_property: property
    device_get: types.FunctionType
    copy_to_host_async: types.FunctionType | None  # None: not a Python function here
    buffer_slot: ctypes.c_void_p | None
    blind_spots: tuple[str, ...]
    copy_tree: types.FunctionType | None  # jax.copy_to_host_async; None: not a Python function


def _find_hooks() -> _Hooks:
    """Everything the detector patches, checked before anything is patched."""
    import jax

    try:
        from jax._src.array import ArrayImpl
    except ImportError as exc:
        raise DetectorUnavailable(
            f"jax {jax.__version__} has no jax._src.array.ArrayImpl ({exc}): "
            "device-to-host fetches cannot be watched"
        ) from exc
    if not hasattr(ArrayImpl, "_npy_value"):
        raise DetectorUnavailable(
            f"jax {jax.__version__}: ArrayImpl has no _npy_value; a cached host copy "
            "cannot be told from a fetch"
        )
    prop = ArrayImpl.__dict__.get("_value")
    if not isinstance(prop, property) or prop.fget is None:
        raise DetectorUnavailable(
            f"jax {jax.__version__}: ArrayImpl._value is no longer a property "
            f"({type(prop).__name__}); device-to-host fetches cannot be watched"
        )
    device_get = jax.device_get
    if not isinstance(device_get, types.FunctionType):
        raise DetectorUnavailable(
            f"jax {jax.__version__}: jax.device_get is a {type(device_get).__name__}, not a "
            "Python function; explicit fetches cannot be told from implicit ones"
        )
    slot = _buffer_slot(ArrayImpl)
    blind: list[str] = []
    if isinstance(slot, str):
        blind.append(
            "np.asarray(x), np.array(x) and x.item() on single-device CPU arrays "
            f"(NumPy reads them through the buffer protocol, which cannot be watched: {slot})"
        )
    copy_async = ArrayImpl.__dict__.get("copy_to_host_async")
    copy_tree = getattr(jax, "copy_to_host_async", None)
    if not isinstance(copy_async, types.FunctionType):
        copy_async = None
        blind.append(
            "x.copy_to_host_async() (ArrayImpl.copy_to_host_async is not a Python function "
            f"in jax {jax.__version__})"
        )
    return _Hooks(
        ArrayImpl,
        prop,
        device_get,
        copy_async,
        None if isinstance(slot, str) else slot,
        tuple(blind),
        copy_tree if isinstance(copy_tree, types.FunctionType) else None,
    )


@dataclass
class _Registry:
    """The active logs, and the installed hooks while any is active."""

    lock: threading.Lock
    active: list[FetchLog]
    installed: ExitStack | None = None
    hooks: _Hooks | None = None  # as found before patching; nested blocks reuse them


_registry = _Registry(threading.Lock(), [])


class _HostCopies:
    """The modelled host-copy cache: array objects whose value a watched read
    brought to the host, for the whole process (see the module's docstring)."""

    def __init__(self) -> None:
        # id(array) -> the array, weakly: arrays are unhashable, ids are
        # reused once an array dies, and a dead array leaves by itself.
        self._arrays: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def holds(self, array: Any) -> bool:
        return self._arrays.get(id(array)) is array

    def add(self, array: Any) -> bool:
        """Count ``array`` as host-cached; True if it already was (another
        thread's read got there first)."""
        with self._lock:
            if self.holds(array):
                return True
            self._arrays[id(array)] = array
            return False


_host_copies = _HostCopies()
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
        with _registry.lock:
            logs = list(_registry.active)
        for log in logs:
            log._record(array, frames, explicit, in_callback, refused, hook=hook)
    finally:
        _local.busy = False


def _without_transfer(array: Any) -> bool:
    """Reading ``array`` now moves nothing, or is the detector's own work."""
    return (
        getattr(_local, "busy", False) or array._npy_value is not None or _host_copies.holds(array)
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
    if not _host_copies.add(array):
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
        original = hooks.value_property

        def restore() -> None:
            setattr(tp, "_value", original)  # noqa: B010 (mypy cannot see the attribute)

        setattr(tp, "_value", _value_property(hooks))  # noqa: B010
        stack.callback(restore)
        copy_async = hooks.copy_to_host_async
        if copy_async is not None:
            tp.copy_to_host_async = _copy_to_host_async_method(copy_async)  # type: ignore[attr-defined]
            stack.callback(setattr, tp, "copy_to_host_async", copy_async)
            if hooks.copy_tree is not None:
                stack.enter_context(interposed(hooks.copy_tree, _copy_tree_leaf_by_leaf))
        stack.enter_context(interposed(hooks.device_get, _device_get_wrapper))
        if hooks.buffer_slot is not None:
            stack.enter_context(_buffer_export_off(hooks.buffer_slot))
        yield


@contextmanager
def detect_fetches(code: UserCode, boundary_of: Callable[[], str | None]) -> Iterator[FetchLog]:
    """Record every device-to-host fetch, in any thread, while the block runs.

    ``boundary_of()`` is asked, in the fetching thread, which declared
    boundary is running (`gate.region.boundary.BoundaryMonitor.current`). Blocks
    may nest or overlap across threads: the hooks are installed while at
    least one is active and removed, in ``finally``, when the last ends.
    Raises `DetectorUnavailable` before changing anything when this JAX
    lacks a hook.
    """
    with _registry.lock:
        if _registry.installed is None or _registry.hooks is None:
            # Found only while nothing is patched: patched, the hooks would
            # look like the detector's own.
            hooks = _find_hooks()
            stack = ExitStack()
            stack.enter_context(_patched(hooks))
            _registry.installed, _registry.hooks = stack, hooks
        log = FetchLog(code, boundary_of, _registry.hooks.blind_spots)
        _registry.active.append(log)
    try:
        yield log
    finally:
        with _registry.lock:
            _registry.active.remove(log)
            if not _registry.active and _registry.installed is not None:
                stack, _registry.installed, _registry.hooks = _registry.installed, None, None
                stack.close()


# --- helpers for the fresh-inputs warning ------------------------------------------------------


def host_copy_cached(tree: Any) -> bool:
    """True if any array leaf of ``tree`` already holds a host copy of its value,
    really (``_npy_value``) or as modelled (a watched read of it succeeded, see
    the module's docstring).

    Reading such an array moves nothing, so neither the guard nor the
    detector would see the step's fetch of it: setup must make fresh
    arrays. On CPU a single-device array never caches a real copy (it is
    zero-copy): only reads the detector watched make it count as cached.
    """
    import jax

    for leaf in jax.tree_util.tree_leaves(tree):
        # A typed PRNG key (jax.random.key, an NNX model's Rngs) keeps no host
        # copy of its own; its key data is another array, read only by choice.
        if isinstance(leaf, jax.Array) and not jax.numpy.issubdtype(
            leaf.dtype, jax.dtypes.prng_key
        ):
            try:
                cached = leaf._npy_value  # type: ignore[attr-defined]
            except AttributeError as exc:
                raise DetectorUnavailable(
                    f"jax {jax.__version__}: arrays have no _npy_value; host copies cannot be seen"
                ) from exc
            if cached is not None or _host_copies.holds(leaf):
                return True
    return False


def reused_leaves(prev_inputs: Any, new_inputs: Any) -> tuple[str, ...]:
    """Paths (``jax.tree_util.keystr``) of array leaves of ``new_inputs`` that are
    the very same objects as leaves of ``prev_inputs``."""
    import jax

    before = {id(leaf) for leaf in jax.tree_util.tree_leaves(prev_inputs)}
    flat, _ = jax.tree_util.tree_flatten_with_path(new_inputs)
    return tuple(
        jax.tree_util.keystr(path)
        for path, leaf in flat
        if isinstance(leaf, jax.Array) and id(leaf) in before
    )


def same_objects(prev_inputs: Any, new_inputs: Any) -> bool:
    """True if setup handed back any array object it returned for the last run.

    ``prev_inputs`` must still be alive (ids are compared). An array fetched
    in the last run would not be fetched again in this one, so the gate
    would miss the transfer.
    """
    return bool(reused_leaves(prev_inputs, new_inputs))
