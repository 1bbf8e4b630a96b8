"""Declared boundaries: the functions where moving data is allowed and timed.

While a boundary runs, explicit transfers pass even under ``*_explicit``
levels (implicit ones keep the region's level), and its time is added to the
boundary's cost. Every call site is caught, ``module.fn`` and
``from module import fn`` alike, because the function's code itself is
interposed (see `gate.jaxhooks.interpose`).

A boundary's time is its own: the arrays it is handed are waited for before
its clock starts. JAX dispatches asynchronously, so a boundary called right
after the step's jitted call would otherwise spend the step's device time
waiting for its input, and a slower step would read as a slower boundary.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any

from gate.jaxhooks.guard import guarded
from gate.jaxhooks.interpose import interposed
from gate.levels import GuardSpec
from gate.results.records import BoundaryCost


@dataclass
class _Tally:
    calls: int = 0
    total_s: float = 0.0


@dataclass
class BoundaryMonitor:
    """Interposes a region's boundaries and keeps their costs.

    ``guard`` is the region's spec while a guarded run is under way and None
    otherwise: a boundary must not switch the guard on during warm-up or
    timed runs.
    """

    names: dict[int, str] = field(default_factory=dict)
    guard: GuardSpec | None = None
    _tallies: dict[str, _Tally] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> str | None:
        """The innermost boundary running in this thread, if any."""
        stack: list[str] = getattr(self._local, "stack", [])
        return stack[-1] if stack else None

    def reset_costs(self) -> None:
        with self._lock:
            self._tallies = {name: _Tally() for name in self.names.values()}

    def costs(self, runs: int) -> tuple[BoundaryCost, ...]:
        with self._lock:
            return tuple(
                BoundaryCost(name, t.calls, t.total_s, t.total_s / runs if runs else 0.0)
                for name, t in sorted(self._tallies.items())
            )

    def _wrapper(self, name: str) -> Callable[..., Any]:
        def call(original: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
            stack: list[str] = self._local.__dict__.setdefault("stack", [])
            spec = self.guard
            relaxed = guarded(spec.inside_boundary(), global_too=False) if spec else nullcontext()
            stack.append(name)
            _wait_for((args, kw))
            start = time.perf_counter()
            try:
                with relaxed:
                    return original(*args, **kw)
            finally:
                elapsed = time.perf_counter() - start
                stack.pop()
                with self._lock:
                    tally = self._tallies.setdefault(name, _Tally())
                    tally.calls += 1
                    tally.total_s += elapsed

        return call

    @contextmanager
    def installed(self, boundaries: Sequence[tuple[str, types.FunctionType]]) -> Iterator[None]:
        """Interpose every ``(name, function)`` for the duration of the block."""
        with ExitStack() as stack:
            for name, fn in boundaries:
                self.names[id(fn)] = name
                stack.enter_context(interposed(fn, self._wrapper(name)))
            self.reset_costs()
            yield


def _wait_for(arguments: Any) -> None:
    """Wait until the device has computed every array in ``arguments``.

    A leaf that is not an array is left alone. Waiting on an array that cannot be
    waited on (a donated, deleted one) raises; the boundary is then called as it
    is, and whatever that array does in it is the boundary's own to report.
    """
    import jax

    with suppress(Exception):
        jax.block_until_ready(arguments)
