"""Where inside a stage a region's time goes: the gate's parts, timed by wrapping them.

Used by ``region_phases.py --parts``: before the regions run, `wrap_parts` replaces the
functions and context managers a region is made of (in `gate.region.engine` and
`gate.region.region_run`, where the engine looks them up) with timed ones, and adds each
call's seconds, for regions 2..N, to a counter. A context manager is timed entering and
leaving, apart (its body is other parts). The mapped runs' parts are told apart by their
phase: the first call's (``first``) and the steady state's (``steady``). Parts nest: the
step's call (``call``) is inside the mapped run it belongs to, and `cost_phase` holds the
cost run's step call. XLA's compiles are also charged to the innermost call they happen in
(``XLA compiling, in ...``). A part missing from this version of the gate is an error: a
benchmark that silently times less would read as a faster gate.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

# The engine's module-level names it calls once or twice a region.
ENGINE_CALLS = (
    "import_region",
    "capture_works",
    "compile_events_arrive",
    "check_required",
    "judge_memory",
    "cost_phase",
    "summarize",
    "judge_donations",
    "coverage",
    "notes",
)
ENGINE_BLOCKS = (
    "python_path",
    "watching_reads",
    "full_tracebacks",
    "guard_kept_by_the_gate",
    "watching_compiles",
    "donation_warnings_caught",
    "count_callbacks",
)
RUN_METHODS = (
    "guarded_call",
    "unguarded_call",
    "timed_calls",
    "count_live",
    "fetches_between_runs",
    "recompiles",
    "startup_programs",
    "call",
    "_step_plan",
)
# What a mapped run enters around the step's call, in `gate.region.region_run`.
MAPPED_BLOCKS = ("mapped", "guarded", "described")
MAPPED_CALLS = ("join_step_threads", "check_outputs", "name_moves")


class Parts:
    """The seconds of each part, and how often it ran, counted only while `counting` is on."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.counting = False
        self.phase = ""  # "first " or "steady " inside the mapped runs
        self.inside: list[str] = []  # the calls being timed now, innermost last

    def compiled(self, seconds: float) -> None:
        """An XLA compile of ``seconds``, charged to the innermost call being timed."""
        self.add(f"XLA compiling, in {self.inside[-1] if self.inside else 'no part'}", seconds)

    def add(self, label: str, seconds: float) -> None:
        if self.counting:
            self.spent[self.phase + label] += seconds
            self.calls[self.phase + label] += 1


def timed_call(parts: Parts, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        parts.inside.append(label)
        try:
            return fn(*args, **kwargs)
        finally:
            parts.inside.pop()
            parts.add(label, time.perf_counter() - start)

    return timed


def timed_block(parts: Parts, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    @contextlib.contextmanager
    def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
        start = time.perf_counter()
        block = fn(*args, **kwargs)
        value = block.__enter__()
        parts.add(label + " (enter)", time.perf_counter() - start)
        try:
            yield value
        except BaseException:
            if not block.__exit__(*sys.exc_info()):
                raise
        else:
            start = time.perf_counter()
            block.__exit__(None, None, None)
            parts.add(label + " (leave)", time.perf_counter() - start)

    return timed


def timed_items(
    parts: Parts, label: str, fn: Callable[..., Iterator[Any]]
) -> Callable[..., Iterator[Any]]:
    """``fn``, a generator, with the time it takes to hand over each item added to ``label``."""

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
        items = fn(*args, **kwargs)
        while True:
            start = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                return
            finally:
                parts.add(label, time.perf_counter() - start)
            yield item

    return timed


def _replace(owner: object, name: str, wrap: Callable[[Callable[..., Any]], Any]) -> None:
    fn = getattr(owner, name, None)
    if fn is None:
        raise SystemExit(f"region_parts.py: {owner!r} has no {name}: update the part lists")
    setattr(owner, name, wrap(fn))


def wrap_parts(parts: Parts) -> None:
    """Time every part of a region from now on (in this process, for good), and XLA's compiles
    by the part they happen in (a part that compiles in every region costs the compile)."""
    import jax

    from gate.isolation.leftovers import Leftovers
    from gate.jaxhooks.compiles import COMPILE_EVENT
    from gate.jaxhooks.programs import RegionPrograms
    from gate.region import engine, region_run
    from gate.region.fetch_watch import FetchWatch
    from gate.region.inputs import StepInputs

    for name in ENGINE_CALLS:
        _replace(engine, name, functools.partial(timed_call, parts, name))
    for name in ENGINE_BLOCKS:
        _replace(engine, name, functools.partial(timed_block, parts, name))
    for name in RUN_METHODS:
        _replace(region_run.RegionRun, name, functools.partial(timed_call, parts, name))
    for name in MAPPED_BLOCKS:
        _replace(region_run, name, functools.partial(timed_block, parts, name))
    for name in MAPPED_CALLS:
        _replace(region_run, name, functools.partial(timed_call, parts, name))
    _replace(StepInputs, "fresh", functools.partial(timed_call, parts, "inputs (watched)"))
    _replace(StepInputs, "timed", functools.partial(timed_items, parts, "inputs (timed)"))
    _replace(RegionPrograms, "entered", functools.partial(timed_block, parts, "programs"))
    _replace(RegionPrograms, "let_go", functools.partial(timed_call, parts, "let_go"))
    _replace(FetchWatch, "detector", functools.partial(timed_block, parts, "detector"))
    _replace(Leftovers, "between_regions", functools.partial(timed_call, parts, "between"))

    def compiled(event: str, duration_secs: float, **_: str | int) -> None:
        if event == COMPILE_EVENT:
            parts.compiled(duration_secs)

    jax.monitoring.register_event_duration_secs_listener(compiled)

    def mapped_calls(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def by_phase(run: Any, phase: Any, runs: int) -> None:
            parts.phase = "first " if runs == 1 and phase.name == "FIRST_CALL" else "steady "
            start = time.perf_counter()
            try:
                fn(run, phase, runs)
            finally:
                parts.add("mapped_calls", time.perf_counter() - start)
                parts.phase = ""

        return by_phase

    _replace(region_run.RegionRun, "mapped_calls", mapped_calls)
