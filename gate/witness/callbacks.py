"""Host callbacks inside jitted code: where they were placed and how often they ran.

``jax.debug.print``, ``jax.debug.callback``, ``jax.pure_callback`` and
``jax.experimental.io_callback`` move their operands to the host and run
Python there, on every call of the step (JAX's guide to them:
https://docs.jax.dev/en/latest/external-callbacks.html).
The transfer guard sees none of it, as measured with jax and jaxlib 0.10.2 on
CPU: a jitted step's ``jax.debug.print`` and ``jax.pure_callback`` run under
``jax.transfer_guard("disallow")`` without an error or a log line.

`count_callbacks` interposes those four entry points (see `gate.jaxhooks.interpose`:
every call site is caught, ``jax.debug.print`` and ``from jax import
pure_callback`` alike, and jax's own calls between them too). When traced
code places a callback, the innermost user frame of the stack is recorded
as a `CallbackSite`, and the host function is wrapped so each run of it
adds one to that site's count. Placement happens at trace time, which the
runner makes happen inside the region by giving its step programs of its own
(`gate.jaxhooks.programs`).

``jax.debug.print`` takes no host function: in JAX 0.10.2 it binds its own
primitive (``debug_print_p``) whose lowering builds the host function from
``_format_print_callback`` (see `gate.jaxhooks.internals`) and the format string. So
the format string is tagged with its site (a ``str`` subclass that prints
the same) and ``_format_print_callback`` is interposed to count the runs
whose format carries a tag. (A JAX whose ``debug_print`` calls
``debug_callback`` instead is counted the same way: an entry point called
from inside another is left alone.) The tag also takes part in equality: JAX's
lowering cache is keyed on equal primitive parameters (``jaxpr_subcomp``
in JAX's ``interpreters/mlir.py``), and a cached lowering would share one
host function between two sites that print the same text. In JAX 0.10.2
``debug_print`` is not cached (its TPU lowering is registered
``cacheable=False``, which applies to every platform); the tag keeps the
sites apart should that change.

Callbacks placed by library code: the entry point is interposed, not the
caller, so a library's ``jax.debug.print`` is caught like the user's own;
its `CallbackSite.location` is the user's line that called into the
library (the innermost user frame), and ``placed_by`` names the library
line that placed it. A library that binds the callback primitives itself
(``debug_callback_p.bind``, a custom lowering with
``emit_python_callback``) bypasses these entry points and is not counted.

Compiled executables keep the wrapped host functions after the block ends;
outside any block they only call through.
"""

from __future__ import annotations

import enum
import functools
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.jaxhooks import internals
from gate.jaxhooks.internals import InternalMissing
from gate.jaxhooks.interpose import interposed, is_trampoline_frame
from gate.jaxhooks.patches import SharedPatches
from gate.package import PACKAGE_DIR
from gate.user_code import SourceLocation, UserCode

_GATE_DIR = str(Path(PACKAGE_DIR).resolve()) + os.sep


class CallbackHookMissing(RuntimeError):
    """This JAX lacks an entry point the counter relies on: callbacks are not checked."""


class CallbackKind(enum.Enum):
    """The public entry point that placed a callback; the value is how users spell it."""

    DEBUG_PRINT = "jax.debug.print"
    DEBUG_CALLBACK = "jax.debug.callback"
    PURE_CALLBACK = "jax.pure_callback"
    IO_CALLBACK = "jax.experimental.io_callback"


@dataclass(frozen=True)
class CallbackSite:
    """One place in the code that puts a host callback into a traced function."""

    kind: CallbackKind
    location: SourceLocation | None  # the user's line (innermost user frame)
    placed_by: SourceLocation | None  # the library line that placed it; None: the user's own
    target: str  # the host function's name, or the format string of a print

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        via = f" (placed by {self.placed_by})" if self.placed_by else ""
        return f"{self.kind.value}({self.target!r}){where}{via}"


class CallbackLog:
    """Sites placed and runs counted while a `count_callbacks` block is active.

    Counts are totals since the block began; take `counts` before and after
    a run and use `delta` for per-run figures. Host callbacks may run on
    another thread, after the step's outputs are ready: call `settle`
    before reading.
    """

    def __init__(self, code: UserCode) -> None:
        self.code = code
        self._lock = threading.Lock()
        self._counts: dict[CallbackSite, int] = {}

    @property
    def sites(self) -> tuple[CallbackSite, ...]:
        """Every site seen, in the order first placed (or first run)."""
        with self._lock:
            return tuple(self._counts)

    def counts(self) -> dict[CallbackSite, int]:
        """Runs so far per site; a site placed but never run counts 0."""
        with self._lock:
            return dict(self._counts)

    def delta(self, before: Mapping[CallbackSite, int]) -> dict[CallbackSite, int]:
        """Runs per site since ``before`` (an earlier `counts`)."""
        return {site: n - before.get(site, 0) for site, n in self.counts().items()}

    def settle(self) -> None:
        """Wait until every callback dispatched so far has run."""
        import jax

        jax.effects_barrier()

    def _placed(self, site: CallbackSite) -> None:
        with self._lock:
            self._counts.setdefault(site, 0)

    def _ran(self, site: CallbackSite) -> None:
        with self._lock:
            self._counts[site] = self._counts.get(site, 0) + 1


# --- module state: which logs are active, and what this thread is doing -------------------------


_local = threading.local()  # .placing: entry-point depth; .running: host-callback depth


def in_host_callback() -> bool:
    """True while this thread runs a host callback counted here (for `gate.witness.detector`)."""
    depth: int = getattr(_local, "running", 0)
    return depth > 0


def _depth(name: str) -> int:
    value: int = getattr(_local, name, 0)
    return value


def _ran(site: CallbackSite) -> None:
    for log in _shared.logs():
        log._ran(site)


class _TaggedFormat(str):
    """A ``jax.debug.print`` format string that remembers its site.

    Prints exactly as the plain string. Equal only to a tagged string of
    the same site, so JAX's lowering cache keeps sites apart.
    """

    site: CallbackSite

    def __new__(cls, text: str, site: CallbackSite) -> _TaggedFormat:
        tagged = super().__new__(cls, text)
        tagged.site = site
        return tagged

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _TaggedFormat) and str.__eq__(self, other) and self.site == other.site
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((str(self), self.site))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (e.g. by a cache), it becomes the plain string.
        return (str, (str(self),))


def _counted(host_fn: Callable[..., Any], site: CallbackSite) -> Callable[..., Any]:
    """``host_fn``, counting each run for ``site`` while a log is active."""

    def run(*args: Any, **kwargs: Any) -> Any:
        _ran(site)
        # An eager callback runs inside its entry point; what it traces is
        # placed anew, not taken for part of the outer placement.
        placing, _local.placing = _depth("placing"), 0
        _local.running = _depth("running") + 1
        try:
            return host_fn(*args, **kwargs)
        finally:
            _local.running -= 1
            _local.placing = placing

    # A fresh function per placement: JAX compares callbacks by equality,
    # and two sites must never share one.
    return functools.wraps(host_fn)(run)


def _target(kind: CallbackKind, first: Any) -> str:
    if kind is CallbackKind.DEBUG_PRINT:
        return str(first)
    name = getattr(first, "__qualname__", None) or getattr(first, "__name__", None)
    if name is None and isinstance(first, functools.partial):
        name = getattr(first.func, "__qualname__", None)
    return str(name or type(first).__name__)


def _site(code: UserCode, kind: CallbackKind, first: Any) -> CallbackSite:
    frames = traceback.extract_stack(sys._getframe(1))
    location = code.locate(frames)
    # The frame that called the entry point: the innermost one that is
    # neither the gate nor its trampoline.
    caller = next(
        (
            f
            for f in reversed(frames)
            if not is_trampoline_frame(f.filename)
            and not os.path.realpath(f.filename).startswith(_GATE_DIR)
        ),
        None,
    )
    placed_by = None
    if caller is not None and not code.is_user(caller.filename):
        placed_by = SourceLocation(code.relative(caller.filename), caller.lineno or 0, caller.name)
    return CallbackSite(kind, location, placed_by, _target(kind, first))


def _place(
    kind: CallbackKind,
    param: str,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call an entry point (or the second call of its two-call form) with its
    host function wrapped, or its format string tagged, for a new site."""
    if _depth("placing") > 0:
        # jax's own entry point calling another (an older debug_print went
        # through debug_callback): the outer call already placed it.
        return call(*args, **kwargs)
    first = args[0] if args else kwargs.get(param)
    if first is None:
        # The two-call form, e.g. jax.debug.print(ordered=True)("x {x}", x=x):
        # place it when the returned function is called.
        second = call(*args, **kwargs)
        if not callable(second):
            return second
        return functools.wraps(second)(lambda *a, **k: _place(kind, param, second, a, dict(k)))
    logs = _shared.logs()
    if not logs or (kind is CallbackKind.DEBUG_PRINT and not isinstance(first, str)):
        return call(*args, **kwargs)  # nothing to count, or jax will refuse the call itself
    site = _site(logs[0].code, kind, first)
    for log in logs:
        log._placed(site)
    wrapped = (
        _TaggedFormat(first, site) if kind is CallbackKind.DEBUG_PRINT else _counted(first, site)
    )
    if args:
        args = (wrapped, *args[1:])
    else:
        kwargs = {**kwargs, param: wrapped}
    _local.placing = _depth("placing") + 1
    try:
        return call(*args, **kwargs)
    finally:
        _local.placing -= 1


def _entry_wrapper(kind: CallbackKind, param: str) -> Callable[..., Any]:
    def wrapper(original: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        return _place(kind, param, original, args, kw)

    return wrapper


def _print_runner(original: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    fmt = args[0] if args else kw.get("fmt")
    if not isinstance(fmt, _TaggedFormat):
        return original(*args, **kw)
    _ran(fmt.site)
    _local.running = _depth("running") + 1
    try:
        return original(*args, **kw)
    finally:
        _local.running -= 1


# The entry points interposed: (kind, parameter holding the host function
# or format string, module that holds it, attribute).
_ENTRY_POINTS = (
    (CallbackKind.DEBUG_PRINT, "fmt", "jax.debug", "print"),
    (CallbackKind.DEBUG_CALLBACK, "callback", "jax.debug", "callback"),
    (CallbackKind.PURE_CALLBACK, "callback", "jax", "pure_callback"),
    (CallbackKind.IO_CALLBACK, "callback", "jax.experimental", "io_callback"),
)


@dataclass(frozen=True)
class _Hooks:
    entries: tuple[tuple[CallbackKind, str, types.FunctionType], ...]
    print_runner: types.FunctionType


def _find_hooks() -> _Hooks:
    """Everything interposed, checked before anything is; all that is missing named at once."""
    missing: list[str] = []
    entries = []
    for kind, param, module, name in _ENTRY_POINTS:
        try:
            entries.append((kind, param, internals.module_function(module, name)))
        except InternalMissing as exc:
            missing.append(str(exc))
    runner = None
    try:
        runner = internals.format_print_callback()
    except InternalMissing as exc:
        missing.append(str(exc))
    if missing or runner is None:
        raise CallbackHookMissing(
            f"jax {internals.jax_version()} lacks what the callback counter interposes: "
            + ", ".join(missing)
        )
    return _Hooks(tuple(entries), runner)


@contextmanager
def _interposed(hooks: _Hooks) -> Iterator[None]:
    with ExitStack() as stack:
        for kind, param, fn in hooks.entries:
            stack.enter_context(interposed(fn, _entry_wrapper(kind, param)))
        stack.enter_context(interposed(hooks.print_runner, _print_runner))
        yield


# Looked up at each install, not bound now: a test (or a sitecustomize) may stand in for it.
_shared: SharedPatches[_Hooks, CallbackLog] = SharedPatches(lambda: _find_hooks(), _interposed)  # noqa: PLW0108


@contextmanager
def count_callbacks(code: UserCode) -> Iterator[CallbackLog]:
    """Record host-callback sites placed, and their runs, while the block is active.

    Enter it once around all of a region's runs (with the region's own programs):
    a site is placed when its function is traced, and runs of executables
    compiled in an earlier block are credited to their site in every active
    log. Blocks may nest; the entry points are restored, in ``finally``,
    when the last one ends. Raises `CallbackHookMissing` before changing
    anything when this JAX lacks an entry point.
    """
    with _shared.active(lambda hooks: CallbackLog(code)) as log:
        yield log


def per_step(counts: Mapping[CallbackSite, int], runs: int) -> dict[CallbackSite, float]:
    """Runs per step of each site over ``runs`` steps (for "N per step" in reports)."""
    return {site: n / runs if runs else 0.0 for site, n in counts.items()}
