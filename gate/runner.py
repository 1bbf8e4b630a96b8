"""Running one region: setup → first call (guarded) → warm-up → guarded runs → timed runs → checks.

Why this order:
- Every run gets fresh inputs from setup: a value whose host copy was
  already fetched hides the next transfer of it.
- The very first call is guarded, after ``jax.clear_caches()``: JAX checks
  some moves (an uncommitted array sent to another device) only on a call's
  slow path, which an unguarded warm-up would use up.
- Warm-up then compiles whatever else the step needs, unguarded, so that the
  guarded steady-state runs and the timed runs see the steady state.
- Timed runs are not guarded (entering the guard costs ~10 µs) and block on
  the outputs, so the figure is device time, not dispatch time.
"""

from __future__ import annotations

import linecache
import re
import threading
import time
import traceback
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gate.boundary import BoundaryMonitor
from gate.checks import Leaves, run_checks
from gate.guard import EXPLICIT_ENTRY_POINTS, full_tracebacks, guarded, parse_violation
from gate.guard_levels import Direction, GuardLevel, GuardSpec
from gate.policy_model import Policy, Region
from gate.resolve import ResolveError, import_boundary, import_callable, python_path
from gate.results import (
    CheckOutcome,
    ErrorKind,
    Phase,
    RegionError,
    RegionResult,
    RunResult,
    SourceLocation,
    SuiteResult,
    Transfer,
)
from gate.source import UserCode, frames_of, user_frames_text
from gate.timing import summarize
from gate.transfer_map import Observed, capture_works, mapped

Inputs = tuple[tuple[Any, ...], dict[str, Any]]


class RegionAbort(Exception):
    """The region cannot be judged; carries the error for the report."""

    def __init__(self, error: RegionError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True)
class Callables:
    """A region's imported code."""

    step: Callable[..., Any]
    setup: Callable[..., Any] | None
    boundaries: tuple[tuple[str, types.FunctionType], ...]
    custom: Callable[[Any], Any] | None


def import_region(policy: Policy, region: Region) -> Callables:
    """Import what ``region`` names; `ResolveError` if anything doesn't import."""
    paths = policy.python_path
    boundaries = [(ref.spec, import_boundary(ref, paths)) for ref in region.boundaries]
    custom = region.checks.custom
    return Callables(
        step=import_callable(region.step, paths),
        setup=import_callable(region.setup, paths) if region.setup else None,
        boundaries=tuple(boundaries),
        custom=import_callable(custom, paths) if custom else None,
    )


@dataclass
class RegionRun:
    """The state of one region while it runs."""

    policy: Policy
    region: Region
    code: UserCode
    callables: Callables
    monitor: BoundaryMonitor = field(default_factory=BoundaryMonitor)
    transfers: list[Transfer] = field(default_factory=list)

    # -- inputs and outputs -------------------------------------------------

    def fresh_inputs(self) -> Inputs:
        setup = self.callables.setup
        if setup is None:
            return (), {}
        try:
            made = setup()
        except Exception as exc:
            raise RegionAbort(self._error_from(ErrorKind.SETUP, exc)) from exc
        if isinstance(made, tuple):
            return made, {}
        if isinstance(made, dict) and all(isinstance(k, str) for k in made):
            return (), made
        spec = self.region.setup.spec if self.region.setup else "setup"
        raise RegionAbort(
            RegionError(
                ErrorKind.BAD_INPUT,
                f"{spec} returned {type(made).__name__}; return a tuple of positional "
                "arguments for the step (e.g. `return (params, batch)`) or a dict of "
                "keyword arguments",
                f"setup returned {made!r:.500}",
            )
        )

    def call_step(self, inputs: Inputs) -> Any:
        import jax

        args, kwargs = inputs
        outputs = self.callables.step(*args, **kwargs)
        jax.block_until_ready(outputs)
        return outputs

    def check_outputs(self, outputs: Any) -> None:
        """Refuse outputs the gate can neither block on nor check."""
        import jax
        import numpy as np

        leaves = jax.tree_util.tree_leaves(outputs)
        bad = [
            type(leaf).__name__
            for leaf in leaves
            if not isinstance(leaf, jax.Array | np.ndarray | np.generic | int | float | complex)
        ]
        if not leaves or bad:
            got = "None" if outputs is None else type(outputs).__name__
            detail = f" containing {', '.join(sorted(set(bad)))}" if bad else ""
            raise RegionAbort(
                RegionError(
                    ErrorKind.BAD_OUTPUT,
                    f"{self.region.step.spec} returned {got}{detail}; return the step's "
                    "outputs (arrays, or a pytree of them) so the gate can wait for "
                    "them and check them",
                    f"step returned {outputs!r:.500}",
                )
            )

    # -- the phases ---------------------------------------------------------

    def unguarded_call(self) -> Any:
        inputs = self.fresh_inputs()
        try:
            outputs = self.call_step(inputs)
        except Exception as exc:
            raise RegionAbort(self._error_from(ErrorKind.STEP, exc)) from exc
        self.check_outputs(outputs)
        return outputs

    def guarded_call(self, phase: Phase) -> None:
        """One run under the region's guard; a disallowed transfer is recorded."""
        inputs = self.fresh_inputs()
        self.monitor.guard = self.region.guard
        try:
            with guarded(self.region.guard):
                outputs = self.call_step(inputs)
        except Exception as exc:
            violation = parse_violation(exc)
            if violation is None:
                raise RegionAbort(self._error_from(ErrorKind.STEP, exc)) from exc
            found = self._transfer_from(exc, phase)
            if not any(_same_site(found, known) for known in self.transfers):
                self.transfers.append(found)
            return
        finally:
            self.monitor.guard = None
        self.check_outputs(outputs)

    def mapped_calls(self, phase: Phase, runs: int) -> None:
        """``runs`` runs under the logging levels, every transfer charged to its line.

        Always ``log_explicit``: the map shows explicit transfers too (in
        boundaries or not); whether one fails is judged afterwards from the
        region's own levels.
        """
        import jax

        per_run: list[Counter[_SiteKey]] = []
        details: dict[_SiteKey, Observed] = {}
        explicit = _explicit_functions(jax)
        main_thread = threading.current_thread().name
        for _ in range(runs):
            inputs = self.fresh_inputs()
            try:
                with (
                    mapped(self.code, explicit=explicit, boundary_of=self.monitor.current) as log,
                    guarded(GuardSpec.uniform(GuardLevel.LOG_EXPLICIT)),
                ):
                    outputs = self.call_step(inputs)
            except Exception as exc:
                raise RegionAbort(self._error_from(ErrorKind.STEP, exc)) from exc
            self.check_outputs(outputs)
            counts: Counter[_SiteKey] = Counter()
            for seen in log.observed:
                key = _SiteKey(
                    seen.direction,
                    seen.explicit,
                    seen.location,
                    seen.boundary,
                    None if seen.thread == main_thread else _thread_label(seen.thread),
                )
                counts[key] += 1
                known = details.get(key)
                if known is None or (known.dtype is None and seen.dtype is not None):
                    details[key] = seen
            per_run.append(counts)
        for key in sorted(details, key=_site_order):
            seen = details[key]
            self.transfers.append(
                Transfer(
                    direction=key.direction,
                    explicit=key.explicit,
                    dtype=seen.dtype,
                    shape=seen.shape,
                    location=key.location,
                    phase=phase,
                    failing=self._fails(key.direction, key.explicit, key.boundary),
                    message="seen in JAX's transfer-guard log",
                    boundary=key.boundary,
                    count=max(counts[key] for counts in per_run),
                    source=self._source_line(key.location),
                    thread=key.thread,
                )
            )

    def _fails(self, direction: Direction, explicit: bool, boundary: str | None) -> bool:
        level = self.region.guard.level(direction)
        if boundary is not None:
            level = level.inside_boundary
        return level.fails_explicit if explicit else level.fails_implicit

    def _source_line(self, location: SourceLocation | None) -> str | None:
        if location is None:
            return None
        path = Path(location.path)
        if not path.is_absolute():
            path = self.code.repo_root / path
        return linecache.getline(str(path), location.line).strip() or None

    def timed_calls(self) -> tuple[list[float], Any]:
        """Step times over ``repeats`` runs, and the last run's outputs."""
        samples = []
        outputs = None
        for _ in range(self.region.repeats):
            inputs = self.fresh_inputs()
            start = time.perf_counter()
            try:
                outputs = self.call_step(inputs)
            except Exception as exc:
                raise RegionAbort(self._error_from(ErrorKind.STEP, exc)) from exc
            samples.append(time.perf_counter() - start)
        self.check_outputs(outputs)
        return samples, outputs

    # -- turning exceptions into records ----------------------------------

    def _transfer_from(self, exc: BaseException, phase: Phase) -> Transfer:
        violation = parse_violation(exc)
        assert violation is not None
        frames = frames_of(exc.__traceback__)
        callee = self.code.callee_after_user(frames)
        explicit = (
            callee is not None
            and callee.name in EXPLICIT_ENTRY_POINTS
            and f"{Path('jax', '_src')}" in callee.filename
        )
        boundary = self._boundary_in(frames)
        location = self.code.locate(frames)
        return Transfer(
            direction=violation.direction,
            explicit=explicit,
            dtype=violation.dtype,
            shape=violation.shape,
            location=location,
            phase=phase,
            failing=self._fails(violation.direction, explicit, boundary),
            message=str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            boundary=boundary,
            source=self._source_line(location),
        )

    def _boundary_in(self, frames: list[traceback.FrameSummary]) -> str | None:
        by_code = {
            (fn.__code__.co_filename, fn.__code__.co_name): name
            for name, fn in self.callables.boundaries
        }
        for frame in reversed(frames):
            name = by_code.get((frame.filename, frame.name))
            if name is not None:
                return name
        return None

    def _error_from(self, kind: ErrorKind, exc: BaseException) -> RegionError:
        frames = frames_of(exc.__traceback__)
        text = str(exc).strip().splitlines()
        summary = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        user_tb = user_frames_text(self.code, frames)
        full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        details = (
            f"Traceback (your code):\n{user_tb}{summary}\n\nFull traceback:\n{full}"
            if user_tb
            else full
        )
        return RegionError(kind, summary, details, self.code.locate(frames))


def _explicit_functions(jax: Any) -> tuple[Callable[..., Any], ...]:
    """The explicit-transfer functions this JAX version has (some are deprecated away)."""
    found = []
    for name in sorted(EXPLICIT_ENTRY_POINTS):
        try:
            found.append(getattr(jax, name))
        except AttributeError:
            continue
    return tuple(found)


def _thread_label(name: str) -> str:
    """A thread's name without the counter that changes every run ("Thread-7 (worker)")."""
    return re.sub(r"^Thread-\d+\s*", "", name).strip("()") or "thread"


def _same_site(a: Transfer, b: Transfer) -> bool:
    return (a.direction, a.location, a.phase, a.explicit) == (
        b.direction,
        b.location,
        b.phase,
        b.explicit,
    )


class _SiteKey(NamedTuple):
    """What makes two observed transfers the same finding."""

    direction: Direction
    explicit: bool
    location: SourceLocation | None
    boundary: str | None
    thread: str | None


def _site_order(key: _SiteKey) -> tuple[str, int, str, bool]:
    where = key.location
    return (
        where.path if where else "~",
        where.line if where else 0,
        key.direction.value,
        key.explicit,
    )


def host_leaves(outputs: Any) -> tuple[Any, Leaves]:
    """The outputs fetched to the host, explicitly, and their leaves with paths."""
    import jax
    import numpy as np

    host = jax.device_get(outputs)
    flat, _ = jax.tree_util.tree_flatten_with_path(host)
    leaves = [(jax.tree_util.keystr(path), np.asarray(value)) for path, value in flat]
    return host, leaves


def run_region(policy: Policy, region: Region, repo_root: Path) -> RegionResult:
    """Run one region and judge it. Never raises for the user's code."""
    started = time.perf_counter()

    def result(**fields: Any) -> RegionResult:
        return RegionResult(
            suite=policy.suite,
            name=region.name,
            policy_path=policy.path.as_posix(),
            policy_line=region.line,
            guard=region.guard,
            has_checks=region.checks.any,
            wall_s=time.perf_counter() - started,
            **fields,
        )

    code = UserCode(repo_root, policy.python_path)
    with python_path(policy.python_path):
        try:
            callables = import_region(policy, region)
        except ResolveError as exc:
            return result(error=RegionError(ErrorKind.IMPORT, str(exc), str(exc)))
        return _run_imported(RegionRun(policy, region, code, callables), result)


def _run_imported(run: RegionRun, result: Callable[..., RegionResult]) -> RegionResult:
    import jax

    region = run.region
    can_map = capture_works()
    notes: list[str] = []
    if not can_map:
        notes.append(
            "JAX's transfer-guard log did not reach the gate (was jax imported before the "
            "gate could set TF_CPP_MIN_LOG_LEVEL?), so there is no transfer map: the region "
            "was judged with the guard in disallow mode, which shows only the first transfer "
            "of each run."
        )
    # Forget compiled calls from earlier regions, so that this region's first
    # call takes the slow path where JAX checks every move.
    jax.clear_caches()
    checks: tuple[CheckOutcome, ...] = ()
    try:
        with full_tracebacks(), run.monitor.installed(run.callables.boundaries):
            if can_map:
                run.mapped_calls(Phase.FIRST_CALL, 1)
            else:
                run.guarded_call(Phase.FIRST_CALL)
            for _ in range(region.warmup):
                run.unguarded_call()
            if can_map:
                run.mapped_calls(Phase.STEADY_STATE, region.guarded_runs)
            # JAX's own verdict, once in steady state (every run without a
            # map): a transfer the map somehow missed still fails the region.
            for _ in range(1 if can_map else region.guarded_runs):
                run.guarded_call(Phase.STEADY_STATE)
            run.monitor.reset_costs()
            samples, outputs = run.timed_calls()
            costs = run.monitor.costs(region.repeats)
        if region.checks.any:
            try:
                host, leaves = host_leaves(outputs)
                checks = run_checks(region.checks, host, leaves, run.callables.custom)
            except Exception as exc:
                raise RegionAbort(run._error_from(ErrorKind.CHECK, exc)) from exc
    except RegionAbort as abort:
        return result(transfers=tuple(run.transfers), error=abort.error, notes=tuple(notes))
    return result(
        transfers=tuple(run.transfers),
        timing=summarize(samples),
        boundaries=costs,
        checks=checks,
        notes=tuple(notes),
    )


def run_policies(
    policies: list[Policy], repo_root: Path, only: frozenset[str] | None = None
) -> RunResult:
    """Run every region (or those named in ``only``) of every policy, in order."""
    suites = []
    for policy in policies:
        regions = tuple(
            run_region(policy, region, repo_root)
            for region in policy.regions
            if only is None or region.name in only or f"{policy.suite}.{region.name}" in only
        )
        if regions:
            suites.append(SuiteResult(policy.suite, policy.path.as_posix(), regions))
    return RunResult(tuple(suites))
