"""Seeing JAX compile: its monitoring event per backend compile, and why the cache missed.

Two public means, both checked on jax 0.10.2 and 0.12:

- ``jax.monitoring`` reports ``/jax/core/compile/backend_compile_duration`` once per
  XLA compilation, in the thread that compiles, with ``fun_name="jit(step)"``;
- ``jax_explain_cache_misses`` makes JAX log, on each tracing cache miss, where the
  call was and what differs from the closest earlier call ("TRACING CACHE MISS at
  ...: * at x, now f32[201,64] and before f32[200,64]"). The wording of that log is
  JAX's own and not a stable API; `gate.witness.recompiles` reads it loosely and
  falls back to "JAX did not say" rather than failing. jax 0.12 leaves a changed
  static argument out ("explanation unavailable"): `gate.jaxhooks.static_misses`
  adds it, in jax 0.10's words.

With JAX's persistent compilation cache on (where the user keeps one:
`gate.isolation.compile_cache`), a recompile may be served from disk
instead of compiled. On jax 0.10.2 the backend-compile event still fires around
such a hit; in case a version reports only ``/jax/compilation_cache/cache_hits``,
a hit is counted too, as one compile with the backend-compile event that follows it
in the same thread, before the next compile request
(``/jax/compilation_cache/compile_requests_use_cache``).

The flag is on for the whole region (JAX can only explain a miss against keys it
saw while the flag was on); events are kept only while `CompileWatch.counting` is
entered, i.e. around the step's calls after warm-up, or `CompileWatch.starting` (the
step's first call and warm-up, kept apart: every program compiles there once, and only
a function that compiles more programs than it should is a finding).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gate.jaxhooks.internals import traced_function
from gate.jaxhooks.static_misses import static_values_explained

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
# A hit no backend-compile event named (yet): JAX's cache events carry no name.
UNNAMED = "?"
EXPLAIN_FLAG = "jax_explain_cache_misses"
_MISS_MARKER = "TRACING CACHE MISS"
# With the flag on and a persistent cache, JAX also warns on each of its misses (every
# first compile of a program): noise in the CI log, and no reason a recompile needs.
_QUIET_MARKERS = (_MISS_MARKER, "PERSISTENT COMPILATION CACHE MISS")


@dataclass(frozen=True)
class CompileEvent:
    """One backend compilation JAX reported while counting."""

    fun_name: str  # as JAX names it: "jit(step)"
    stack: tuple[traceback.FrameSummary, ...]  # outermost first, when it was compiled
    explanations: tuple[str, ...]  # JAX's cache-miss log since the thread's last compile
    # Where JAX names the program after its own wrapper (a pmap's ``jit(_fun)``): what the
    # user wrote, ``("pmap", "<lambda> at /repo/train.py:25")``; else None.
    written: tuple[str, str] | None = None


@dataclass
class CompileWatch:
    """What `watching_compiles` collects; `counting` decides when events are kept."""

    events: list[CompileEvent] = field(default_factory=list)
    # The compiles of the step's first call and warm-up (`starting`).
    startup: list[CompileEvent] = field(default_factory=list)
    _counting: bool = False
    _starting: bool = False
    _pending: threading.local = field(default_factory=threading.local)

    @contextmanager
    def counting(self) -> Iterator[None]:
        self._counting = True
        try:
            yield
        finally:
            self._counting = False

    @contextmanager
    def starting(self) -> Iterator[None]:
        """The block's compiles go to `startup`: the step's first call and warm-up."""
        self._starting = True
        try:
            yield
        finally:
            self._starting = False

    def _explained(self, text: str) -> None:
        pending = getattr(self._pending, "texts", None)
        if pending is None:
            pending = self._pending.texts = []
        pending.append(text)

    def _requested(self) -> None:
        """A new compile request: an earlier hit in this thread had no compile event of its own."""
        self._pending.hit = None

    def _kept(self) -> list[CompileEvent] | None:
        """Where a compile now goes: `events`, `startup`, or nowhere (None)."""
        if self._counting:
            return self.events
        return self.startup if self._starting else None

    def _cache_hit(self) -> None:
        kept = self._kept()
        if self._record(UNNAMED) and kept is not None:
            self._pending.hit = (kept, len(kept) - 1)

    def _compiled(self, fun_name: str) -> None:
        hit = getattr(self._pending, "hit", None)
        self._pending.hit = None
        if hit is not None:
            kept, index = hit
            if index < len(kept) and kept[index].fun_name == UNNAMED:
                # The same compile as the hit just counted: name it, do not count it twice.
                event = kept[index]
                kept[index] = CompileEvent(fun_name, event.stack, event.explanations, event.written)
                return
        self._record(fun_name)

    def _record(self, fun_name: str) -> bool:
        texts = tuple(getattr(self._pending, "texts", ()))
        self._pending.texts = []
        kept = self._kept()
        if kept is None:
            return False
        stack = tuple(traceback.extract_stack())
        kept.append(CompileEvent(fun_name, stack, texts, traced_function(sys._getframe())))
        return True


class _MissLog(logging.Handler):
    def __init__(self, watch: CompileWatch) -> None:
        super().__init__(logging.DEBUG)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record that cannot format is not ours to explain
            return
        if _MISS_MARKER in text:
            self.watch._explained(text)


class _OnlyOthers(logging.Filter):
    """Keeps JAX's cache-miss lines out of every other handler (stderr, the user's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not any(marker in message for marker in _QUIET_MARKERS)


@contextmanager
def watching_compiles() -> Iterator[CompileWatch]:
    """Collect compilations; puts the listener, the flag and the log handler back in ``finally``."""
    import jax
    import jax.monitoring

    watch = CompileWatch()

    def listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == COMPILE_EVENT:
            _heard.set()
            watch._compiled(str(kwargs.get("fun_name", UNNAMED)))

    def cache_listener(event: str, **kwargs: str | int) -> None:
        if event == CACHE_REQUEST_EVENT:
            watch._requested()
        elif event == CACHE_HIT_EVENT:
            _heard.set()
            watch._cache_hit()

    logger = logging.getLogger("jax")
    handler = _MissLog(watch)
    quiet = _OnlyOthers()
    previous = bool(getattr(jax.config, EXPLAIN_FLAG))
    jax.monitoring.register_event_duration_secs_listener(listener)
    jax.monitoring.register_event_listener(cache_listener)
    logger.addHandler(handler)
    jax.config.update(EXPLAIN_FLAG, True)
    others = [h for h in logging.getLogger().handlers + logger.handlers if h is not handler]
    for other in others:
        other.addFilter(quiet)
    try:
        with static_values_explained():  # jax 0.12 would not say which static value changed
            yield watch
    finally:
        for other in others:
            other.removeFilter(quiet)
        jax.config.update(EXPLAIN_FLAG, previous)
        logger.removeHandler(handler)
        jax.monitoring.unregister_event_listener(cache_listener)
        jax.monitoring.unregister_event_duration_listener(listener)


# Set once a compile (or a persistent-cache hit) reached a watch in this process.
_heard = threading.Event()


def compile_events_arrive() -> str | None:
    """None when a compilation reaches `watching_compiles` in this process; else why not.

    The recompile check hears of a compile only through JAX's monitoring events: a JAX
    that renamed them would deliver none, and every step would look compiled once. A
    region asks after its first call and warm-up, which it watched: their compile (a
    region's first call always compiles its step) answers it. Only where no watch has heard
    one yet is a probe program compiled under the watch, once per process, the way
    `capture_works` proves the guard's log (that probe cost every worker's first region
    ~25 ms on the CPU). A hit in the persistent cache counts: the watch counts those too.
    """
    return None if _heard.is_set() else _probed()


@functools.cache
def _probed() -> str | None:
    import jax
    import numpy as np

    # A new function each time: JAX's caches are per function object, so this one compiles
    # (or hits the persistent cache) even in a process that probed before (gate.api, tests).
    probe = jax.jit(lambda x: x * 2.0 + 1.0)
    try:
        with watching_compiles() as watch, watch.counting():
            jax.block_until_ready(probe(np.float32(1.0)))
    except Exception as exc:  # a JAX without these listeners: nothing can be watched
        return f"JAX's compile events cannot be listened to ({type(exc).__name__}: {exc})"
    if not watch.events:
        return (
            f"a probe compile under jax {jax.__version__} sent neither {COMPILE_EVENT} nor "
            f"{CACHE_HIT_EVENT}, so no compilation can be seen"
        )
    return None
