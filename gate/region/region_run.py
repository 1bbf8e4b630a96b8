"""One region while it runs: a method per phase, over the parts that keep its state.

`gate.region.engine` runs the phases in their order (and says why that order);
this is what each phase does: a call unguarded, a call under the region's own
guard levels (JAX's verdict), mapped calls with every transfer charged to its
line, the timed calls, and the fetches other threads made between the runs.
"""

from __future__ import annotations

import functools
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any

from gate.jaxhooks.compiles import CompileWatch
from gate.jaxhooks.donation_warnings import WarnedDonation
from gate.jaxhooks.executables import fast_path_off
from gate.jaxhooks.guard import (
    explicit_functions,
    guarded,
    parse_refusal,
)
from gate.jaxhooks.internals import InternalMissing
from gate.levels import GuardLevel, GuardSpec
from gate.machine.diagnosis import PlatformInfo
from gate.policy.model import RecompileRule
from gate.region.boundary import BoundaryMonitor
from gate.region.callables import RegionCode
from gate.region.cost_phase import Costed, costed
from gate.region.descriptions import SightingMemory
from gate.region.errors import RegionAbort, error_from, first_line, refused_transfer
from gate.region.fetch_watch import FetchWatch
from gate.region.inputs import Inputs, StepInputs
from gate.region.outputs import call_step, check_outputs
from gate.region.sightings import PhaseTally, between_runs
from gate.region.threads import join_step_threads
from gate.region.verdict import Verdict, site_transfer
from gate.results.errors import ErrorKind
from gate.results.records import Phase, ProgramsCompiled, Recompile
from gate.witness.arguments import CallPlan, is_jitted, plan_call
from gate.witness.callbacks import CallbackLog, CallbackSite
from gate.witness.fetches import FetchLog
from gate.witness.live_arrays import LiveArrays
from gate.witness.observed import Observed, name_moves
from gate.witness.recompiles import attribute, programs_compiled, startup_recompiles
from gate.witness.transfer_map import mapped


@contextmanager
def described(phase: Phase) -> Iterator[None]:
    """The first call with jit's C++ fast path off: every move it makes is described.

    The fast path logs a move with an empty description, also on the first call, for a
    program that ran before at another line (the same ``* 100`` twice, a library's
    ``jnp.array(0)`` in two places). On Python's path the guard describes each, and the warm
    runs borrow those descriptions (`gate.region.descriptions`). A JAX that moved the hook
    runs the first call as it is: fewer moves described, none miscounted.
    """
    with ExitStack() as stack:
        if phase is Phase.FIRST_CALL:
            with suppress(InternalMissing):  # raised before anything was changed
                stack.enter_context(fast_path_off())
        yield


@dataclass
class RegionRun:
    """One region while it runs: a method per phase, over the parts that keep its state."""

    code: RegionCode
    platform: PlatformInfo | None = None
    callbacks: CallbackLog | None = None  # set while host callbacks are counted
    compiles: CompileWatch | None = None  # set after warm-up, unless `recompiles: allow`
    counted_runs: int = 0  # step calls watched for compilations
    # Set for the first call and warm-up (unless `recompiles: allow`): their compiles apart.
    starting: CompileWatch | None = None
    startup_runs: int = 0
    monitor: BoundaryMonitor = field(default_factory=BoundaryMonitor)
    verdict: Verdict = field(default_factory=Verdict)
    memory: SightingMemory = field(default_factory=SightingMemory)
    # Set after warm-up unless ``memory: {leaks: allow}``: the device arrays alive after each
    # run past warm-up (`gate.region.leaks`).
    live: LiveArrays | None = None
    watch: FetchWatch = field(init=False)
    inputs: StepInputs = field(init=False)

    def __post_init__(self) -> None:
        self.watch = FetchWatch(self.code.user, self.monitor.current)
        self.inputs = StepInputs(self.code, self.watch, self.verdict)

    def call(self, inputs: Inputs) -> Any:
        """One call of the step on ``inputs``, blocking on its outputs; counted for
        recompiles once warm-up is over. The held region (`run --base`) and the cost run
        call the step through here too."""
        if self.starting is not None:
            self.startup_runs += 1
            with self.starting.starting():
                return call_step(self.code.callables.step, inputs)
        if self.compiles is None:
            return call_step(self.code.callables.step, inputs)
        # Only the step's own call: setup may build arrays of new shapes freely.
        self.counted_runs += 1
        with self.compiles.counting():
            return call_step(self.code.callables.step, inputs)

    def recompiles(self, watch: CompileWatch | None) -> tuple[Recompile, ...]:
        """After warm-up, and (with no base to compare with) a function that compiled again
        at the same shapes in the first call and warm-up; ``run --base`` judges those again
        against the base's `startup_programs`."""
        fails, at = self.code.region.recompiles is RecompileRule.FAIL, self.code.step_location()
        events = watch.events if watch is not None else []
        after = attribute(events, self.code.user, self.counted_runs, at, failing=fails)
        startup = startup_recompiles(
            self.startup_programs(watch), None, self.startup_runs, failing=fails
        )
        return after + startup  # every step before the first call only

    def startup_programs(self, watch: CompileWatch | None) -> tuple[ProgramsCompiled, ...]:
        """What each function compiled in the first call and warm-up."""
        events = watch.startup if watch is not None else []
        return programs_compiled(events, self.code.user, self.code.step_location())

    def _abort(self, kind: ErrorKind, exc: BaseException) -> RegionAbort:
        return RegionAbort(error_from(self.code.user, kind, exc))

    # -- the phases ---------------------------------------------------------

    def _step(self, inputs: Inputs) -> Any:
        try:
            return self.call(inputs)
        except Exception as exc:
            raise self._abort(ErrorKind.STEP, exc) from exc

    def unguarded_call(self, *, cost_for: Sequence[WarnedDonation] | None = None) -> Costed | None:
        """One run, unguarded (warm-up). With ``cost_for`` (the donations JAX dropped when it
        lowered the step), it also sees every program the step runs and gives what they cost
        (`gate.region.cost_phase.costed`); None without."""
        ran: list[Any] = []

        def run(inputs: Inputs) -> None:
            ran.append(self._step(inputs))

        measured = None
        if cost_for is not None:
            # Setup's device work done before the devices' memory marks are read: its
            # temporaries are never the step's peak.
            settled = functools.partial(self.inputs.fresh, settled=True)
            measured = costed(settled, run, self.code.user, cost_for)
        if not ran:  # not costed, or this JAX lacks the hook that sees the programs
            run(self.inputs.fresh())
        check_outputs(self.code.region.step.spec, ran[-1])
        return measured

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
                outputs = self.call(inputs)
        except Exception as exc:
            if parse_refusal(exc) is None:
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
            self._mapped_run(tally, explicit, phase)
            if phase is Phase.STEADY_STATE:
                self.count_live()
        for key, sighting, count in tally.sites():
            self.verdict.transfers.append(site_transfer(self.code, key, sighting, phase, count))

    def count_live(self) -> None:
        """The device arrays alive now, after a run past warm-up whose outputs are dropped;
        the run's inputs, which the gate keeps for the next run's checks, left out."""
        if self.live is not None:
            self.live.count(self.inputs.previous or ())

    def _mapped_run(
        self, tally: PhaseTally, explicit: tuple[Callable[..., Any], ...], phase: Phase
    ) -> None:
        inputs = self.inputs.fresh()
        step_plan = self._step_plan(inputs)
        callbacks_before = self.callbacks.counts() if self.callbacks else {}
        threads_before = set(threading.enumerate())
        try:
            # The levels and the fast path are set before the map listens, and put back after
            # it stops: on Python 3.11 every call the map hears costs (~0.4 ms a run on a TPU
            # host for setting them), and neither moves anything.
            with (
                self.watch.detector() as fetches,
                guarded(GuardSpec.uniform(GuardLevel.LOG_EXPLICIT)),
                described(phase),  # the step only: setup's programs keep their fast path
                mapped(
                    self.code.user,
                    explicit=explicit,
                    boundary_codes=self.code.callables.boundary_codes,
                ) as log,
            ):
                outputs = self.call(inputs)
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
        for inputs in self.inputs.timed(self.code.region.repeats):
            start = time.perf_counter()
            outputs = self._step(inputs)
            samples.append(time.perf_counter() - start)
        check_outputs(self.code.region.step.spec, outputs)
        return samples, outputs
