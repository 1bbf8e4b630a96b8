"""Running one region: setup → first call (mapped) → warm-up (the cost run too) → mapped runs
→ JAX's verdict → device memory judged → timed runs → checks → traced runs.

Why this order:
- Every run gets fresh inputs from setup (`gate.region.inputs`): a value whose host copy was
  already fetched hides the next transfer of it.
- The very first call is watched, and cold: the region's step calls run under a jit cache
  context of the region's own (`gate.jaxhooks.programs`), so whatever ran before in the
  worker, its programs are traced and dispatched afresh. JAX checks some moves (an
  uncommitted array sent to another device) only on a call's slow path, which an unguarded
  warm-up would use up.
- "Mapped" runs record every transfer with its line (`gate.witness.transfer_map`: JAX's guard
  at ``log_explicit``; `gate.witness.detector` for device-to-host; `gate.witness.callbacks`
  for host callbacks; merged per site in `gate.region.sightings`); the region's own levels
  then decide which of them fail (`gate.region.verdict`).
- Warm-up compiles whatever else the step needs, unguarded, so that the steady-state runs and
  the timed runs see the steady state. What each function compiled in the first call and
  warm-up is counted apart (`startup_programs`): more programs than the base's, or a second
  one at the same shapes (a weak type that flips), is a recompile all the same.
- One run under the region's real levels lets JAX itself refuse what the map might have
  missed; its refusal always fails.
- After warm-up and after each of those runs the gate counts the device arrays alive
  (`gate.region.leaks`): arrays every run leaves behind are a leak. Judged before the timed
  runs, which count nothing.
- Timed runs are not watched (entering the guard costs ~10 µs, the map far more) and block on
  the outputs, so the figure is device time, not dispatch time.
- The first of two or more warm-up runs also sees every program the step runs, for its cost
  (`gate.region.cost_phase`); the next leaves the fast path as the mapped runs will find it.
  With fewer, a cost run of its own comes after the checks. Traced runs for op times by line,
  where a slower verdict may list them, come last: never among the timed runs.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

from gate.jaxhooks.compiles import compile_events_arrive, watching_compiles
from gate.jaxhooks.donation_warnings import donation_warnings_caught
from gate.jaxhooks.guard import (
    full_tracebacks,
    guard_kept_by_the_gate,
)
from gate.jaxhooks.programs import RegionPrograms
from gate.machine.diagnosis import check_required
from gate.machine.diagnosis import detect as detect_platform
from gate.policy.model import LeakRule, Policy, RecompileRule, Region
from gate.policy.resolve import ResolveError, python_path
from gate.region.callables import RegionCode, import_region
from gate.region.checks import run_checks
from gate.region.cost_phase import Costed, cost_phase
from gate.region.donations import judge_donations
from gate.region.errors import RegionAbort, error_from
from gate.region.fetch_watch import watching_reads
from gate.region.held import HeldRegion, Keep
from gate.region.leaks import judge_memory
from gate.region.outputs import host_leaves
from gate.region.region_run import RegionRun
from gate.region.stages import Stage, announce
from gate.region.step_times import summarize
from gate.region.threads import user_threads_alive
from gate.region.verdict import Witnessing, coverage, notes, unchecked
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import CheckOutcome, Phase, RegionResult, region_key
from gate.user_code import UserCode
from gate.witness.callbacks import CallbackHookMissing, count_callbacks
from gate.witness.live_arrays import LiveArrays
from gate.witness.transfer_map import capture_works

# What JAX runs on in this process; fixed once JAX has started.
_platform = functools.cache(detect_platform)

# How long the detector keeps watching after the last watched run when threads
# of the user's are alive (work handed to them may still be on its way).
SETTLE_S = 0.25
# Set once a region's first call ended in this process. The first one also warms the process
# (XLA's compiler, JAX's caches of its own programs): 4-15x a later region's first call on
# unchanged trees. Only a first call made in a warm process is kept for "first call vs base",
# so both trees' figures are alike or the line is left out.
_process_warm = threading.Event()


def run_region(
    policy: Policy,
    region: Region,
    *,
    repo_root: Path | None = None,
    keep: Keep | None = None,
    traced: bool = True,
    traces: Path | None = None,
    trace_held: bool = False,
    let_go: Callable[[Callable[[], None]], None] | None = None,
) -> RegionResult:
    """Run one region of ``policy`` in this process and judge it. Never raises for the user's code.

    ``repo_root`` is the repository the user's code is in: reports name its
    files relative to it, and only frames in it (or in the policy's
    ``python_path``) count as the user's lines. By default it is the working
    directory, where the gate's workers run. ``keep`` receives the region loaded, with its
    last outputs, if it ran to the end (``run --base`` times it again, `gate.region.held`).
    ``traced``: a few runs under JAX's profiler after the cost run, for a region whose step
    time this run compares (`gate.region.cost_phase`); off where nothing compares it.
    ``traces``: the folder those runs' trace is kept in (the run's, beside its reports); None:
    read, then removed.
    ``trace_held``: those runs are left to the region ``keep`` holds (`HeldRegion.op_times`),
    made only if its comparison asks for them.
    ``let_go``: a worker's, for a region it will not hold: handed, once the region is done, what
    lets go of the step's compiled programs (`RegionPrograms.let_go`), for the worker to call
    when the region's reply is on its way (`gate.isolation.worker`). In the user's own process
    (`gate.api`) they stay: ``clear_cache`` would drop the user's own compilations of the step
    too.
    """
    started = time.perf_counter()
    root = Path.cwd() if repo_root is None else repo_root
    user = UserCode(root, policy.python_path)

    def result(**fields: Any) -> RegionResult:
        return RegionResult.of(policy, region, wall_s=time.perf_counter() - started, **fields)

    with python_path(policy.python_path):
        try:
            announce(Stage.IMPORTING)
            with watching_reads(user):  # a module that reads an array at import caches it
                callables = import_region(policy, region)
        except ResolveError as exc:
            return result(error=RegionError(ErrorKind.IMPORT, str(exc), str(exc)))
        code = RegionCode(policy, region, user, callables)
        # Programs of the region's own: its first call takes JAX's slow path, which checks
        # every move, whatever earlier regions compiled; setup's programs stay shared.
        programs = RegionPrograms()
        try:
            return _run_imported(
                RegionRun(code),
                programs,
                result,
                keep,
                traced=traced,
                traces=traces,
                trace_held=trace_held,
            )
        finally:
            if let_go is not None:
                let_go(functools.partial(programs.let_go, callables.step))


def _run_imported(
    run: RegionRun,
    programs: RegionPrograms,
    result: Callable[..., RegionResult],
    keep: Keep | None,
    *,
    traced: bool,
    traces: Path | None,
    trace_held: bool,
) -> RegionResult:
    region = run.code.region
    run.platform = _platform()
    base = {"platform": run.platform.describe(), "machine": run.platform.machine()}
    wrong_platform = check_required(run.code.policy.platform, run.platform)
    if wrong_platform is not None:
        return result(error=RegionError(ErrorKind.PLATFORM, wrong_platform, wrong_platform), **base)
    can_map = capture_works()
    callbacks_missing: str | None = None
    unkept: list[str] = []  # guard setters this JAX put out of the gate's reach
    watched = region.recompiles is not RecompileRule.ALLOW
    # Asked once the first call and warm-up were watched: a compile they delivered answers
    # it, where a probe would compile a program of its own (`compile_events_arrive`).
    compiles_unseen: str | None = None
    checks: tuple[CheckOutcome, ...] = ()
    held: HeldRegion | None = None
    measured: Costed | None = None  # the step's cost, from its first warm-up run

    def witnessing() -> Witnessing:
        return Witnessing(
            run.platform,
            can_map,
            run.watch.missing,
            callbacks_missing,
            run.watch.blind_spots,
            tuple(unkept),
            compiles_unseen,
        )

    try:
        with (
            programs.entered(),
            full_tracebacks(),
            run.monitor.installed(run.code.callables.boundaries),
            guard_kept_by_the_gate(run.code.user.is_user, run.loosened, unkept.append),
            watching_compiles() if watched else nullcontext(None) as compile_watch,
            # JAX warns of a donation it drops once, when the first call lowers the step.
            donation_warnings_caught() as dropped,
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
                    run.starting = compile_watch  # the first call and warm-up's own programs
                    first_call = time.perf_counter()  # compiling included: --base compares it
                    if can_map:
                        run.mapped_calls(Phase.FIRST_CALL, 1)
                    else:
                        run.guarded_call(Phase.FIRST_CALL)
                    first_call_s = (
                        time.perf_counter() - first_call if _process_warm.is_set() else None
                    )
                    _process_warm.set()
                    announce(Stage.WARMING_UP)
                    for turn in range(region.warmup):
                        # The first of two or more is the cost run too: it takes Python's
                        # path, and the next one leaves the C++ fast path as it will be.
                        if turn == 0 and region.warmup >= 2:
                            measured = run.unguarded_call(cost_for=dropped.found)
                        else:
                            run.unguarded_call()
                    run.starting = None
                    run.compiles = compile_watch  # from here on, a compile is a recompile
                    compiles_unseen = compile_events_arrive() if watched else None
                    if region.memory.leaks is not LeakRule.ALLOW:
                        run.live = LiveArrays()
                        run.count_live()  # the state the guarded runs start from
                    announce(Stage.WATCHING)
                    if can_map:
                        run.mapped_calls(Phase.STEADY_STATE, region.guarded_runs)
                run.callbacks = None
                # JAX's own verdict, once in steady state (every run without a
                # map): a transfer the map somehow missed still fails the region.
                for _ in range(1 if can_map else region.guarded_runs):
                    run.guarded_call(Phase.STEADY_STATE)
                    run.count_live()
                if background is not None and user_threads_alive():
                    # Work handed to a living thread may still be on its way.
                    time.sleep(SETTLE_S)
            if background is not None:
                run.fetches_between_runs(background, threads_before)
            # Judged before the timed runs, which it must not slow, and before their
            # outputs are held.
            memory = (
                None
                if run.live is None
                else judge_memory(run.live, region.memory.leaks, run.code.user)
            )
            run.live = None
            run.monitor.reset_costs()
            announce(Stage.TIMING)
            samples, outputs = run.timed_calls()
            costs = run.monitor.costs(region.repeats)
            for unused in (cost.name for cost in costs if cost.calls == 0):
                # Most likely stale: the step was refactored and fetches somewhere else now.
                run.verdict.warn(
                    f"boundary {unused} was not called in any timed run: if the step no longer "
                    "calls it, remove it from the policy's boundaries; if it calls it only now "
                    "and then, the gate's runs did not reach it"
                )
            run.compiles = None
        if region.checks.any:
            announce(Stage.CHECKING)
            custom = run.code.callables.custom
            custom_at = run.code.definition(custom) if custom is not None else None
            try:
                host, leaves = host_leaves(outputs)
                checks = run_checks(region.checks, host, leaves, custom, custom_at)
            except RegionAbort:
                raise
            except Exception as exc:
                raise RegionAbort(error_from(run.code.user, ErrorKind.CHECK, exc)) from exc
        if keep is not None:
            # Its outputs fetched now, in this try: setup failing to repeat is the region's error.
            held = HeldRegion(run.code, run.inputs, run.call, run.monitor, programs)
            keep(held, outputs)
    except RegionAbort as abort:
        if watched and compiles_unseen is None:  # stopped before warm-up asked, perhaps
            compiles_unseen = compile_events_arrive()  # answered at once when it had
        return result(
            transfers=tuple(run.verdict.transfers),
            error=abort.error,
            recompiles=run.recompiles(run.compiles),
            startup_programs=run.startup_programs(run.compiles or run.starting),
            notes=notes(run.verdict, witnessing(), region),
            coverage=coverage(witnessing()),
            **base,
        )
    judged = coverage(witnessing())
    # A cost run of its own only where warm-up did not measure the cost (fewer than two).
    # Op times by line only where a slower verdict may list them.
    key = region_key(run.code.policy.suite, region.name)
    with programs.entered():
        costed = cost_phase(
            run.inputs.for_timing,
            run.call,
            run.code.user,
            dropped.found,
            traced=key if traced and region.timing.compare else None,
            traces=traces,
            later=held is not None and trace_held,
            measured=measured,
        )
    cost = costed.cost
    if held is not None:
        held.traced_later = costed.traced_later
    donations = judge_donations(region.donation, cost, witnessing().where)
    return result(
        transfers=tuple(run.verdict.transfers),
        timing=summarize(samples),
        timing_samples=tuple(samples),
        first_call_s=first_call_s,
        boundaries=costs,
        checks=checks,
        recompiles=run.recompiles(compile_watch),
        startup_programs=run.startup_programs(compile_watch),
        notes=notes(run.verdict, witnessing(), region)
        + _noted(donations.note)
        + _noted(memory.note if memory is not None else None)
        # A trace without op times, said once: a slower verdict names no line then.
        + _noted(cost.times.note if cost.times is not None and cost.times.note else None),
        coverage=judged,
        error=unchecked(region, witnessing(), judged) or donations.error,
        cost=cost,
        donations=donations.donations,
        memory=memory,
        **base,
    )


def _noted(note: str | None) -> tuple[str, ...]:
    return () if note is None else (note,)
