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

import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.boundary import BoundaryMonitor
from gate.checks import Leaves, run_checks
from gate.guard import EXPLICIT_ENTRY_POINTS, full_tracebacks, guarded, parse_violation
from gate.policy_model import Policy, Region
from gate.resolve import ResolveError, import_boundary, import_callable, python_path
from gate.results import (
    CheckOutcome,
    ErrorKind,
    Phase,
    RegionError,
    RegionResult,
    RunResult,
    SuiteResult,
    Transfer,
)
from gate.source import UserCode, frames_of, user_frames_text
from gate.timing import summarize

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
            self.transfers.append(self._transfer_from(exc, phase))
            return
        finally:
            self.monitor.guard = None
        self.check_outputs(outputs)

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
        level = self.region.guard.level(violation.direction)
        if boundary is not None:
            level = level.inside_boundary
        failing = level.fails_explicit if explicit else level.fails_implicit
        return Transfer(
            direction=violation.direction,
            explicit=explicit,
            dtype=violation.dtype,
            shape=violation.shape,
            location=self.code.locate(frames),
            phase=phase,
            failing=failing,
            message=str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            boundary=boundary,
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
    # Forget compiled calls from earlier regions, so that this region's first
    # call takes the slow path where JAX checks every move.
    jax.clear_caches()
    checks: tuple[CheckOutcome, ...] = ()
    try:
        with full_tracebacks(), run.monitor.installed(run.callables.boundaries):
            run.guarded_call(Phase.FIRST_CALL)
            for _ in range(region.warmup):
                run.unguarded_call()
            for _ in range(region.guarded_runs):
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
        return result(transfers=tuple(run.transfers), error=abort.error)
    return result(
        transfers=tuple(run.transfers),
        timing=summarize(samples),
        boundaries=costs,
        checks=checks,
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
