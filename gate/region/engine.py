"""Running one region: setup → first call (mapped) → warm-up → mapped runs → JAX's verdict
→ timed runs → checks → cost run.

Why this order:
- Every run gets fresh inputs from setup (`gate.region.inputs`): a value whose host copy was
  already fetched hides the next transfer of it.
- The very first call is watched, after ``jax.clear_caches()``: JAX checks some moves (an
  uncommitted array sent to another device) only on a call's slow path, which an unguarded
  warm-up would use up.
- "Mapped" runs record every transfer with its line (`gate.witness.transfer_map`: JAX's guard
  at ``log_explicit``; `gate.witness.detector` for device-to-host; `gate.witness.callbacks`
  for host callbacks; merged per site in `gate.region.sightings`); the region's own levels
  then decide which of them fail (`gate.region.verdict`).
- Warm-up compiles whatever else the step needs, unguarded, so that the steady-state runs and
  the timed runs see the steady state.
- One run under the region's real levels lets JAX itself refuse what the map might have
  missed; its refusal always fails.
- Timed runs are not watched (entering the guard costs ~10 µs, the map far more) and block on
  the outputs, so the figure is device time, not dispatch time.
"""

from __future__ import annotations

import functools
import threading
import time
import types
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gate.jaxhooks.compiles import CompileWatch, watching_compiles
from gate.jaxhooks.guard import (
    explicit_functions,
    full_tracebacks,
    guard_kept_by_the_gate,
    guarded,
    parse_violation,
)
from gate.machine.diagnosis import PlatformInfo, check_required
from gate.machine.diagnosis import detect as detect_platform
from gate.policy.levels import GuardLevel, GuardSpec
from gate.policy.model import Policy, RecompileRule, Region
from gate.policy.resolve import ResolveError, python_path
from gate.region.boundary import BoundaryMonitor
from gate.region.callables import RegionCode, import_region
from gate.region.checks import run_checks
from gate.region.cost_phase import cost_phase
from gate.region.errors import RegionAbort, error_from, first_line, refused_transfer
from gate.region.fetch_watch import FetchWatch, watching_reads
from gate.region.held import HeldRegion, Keep
from gate.region.inputs import Inputs, StepInputs
from gate.region.outputs import call_step, check_outputs, host_leaves
from gate.region.sightings import PhaseTally, SightingMemory, between_runs
from gate.region.stages import Stage, announce
from gate.region.threads import join_step_threads, user_threads_alive
from gate.region.timing import summarize
from gate.region.verdict import Verdict, Witnessing, coverage, notes, site_transfer, unchecked
from gate.results.records import (
    CheckOutcome,
    ErrorKind,
    Phase,
    Recompile,
    RegionError,
    RegionResult,
)
from gate.user_code import UserCode
from gate.witness.arguments import CallPlan, is_jitted, plan_call
from gate.witness.callbacks import CallbackHookMissing, CallbackLog, CallbackSite, count_callbacks
from gate.witness.fetches import FetchLog
from gate.witness.observed import Observed, name_moves
from gate.witness.recompiles import attribute
from gate.witness.transfer_map import capture_works, mapped

# What JAX runs on in this process; fixed once JAX has started.
_platform = functools.cache(detect_platform)

# How long the detector keeps watching after the last watched run when threads
# of the user's are alive (work handed to them may still be on its way).
SETTLE_S = 0.25


@dataclass
class RegionRun:
    """One region while it runs: a method per phase, over the parts that keep its state."""

    code: RegionCode
    platform: PlatformInfo | None = None
    callbacks: CallbackLog | None = None  # set while host callbacks are counted
    compiles: CompileWatch | None = None  # set after warm-up, unless `recompiles: allow`
    counted_runs: int = 0  # step calls watched for compilations
    monitor: BoundaryMonitor = field(default_factory=BoundaryMonitor)
    verdict: Verdict = field(default_factory=Verdict)
    memory: SightingMemory = field(default_factory=SightingMemory)
    watch: FetchWatch = field(init=False)
    inputs: StepInputs = field(init=False)

    def __post_init__(self) -> None:
        self.watch = FetchWatch(self.code.user, self.monitor.current)
        self.inputs = StepInputs(self.code, self.watch, self.verdict)

    def _call(self, inputs: Inputs) -> Any:
        if self.compiles is None:
            return call_step(self.code.callables.step, inputs)
        # Only the step's own call: setup may build arrays of new shapes freely.
        self.counted_runs += 1
        with self.compiles.counting():
            return call_step(self.code.callables.step, inputs)

    def recompiles(self, watch: CompileWatch | None) -> tuple[Recompile, ...]:
        fails, at = self.code.region.recompiles is RecompileRule.FAIL, self.code.step_location()
        events = watch.events if watch is not None else []
        return attribute(events, self.code.user, self.counted_runs, at, failing=fails)

    def _abort(self, kind: ErrorKind, exc: BaseException) -> RegionAbort:
        return RegionAbort(error_from(self.code.user, kind, exc))

    # -- the phases ---------------------------------------------------------

    def _step(self, inputs: Inputs) -> Any:
        try:
            return self._call(inputs)
        except Exception as exc:
            raise self._abort(ErrorKind.STEP, exc) from exc

    def unguarded_call(self) -> Any:
        outputs = self._step(self.inputs.fresh())
        check_outputs(self.code.region.step.spec, outputs)
        return outputs

    def guarded_call(self, phase: Phase) -> None:
        """One run under the region's guard; a disallowed transfer is recorded.

        JAX refusing a transfer is its own verdict: the record always fails,
        whatever the map concluded about the same line.
        """
        inputs = self.inputs.fresh()
        guard = self.code.region.guard
        self.monitor.guard = guard
        try:
            with guarded(guard):
                outputs = self._call(inputs)
        except Exception as exc:
            if parse_violation(exc) is None:
                if self.verdict.any_failing:
                    # Most likely a refused transfer in a thread broke the
                    # step; the failing transfers already say what to fix.
                    self.verdict.warn(
                        f"under the region's guard the step raised {type(exc).__name__}: "
                        f"{first_line(exc)} (a refused transfer elsewhere, e.g. in a "
                        "thread, can cause this)"
                    )
                    return
                raise self._abort(ErrorKind.STEP, exc) from exc
            self.verdict.add_refusal(replace(refused_transfer(self.code, exc, phase), failing=True))
            return
        finally:
            self.monitor.guard = None
        check_outputs(self.code.region.step.spec, outputs)

    def mapped_calls(self, phase: Phase, runs: int) -> None:
        """``runs`` runs under the logging levels, every transfer charged to its line.

        Always ``log_explicit``: the map shows explicit transfers too (in
        boundaries or not); whether one fails is judged afterwards from the
        region's own levels. Three witnesses: JAX's guard log, the gate's
        device-to-host detector, and the host-callback counter.
        """
        tally = PhaseTally(
            main_thread=threading.current_thread().name,
            step_location=self.code.step_location(),
            platform=self.platform.platform if self.platform is not None else None,
            memory=self.memory,
            disagreements=self.verdict.disagreements,
        )
        explicit = explicit_functions()
        for _ in range(runs):
            self._mapped_run(tally, explicit)
        for key, sighting, count in tally.sites():
            self.verdict.transfers.append(site_transfer(self.code, key, sighting, phase, count))

    def _mapped_run(self, tally: PhaseTally, explicit: tuple[Callable[..., Any], ...]) -> None:
        inputs = self.inputs.fresh()
        step_plan = self._step_plan(inputs)
        callbacks_before = self.callbacks.counts() if self.callbacks else {}
        threads_before = set(threading.enumerate())
        try:
            with (
                self.watch.detector() as fetches,
                mapped(
                    self.code.user,
                    explicit=explicit,
                    boundary_codes=self.code.callables.boundary_codes,
                ) as log,
                guarded(GuardSpec.uniform(GuardLevel.LOG_EXPLICIT)),
            ):
                outputs = self._call(inputs)
                join_step_threads(threads_before, self.code.step_location)
        except RegionAbort:
            raise
        except Exception as exc:
            raise self._abort(ErrorKind.STEP, exc) from exc
        check_outputs(self.code.region.step.spec, outputs)
        ran: dict[CallbackSite, int] = {}
        if self.callbacks is not None:
            self.callbacks.settle()
            ran = {site: n for site, n in self.callbacks.delta(callbacks_before).items() if n}

        def plan_of(seen: Observed) -> CallPlan | None:
            # A jitted step: no line of the user's ran, and JAX moved setup's
            # outputs; name them after the step's parameters where they agree.
            moved_arguments = (
                seen.location is None and seen.thread == tally.main_thread and not seen.argument
            )
            return step_plan if moved_arguments else None

        name_moves(log.observed, plan_of)
        tally.add_run(log.observed, fetches, ran)

    def _step_plan(self, inputs: Inputs) -> CallPlan | None:
        """What a jitted step moves of setup's outputs, by parameter; None if not jitted."""
        step = self.code.callables.step
        if not is_jitted(step):
            return None
        args, kwargs = inputs
        try:
            return plan_call(step, args, kwargs)
        except Exception:  # naming is a nicety: never let it break the run
            return None

    def fetches_between_runs(self, log: FetchLog, threads_before: set[str]) -> None:
        """Record the fetches other threads made between the watched runs."""
        for key, sighting in between_runs(log, threads_before, self.memory.detector_seen):
            transfer = site_transfer(self.code, key, sighting, Phase.STEADY_STATE, 1)
            self.verdict.transfers.append(transfer)

    def loosened(self, what: str, frame: types.FrameType) -> None:
        """The step tried to change the guard itself: ignored, and said."""
        where = f"{self.code.user.relative(frame.f_code.co_filename)}:{frame.f_lineno}"
        self.verdict.warn(
            f"{where}: the step calls {what}; the gate ignored it while watching (the "
            "policy's guard levels decide), so what moves there is judged like the rest"
        )

    def timed_calls(self) -> tuple[list[float], Any]:
        """Step times over ``repeats`` runs, and the last run's outputs."""
        samples, outputs = [], None
        for _ in range(self.code.region.repeats):
            inputs = self.inputs.fresh()
            start = time.perf_counter()
            outputs = self._step(inputs)
            samples.append(time.perf_counter() - start)
        check_outputs(self.code.region.step.spec, outputs)
        return samples, outputs


def run_region(
    policy: Policy,
    region: Region,
    *,
    repo_root: Path | None = None,
    keep: Keep | None = None,
) -> RegionResult:
    """Run one region of ``policy`` in this process and judge it. Never raises for the user's code.

    ``repo_root`` is the repository the user's code is in: reports name its
    files relative to it, and only frames in it (or in the policy's
    ``python_path``) count as the user's lines. By default it is the working
    directory, where the gate's workers run. ``keep`` receives the region loaded, with its
    last outputs, if it ran to the end (``run --base`` times it again, `gate.region.held`).
    """
    started = time.perf_counter()
    user = UserCode(Path.cwd() if repo_root is None else repo_root, policy.python_path)

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

    with python_path(policy.python_path):
        try:
            announce(Stage.IMPORTING)
            with watching_reads(user):  # a module that reads an array at import caches it
                callables = import_region(policy, region)
        except ResolveError as exc:
            return result(error=RegionError(ErrorKind.IMPORT, str(exc), str(exc)))
        return _run_imported(RegionRun(RegionCode(policy, region, user, callables)), result, keep)


def _run_imported(
    run: RegionRun, result: Callable[..., RegionResult], keep: Keep | None
) -> RegionResult:
    import jax

    region = run.code.region
    run.platform = _platform()
    base = {"platform": run.platform.describe()}
    wrong_platform = check_required(run.code.policy.platform, run.platform)
    if wrong_platform is not None:
        return result(error=RegionError(ErrorKind.PLATFORM, wrong_platform, wrong_platform), **base)
    can_map = capture_works()
    callbacks_missing: str | None = None
    # Forget earlier regions' compiled calls: this region's first call takes JAX's slow path, which
    # checks every move. Executables return from the run's cache (`gate.isolation.compile_cache`).
    jax.clear_caches()
    checks: tuple[CheckOutcome, ...] = ()

    def witnessing() -> Witnessing:
        return Witnessing(run.platform, can_map, run.watch.missing, callbacks_missing)

    try:
        with (
            full_tracebacks(),
            run.monitor.installed(run.code.callables.boundaries),
            guard_kept_by_the_gate(run.code.user.is_user, run.loosened, run.verdict.warn),
            nullcontext(None)
            if region.recompiles is RecompileRule.ALLOW
            else watching_compiles() as compile_watch,
        ):
            threads_before = {t.name for t in threading.enumerate()}
            # The detector also watches between the runs: a thread that lives
            # beyond the step (a logger fed through a queue) fetches when it
            # likes, and those fetches fall outside every mapped run.
            with run.watch.detector() as background:
                with ExitStack() as counting:
                    try:
                        run.callbacks = counting.enter_context(count_callbacks(run.code.user))
                    except CallbackHookMissing as exc:
                        callbacks_missing = str(exc)
                    announce(Stage.COMPILING)
                    first_call = time.perf_counter()  # compiling included: --base compares it
                    if can_map:
                        run.mapped_calls(Phase.FIRST_CALL, 1)
                    else:
                        run.guarded_call(Phase.FIRST_CALL)
                    first_call_s = time.perf_counter() - first_call
                    announce(Stage.WARMING_UP)
                    for _ in range(region.warmup):
                        run.unguarded_call()
                    run.compiles = compile_watch  # from here on, a compile is a recompile
                    announce(Stage.WATCHING)
                    if can_map:
                        run.mapped_calls(Phase.STEADY_STATE, region.guarded_runs)
                run.callbacks = None
                # JAX's own verdict, once in steady state (every run without a
                # map): a transfer the map somehow missed still fails the region.
                for _ in range(1 if can_map else region.guarded_runs):
                    run.guarded_call(Phase.STEADY_STATE)
                if background is not None and user_threads_alive():
                    # Work handed to a living thread may still be on its way.
                    time.sleep(SETTLE_S)
            if background is not None:
                run.fetches_between_runs(background, threads_before)
            run.monitor.reset_costs()
            announce(Stage.TIMING)
            samples, outputs = run.timed_calls()
            costs = run.monitor.costs(region.repeats)
            run.compiles = None
        if region.checks.any:
            announce(Stage.CHECKING)
            try:
                host, leaves = host_leaves(outputs)
                checks = run_checks(region.checks, host, leaves, run.code.callables.custom)
            except Exception as exc:
                raise RegionAbort(error_from(run.code.user, ErrorKind.CHECK, exc)) from exc
    except RegionAbort as abort:
        return result(
            transfers=tuple(run.verdict.transfers),
            error=abort.error,
            recompiles=run.recompiles(run.compiles),
            notes=notes(run.verdict, witnessing()),
            coverage=coverage(witnessing()),
            **base,
        )
    judged = coverage(witnessing())
    if keep is not None:
        keep(HeldRegion(run.code, run.inputs, run._call, run.monitor), outputs)
    return result(
        transfers=tuple(run.verdict.transfers),
        timing=summarize(samples),
        timing_samples=tuple(samples),
        first_call_s=first_call_s,
        boundaries=costs,
        checks=checks,
        recompiles=run.recompiles(compile_watch),
        notes=notes(run.verdict, witnessing()),
        coverage=judged,
        error=unchecked(region.guard, witnessing(), judged),
        cost=cost_phase(run.inputs.fresh, run._call),  # last: it slows dispatch (cost_phase)
        **base,
    )
