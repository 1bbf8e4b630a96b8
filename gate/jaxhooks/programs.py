"""A region's own programs: its step's first call cold, without ``jax.clear_caches()``.

A region's first call must take JAX's slow path, where JAX checks moves it skips on the C++
fast path (an uncommitted array sent to another device), and its programs must be traced
inside the region, where host callbacks are placed and compilations are counted. Until
now the gate called ``jax.clear_caches()`` before each region; that made every verdict
independent of the regions run before in the worker, but also threw away every program of
setup's (PRNG keys, initialisers), which each region then traced and lowered again: most of
the gate's own cost on small regions (docs/performance.md).

``jax.make_user_context`` (public since jax 0.6) gives a value that is part of every jit
cache key: tracing, lowering, compilation and the C++ dispatch cache. So each region gets a
value of its own (`RegionPrograms`), set globally while its step runs (threads the step
starts see it too): every program the step calls is new to JAX's caches, exactly as after
a clear, whatever ran before. Setup and the gate's own computations run under one shared
value instead (`shared_programs`, a thread-local override), so their programs are traced
once per worker. Where the user keeps JAX's persistent compilation cache
(`gate.isolation.compile_cache`), executables still come from it: its key is the program,
not the context.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

_numbers = itertools.count(1)


@functools.cache
def _context() -> Any:
    """The gate's jit cache context, made once per process (making one is not thread-safe)."""
    import jax

    return jax.make_user_context(None)


class RegionPrograms:
    """One region's jit cache context: its step's programs are its own, new to every cache."""

    def __init__(self) -> None:
        self._value = ("transfer-gate region", next(_numbers))

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The block's jit calls (in every thread) use this region's programs; then put back."""
        context = _context()
        previous = context.get_global()
        context.set_global(self._value)
        try:
            yield
        finally:
            context.set_global(previous)


def shared_programs() -> AbstractContextManager[None]:
    """This thread's jit calls in the block use programs shared by every region of the worker."""
    return _context()(None)  # type: ignore[no-any-return]


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
