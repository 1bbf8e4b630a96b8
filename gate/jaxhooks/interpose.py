"""Route every call of a Python function through a wrapper, however it was imported.

Replacing ``module.fn`` misses call sites that did ``from module import fn``
before the gate ran: they hold the function object itself. So instead we
keep the function object and swap its code for a trampoline that calls the
wrapper; every reference, old or new, goes through it. The original code is
put back in ``finally``, after checking that ``__code__`` is still the
trampoline: if something else swapped it meanwhile, theirs is left in place
and AssertionError names the function (chex's restore-what-is-yours rule).

The trampoline finds the dispatcher through ``builtins`` (a name lookup that
misses the module's globals falls back there), so nothing is written into the
user's module. It keeps the function's free variables (a decorated function
is a closure) because CPython only accepts a new ``__code__`` with the same
number of them.
"""

from __future__ import annotations

import builtins
import functools
import itertools
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The dispatcher's name in builtins; unusual enough never to clash.
_DISPATCH = "__transfer_gate_dispatch__"
_FILENAME = "<transfer-gate trampoline>"

Wrapper = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]

_lock = threading.Lock()
_routes: dict[int, tuple[Callable[..., Any], Wrapper]] = {}
_keys = itertools.count()


def _dispatch(key: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    original, wrapper = _routes[key]
    return wrapper(original, args, kwargs)


# Stands for a route's key in a cached trampoline (route keys count up from 0).
_KEY_PLACEHOLDER = -7_031_981


@functools.lru_cache(maxsize=512)
def _template(name: str, free: tuple[str, ...]) -> types.CodeType:
    """The trampoline's code for a function called ``name`` with free variables ``free``,
    its route key still the placeholder: compiled once, not at every interposition (a
    region interposes about a dozen functions; ``compile`` costs ~25 µs each)."""
    # `if False:` keeps the names as free variables without reading the cells
    # (a cell may still be empty), and the body never runs.
    keep = f"        if False:\n            ({', '.join(free)},)\n" if free else ""
    source = (
        f"def _outer({', '.join(free)}):\n"
        f"    def {name}(*args, **kwargs):\n"
        f"{keep}"
        f"        return {_DISPATCH}({_KEY_PLACEHOLDER}, args, kwargs)\n"
        f"    return {name}\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, _FILENAME, "exec"), namespace)
    outer = namespace["_outer"].__code__
    (inner,) = (c for c in outer.co_consts if isinstance(c, types.CodeType))
    return inner


def _trampoline(fn: types.FunctionType, key: int) -> types.CodeType:
    name = fn.__code__.co_name if fn.__code__.co_name.isidentifier() else "boundary"
    inner = _template(name, fn.__code__.co_freevars)
    consts = tuple(key if type(c) is int and c == _KEY_PLACEHOLDER else c for c in inner.co_consts)
    return inner.replace(co_consts=consts)


def is_trampoline_frame(filename: str) -> bool:
    """True for frames of the trampoline itself (never the user's code)."""
    return filename == _FILENAME


@contextmanager
def interposed(fn: types.FunctionType, wrapper: Wrapper) -> Iterator[None]:
    """Make every call of ``fn`` call ``wrapper(original, args, kwargs)``.

    ``original`` is a copy of ``fn`` with its own code, so the wrapper can
    call through. Restores ``fn.__code__`` on exit; raises AssertionError,
    restoring nothing, if by then ``fn.__code__`` is no longer the trampoline.
    """
    original = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    original.__kwdefaults__ = fn.__kwdefaults__
    original.__qualname__ = fn.__qualname__
    original.__module__ = fn.__module__
    saved_code = fn.__code__
    with _lock:
        key = next(_keys)
    trampoline = _trampoline(fn, key)
    with _lock:
        _routes[key] = (original, wrapper)
        setattr(builtins, _DISPATCH, _dispatch)
    try:
        fn.__code__ = trampoline
    except BaseException:
        _drop_route(key)
        raise
    try:
        yield
    finally:
        if fn.__code__ is not trampoline:
            # Whoever swapped it may call through to the trampoline, so its
            # route stays: dropping it would break their function too.
            raise AssertionError(
                f"{fn.__module__}.{fn.__qualname__} was re-coded by someone else while the "
                "gate had it interposed; left as it is"
            )
        fn.__code__ = saved_code
        _drop_route(key)


def _drop_route(key: int) -> None:
    with _lock:
        del _routes[key]
        if not _routes and hasattr(builtins, _DISPATCH):
            delattr(builtins, _DISPATCH)
