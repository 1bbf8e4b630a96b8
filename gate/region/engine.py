"""Running one region: setup → first call (mapped) → warm-up → mapped runs → JAX's verdict
→ timed runs → checks.

Why this order:
- Every run gets fresh inputs from setup: a value whose host copy was
  already fetched hides the next transfer of it.
- The very first call is watched, after ``jax.clear_caches()``: JAX checks
  some moves (an uncommitted array sent to another device) only on a call's
  slow path, which an unguarded warm-up would use up.
- "Mapped" runs record every transfer with its line (`gate.witness.transfer_map`:
  JAX's guard at ``log_explicit``; `gate.witness.detector` for device-to-host;
  `gate.witness.callbacks` for host callbacks); the region's own levels then decide
  which of them fail.
- Warm-up compiles whatever else the step needs, unguarded, so that the
  steady-state runs and the timed runs see the steady state.
- One run under the region's real levels lets JAX itself refuse what the
  map might have missed; its refusal always fails.
- Timed runs are not watched (entering the guard costs ~10 µs, the map far
  more) and block on the outputs, so the figure is device time, not
  dispatch time.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import re
import threading
import time
import traceback
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from gate.jaxhooks.guard import (
    EXPLICIT_ENTRY_POINTS,
    full_tracebacks,
    guard_kept_by_the_gate,
    guarded,
    parse_violation,
)
from gate.jaxhooks.interpose import is_trampoline_frame
from gate.machine.diagnosis import PlatformInfo, check_required, direction_coverage
from gate.machine.diagnosis import detect as detect_platform
from gate.policy.levels import Direction, GuardLevel, GuardSpec
from gate.policy.model import Policy, Region
from gate.policy.resolve import ResolveError, import_boundary, import_callable, python_path
from gate.policy.signature import misfit_error
from gate.region.boundary import BoundaryMonitor
from gate.region.checks import Leaves, run_checks
from gate.region.timing import summarize
from gate.results.cause import HOST_CALLBACK_USE
from gate.results.records import (
    CheckOutcome,
    CoverageJudge,
    ErrorKind,
    Phase,
    RegionError,
    RegionResult,
    Site,
    SourceLocation,
    Transfer,
)
from gate.witness.arguments import CallPlan, is_jitted, plan_call
from gate.witness.callbacks import CallbackHookMissing, CallbackLog, CallbackSite, count_callbacks
from gate.witness.detector import (
    DetectorUnavailable,
    FetchLog,
    detect_fetches,
    host_copy_cached,
    reused_leaves,
)
from gate.witness.transfer_map import Observed, capture_works, mapped, name_moves
from gate.witness.user_code import UserCode, frames_of, user_frames_text

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

# How long threads the step started may run on after it returned, while the
# map still watches them.
THREAD_GRACE_S = 5.0
# How long the detector keeps watching after the last watched run when threads
# of the user's are alive (work handed to them may still be on its way).
SETTLE_S = 0.25


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
    # Each boundary's own code object, taken before the gate interposes it:
    # the frames of a boundary's body run this code.
    boundary_codes: dict[types.CodeType, str] = field(default_factory=dict)


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
        boundary_codes={fn.__code__: name for name, fn in boundaries},
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
    platform: PlatformInfo | None = None
    callbacks: CallbackLog | None = None  # set while host callbacks are counted
    detector_missing: str | None = None  # why the device-to-host detector could not run
    disagreements: set[str] = field(default_factory=set)
    warnings: dict[str, None] = field(default_factory=dict)  # ordered set of notes
    previous_inputs: Inputs | None = None
    # Every fetch the per-run detector logs counted, over all mapped runs.
    detector_seen: Counter[Site] = field(default_factory=Counter)
    # Per (site without its array, the how-many-th run of that line in a step,
    # the move's index in that run of the line): what the slow path described;
    # and per (site, run of the line), how many moves that described run made.
    described: dict[tuple[Site, int, int], _Described] = field(default_factory=dict)
    described_sizes: dict[tuple[Site, int], int] = field(default_factory=dict)

    # -- inputs and outputs -------------------------------------------------

    def fresh_inputs(self) -> Inputs:
        setup = self.callables.setup
        if setup is None:
            return (), {}
        try:
            # Watched, so that what setup reads counts as host-cached (as on a
            # GPU) and is not taken for the step's fetch; no run's log is open.
            with self._detector():
                made = setup()
        except Exception as exc:
            raise RegionAbort(self._error_from(ErrorKind.SETUP, exc)) from exc
        if isinstance(made, tuple):
            return self._checked_fresh((made, {}))
        if isinstance(made, dict) and all(isinstance(k, str) for k in made):
            return self._checked_fresh(((), made))
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

    def _checked_fresh(self, inputs: Inputs) -> Inputs:
        """Refuse inputs the step cannot take; warn when they could hide a transfer."""
        misfit = misfit_error(self.policy, self.region, self.callables.step, inputs)
        if misfit is not None:
            raise RegionAbort(misfit)
        setup = self.region.setup.spec if self.region.setup else "setup"
        if self.previous_inputs is not None:
            reused = reused_leaves(self.previous_inputs, inputs)
            if reused:
                self.warnings[
                    f"{setup} handed back the same array objects as the last run "
                    f"({', '.join(reused[:3])}): a value fetched once hides the next fetch "
                    "of it; build new arrays in setup"
                ] = None
        try:
            if host_copy_cached(inputs):
                self.warnings[
                    f"{setup} returned arrays whose value the host already read (in setup, at "
                    "import or in an earlier run): their host copy is cached (on CPU the gate "
                    "models a GPU's cache), so the step's read of them moves nothing and a "
                    "fetch there cannot be seen; build new arrays in setup"
                ] = None
        except DetectorUnavailable:
            pass  # this JAX keeps no visible host copy; nothing to warn about
        self.previous_inputs = inputs
        return inputs

    def call_step(self, inputs: Inputs) -> Any:
        import jax

        args, kwargs = inputs
        outputs = self.callables.step(*args, **kwargs)
        jax.block_until_ready(outputs)
        return outputs

    def check_outputs(self, outputs: Any) -> None:
        """Refuse outputs with no array to block on and check.

        Any pytree will do (an equinox model with functions among its
        leaves, a flax ``TrainState``, an optax state): the gate keeps its
        array leaves and ignores the rest. Only outputs without a single
        array leaf (``None``, a string) are refused.
        """
        import jax

        leaves = jax.tree_util.tree_leaves(outputs)
        if any(is_array_leaf(leaf) for leaf in leaves):
            return
        got = "None" if outputs is None else type(outputs).__name__
        others = {type(leaf).__name__ for leaf in leaves if leaf is not outputs}
        detail = f" containing only {', '.join(sorted(others))}" if others else ""
        raise RegionAbort(
            RegionError(
                ErrorKind.BAD_OUTPUT,
                f"{self.region.step.spec} returned {got}{detail}; return the step's "
                "outputs (arrays, or a pytree with arrays among its leaves) so the gate "
                "can wait for them and check them",
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
        """One run under the region's guard; a disallowed transfer is recorded.

        JAX refusing a transfer is its own verdict: the record always fails,
        whatever the map concluded about the same line.
        """
        inputs = self.fresh_inputs()
        self.monitor.guard = self.region.guard
        try:
            with guarded(self.region.guard):
                outputs = self.call_step(inputs)
        except Exception as exc:
            violation = parse_violation(exc)
            if violation is None:
                if any(t.failing for t in self.transfers):
                    # Most likely a refused transfer in a thread broke the
                    # step; the failing transfers already say what to fix.
                    self.warnings[
                        f"under the region's guard the step raised {type(exc).__name__}: "
                        f"{_first_line(exc)} (a refused transfer elsewhere, e.g. in a "
                        "thread, can cause this)"
                    ] = None
                    return
                raise RegionAbort(self._error_from(ErrorKind.STEP, exc)) from exc
            found = replace(self._transfer_from(exc, phase), failing=True)
            place = found.site.place
            if not any(
                known.failing and known.phase is found.phase and known.site.place == place
                for known in self.transfers
            ):
                self.transfers.append(found)
            return
        finally:
            self.monitor.guard = None
        self.check_outputs(outputs)

    def mapped_calls(self, phase: Phase, runs: int) -> None:
        """``runs`` runs under the logging levels, every transfer charged to its line.

        Always ``log_explicit``: the map shows explicit transfers too (in
        boundaries or not); whether one fails is judged afterwards from the
        region's own levels. Three witnesses: JAX's guard log, the gate's
        device-to-host detector, and the host-callback counter.
        """
        import jax

        per_run: list[Counter[Site]] = []
        details: dict[Site, _Sighting] = {}
        first_seen: dict[Site, int] = {}
        unnamed: set[Site] = set()
        explicit = _explicit_functions(jax)
        main_thread = threading.current_thread().name

        def key_of(
            direction: Direction,
            is_explicit: bool,
            location: SourceLocation | None,
            boundary: str | None,
            thread: str,
        ) -> Site:
            """The site without its array (that comes from the witness)."""
            label = None if thread == main_thread else _thread_label(thread)
            return Site(direction, is_explicit, location, boundary, label, None, None)

        def note(key: Site, sighting: _Sighting) -> None:
            first_seen.setdefault(key, len(first_seen))
            known = details.get(key)
            if known is None:
                details[key] = sighting
            else:  # what one witness knows and the other doesn't
                if known.argument and sighting.argument and known.argument != sighting.argument:
                    unnamed.add(key)  # two arguments of one dtype and shape: name neither
                details[key] = known._replace(
                    argument=None if key in unnamed else known.argument or sighting.argument,
                    jitted_call=known.jitted_call or sighting.jitted_call,
                    host_use=known.host_use or sighting.host_use,
                )

        for _ in range(runs):
            inputs = self.fresh_inputs()
            step_plan = self._step_plan(inputs)
            callbacks_before = self.callbacks.counts() if self.callbacks else {}
            threads_before = set(threading.enumerate())
            try:
                with (
                    self._detector() as fetches,
                    mapped(
                        self.code,
                        explicit=explicit,
                        boundary_codes=self.callables.boundary_codes,
                    ) as log,
                    guarded(GuardSpec.uniform(GuardLevel.LOG_EXPLICIT)),
                ):
                    outputs = self.call_step(inputs)
                    self._join_step_threads(threads_before)
            except RegionAbort:
                raise
            except Exception as exc:
                raise RegionAbort(self._error_from(ErrorKind.STEP, exc)) from exc
            self.check_outputs(outputs)
            ran: dict[CallbackSite, int] = {}
            if self.callbacks is not None:
                self.callbacks.settle()
                ran = {site: n for site, n in self.callbacks.delta(callbacks_before).items() if n}
            # A jitted step: no line of the user's ran, and JAX moved setup's
            # outputs; name them after the step's parameters where they agree.
            name_moves(
                log.observed,
                lambda seen, plan=step_plan: (
                    plan  # type: ignore[misc]
                    if seen.location is None and seen.thread == main_thread and not seen.argument
                    else None
                ),
            )
            # A host callback runs inside compiled code, where no line of the
            # user's is executing; the explicit moves the guard logs then (the
            # callback's operands and result) belong to the callback's site.
            only_site = next(iter(ran)) if len(ran) == 1 else None
            guard_counts: Counter[Site] = Counter()

            def place_of(
                seen: Observed, only_site: CallbackSite | None = only_site
            ) -> tuple[Site, str, str | None]:
                """The site (without its array) a guard line is charged to, who saw it, and
                whether a host callback made it."""
                location, seen_by, use = seen.location, "JAX's transfer-guard log", None
                # The callback machinery moves operands with jax.device_put (explicit);
                # an implicit line without a location is the step's own argument move.
                if location is None and only_site is not None and seen.explicit:
                    location = only_site.location
                    seen_by += f", during host callback {only_site.describe()}"
                    use = HOST_CALLBACK_USE
                elif location is None and seen.thread == main_thread:
                    # No line of the user's ran: the step is itself a jitted
                    # function, and JAX moved its arguments (setup's outputs).
                    location = self.step_location()
                    seen_by += ", while calling the step with setup's outputs"
                place = key_of(seen.direction, seen.explicit, location, seen.boundary, seen.thread)
                return place, seen_by, use

            places = [place_of(seen) for seen in log.observed]
            line_runs = _line_runs(
                [
                    (place, seen.segment)
                    for (place, _, _), seen in zip(places, log.observed, strict=True)
                ]
            )
            for seen, (place, seen_by, use), line_run in zip(
                log.observed, places, line_runs, strict=True
            ):
                described = self._described(place, line_run, seen)
                key = replace(place, dtype=described.dtype, shape=described.shape)
                guard_counts[key] += 1
                note(
                    key,
                    _Sighting(
                        seen_by,
                        argument=described.argument,
                        jitted_call=described.jitted_call,
                        undescribed=described.dtype is None,
                        host_use=use,
                    ),
                )
            detector_counts: Counter[Site] = Counter()
            for fetch in fetches.transfers if fetches is not None else ():
                if fetch.in_callback:
                    continue  # charged to the callback's own site below
                place = key_of(
                    fetch.direction, fetch.explicit, fetch.location, fetch.boundary, fetch.thread
                )
                key = replace(place, dtype=fetch.dtype, shape=fetch.shape)
                detector_counts[key] += 1
                self.detector_seen[key] += 1
                note(
                    key,
                    _Sighting(f"the gate's detector: {_host_use(fetch.what)}", host_use=fetch.what),
                )
            counts = self._merge_witnesses(guard_counts, detector_counts)
            for site, times in ran.items():
                key = Site(Direction.DEVICE_TO_HOST, False, site.location, None, None, None, None)
                counts[key] += times
                first_seen.setdefault(key, len(first_seen))
                details[key] = _Sighting(
                    f"host callback {site.describe()}", host_use=HOST_CALLBACK_USE
                )
            per_run.append(counts)
        for key in sorted(details, key=lambda k: (*_site_order(k), first_seen[k])):
            sighting = details[key]
            count = max(counts[key] for counts in per_run)
            if count == 0:
                continue  # an undescribed sighting the detector's array took over every run
            self.transfers.append(self._site_transfer(key, sighting, phase, count))

    def _step_plan(self, inputs: Inputs) -> CallPlan | None:
        """What a jitted step moves of setup's outputs, by parameter; None if not jitted."""
        step = self.callables.step
        if not is_jitted(step):
            return None
        args, kwargs = inputs
        try:
            return plan_call(step, args, kwargs)
        except Exception:  # naming is a nicety: never let it break the run
            return None

    def _described(self, place: Site, line_run: _LineRun, seen: Observed) -> _Described:
        """Which array a guard line moved: its own description, else the same move's earlier one.

        JAX's fast path (warm calls) logs a move with an empty description,
        in the same order as the slow path (the first call) described them;
        so the n-th move of the k-th run of a line in a step is the n-th the
        first call described there (a loop runs its line k times, each with
        its own arrays); a run the first call did not describe (a loop whose
        later turns were already warm) takes the nearest earlier described
        run's. Only a run of the line that moved as many values as the
        described one borrows its arrays: a different count means other moves
        (a one-time upload the first call made, say), and those stay
        undescribed rather than take another array's name.
        """
        slot = (place, line_run.number, seen.index)
        if seen.dtype is not None:
            own = _Described(seen.dtype, seen.shape, seen.argument, seen.jitted_call)
            self.described.setdefault(slot, own)
            self.described_sizes.setdefault((place, line_run.number), line_run.size)
            return own
        earlier = next(
            (
                self.described[(place, number, seen.index)]
                for number in range(line_run.number, -1, -1)
                if self.described_sizes.get((place, number)) == line_run.size
                and (place, number, seen.index) in self.described
            ),
            None,
        )
        if earlier is None:
            return _Described(None, None, seen.argument, seen.jitted_call)
        return earlier._replace(
            argument=seen.argument or earlier.argument,
            jitted_call=seen.jitted_call or earlier.jitted_call,
        )

    @contextmanager
    def _detector(self) -> Iterator[FetchLog | None]:
        """The device-to-host detector for one run, or None where it cannot run."""
        with ExitStack() as stack:
            log = None
            if self.detector_missing is None:
                try:
                    log = stack.enter_context(detect_fetches(self.code, self.monitor.current))
                except DetectorUnavailable as exc:  # raised before anything was patched
                    self.detector_missing = str(exc)
            yield log

    def _merge_witnesses(self, guard: Counter[Site], detector: Counter[Site]) -> Counter[Site]:
        """One count per site; where the guard and the detector disagree, say so.

        The guard sees device-to-host only on GPU and TPU; there both watch
        the same fetches and should agree, so a site only one of them saw
        is worth a note (and still counts). A guard line JAX left undescribed
        at a line where the detector saw exactly one array is that array's.
        """
        guard = Counter(guard)
        arrays: dict[Site, list[Site]] = {}
        for key in detector:
            arrays.setdefault(key.place, []).append(key)
        for key in [k for k in guard if not k.described]:
            seen = arrays.get(key.place, [])
            if key.direction is Direction.DEVICE_TO_HOST and len(seen) == 1:
                guard[seen[0]] += guard.pop(key)
        merged = Counter(guard)
        for key, count in detector.items():
            merged[key] = max(merged[key], count)
        if self.platform is not None and self.platform.platform in ("gpu", "tpu"):
            fetch_sites = {k for k in merged if k.direction is Direction.DEVICE_TO_HOST}
            for key in sorted(fetch_sites, key=_site_order):
                if guard[key] != detector[key]:
                    where = str(key.location) if key.location else "an unknown line"
                    self.disagreements.add(
                        f"device-to-host at {where}: JAX's guard saw {guard[key]}, "
                        f"the gate's detector saw {detector[key]}"
                    )
        return merged

    def _join_step_threads(self, before: set[threading.Thread]) -> None:
        """Wait for the threads the step started, while the map still watches.

        A transfer a background thread makes after the step returned would
        otherwise never be seen; a thread still running after the grace
        period makes the region an error rather than an unwatched pass.
        """
        deadline = time.monotonic() + THREAD_GRACE_S
        started = [t for t in threading.enumerate() if t not in before]
        for thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in started if t.is_alive()]
        if alive:
            names = ", ".join(alive)
            raise RegionAbort(
                RegionError(
                    ErrorKind.STEP,
                    f"the step left thread(s) {names} running {THREAD_GRACE_S:g} s after it "
                    "returned; the gate cannot watch transfers they make later: join them "
                    "before the step returns",
                    f"threads still alive after the step: {names}",
                    self.step_location(),
                )
            )

    def fetches_between_runs(self, log: FetchLog, threads_before: set[str]) -> None:
        """Fetches by other threads that no mapped run saw: they happened between runs.

        The main thread's fetches between runs are the warm-up's, seen again
        in the mapped runs; another thread's are work the step handed on.
        """
        main_thread = threading.current_thread().name
        extra: Counter[Site] = Counter()
        found: dict[Site, Any] = {}
        for fetch in log.transfers:
            if fetch.thread == main_thread or fetch.in_callback:
                continue
            key = Site(
                fetch.direction,
                fetch.explicit,
                fetch.location,
                fetch.boundary,
                _thread_label(fetch.thread),
                fetch.dtype,
                fetch.shape,
            )
            extra[key] += 1
            found[key] = fetch
        for key in sorted(extra, key=_site_order):
            unseen = extra[key] - self.detector_seen[key]
            if unseen <= 0:
                continue
            fetch = found[key]
            older = fetch.thread in threads_before
            origin = (
                "a thread that was already running when this region started (work handed to "
                "it by this region, or left by an earlier one)"
                if older
                else "a thread the step started"
            )
            seen_by = (
                f"the gate's detector: {_host_use(fetch.what)}, {unseen}x between the "
                f"watched runs, in {origin}"
            )
            sighting = _Sighting(seen_by, host_use=fetch.what)
            self.transfers.append(self._site_transfer(key, sighting, Phase.STEADY_STATE, 1))

    def _site_transfer(self, key: Site, sighting: _Sighting, phase: Phase, count: int) -> Transfer:
        """The record of one site, judged by the region's levels."""
        return Transfer(
            direction=key.direction,
            explicit=key.explicit,
            dtype=key.dtype,
            shape=key.shape,
            location=key.location,
            phase=phase,
            failing=self._fails(key.direction, key.explicit, key.boundary),
            message=sighting.seen_by,
            boundary=key.boundary,
            count=count,
            source=self._source_line(key.location),
            thread=key.thread,
            argument=sighting.argument,
            jitted_call=sighting.jitted_call,
            host_use=sighting.host_use,
            undescribed=sighting.undescribed,
        )

    def loosened(self, what: str, frame: types.FrameType) -> None:
        """The step tried to change the guard itself: ignored, and said."""
        where = f"{self.code.relative(frame.f_code.co_filename)}:{frame.f_lineno}"
        self.warnings[
            f"{where}: the step calls {what}; the gate ignored it while watching (the "
            "policy's guard levels decide), so what moves there is judged like the rest"
        ] = None

    def step_location(self) -> SourceLocation | None:
        """Where the step is defined (through ``jax.jit``'s ``__wrapped__``), if it is Python."""
        code = getattr(inspect.unwrap(self.callables.step), "__code__", None)
        if code is None or not self.code.is_user(code.co_filename):
            return None
        line = code.co_firstlineno
        # co_firstlineno is the first decorator's line; name the `def` itself.
        for offset in range(20):
            text = linecache.getline(code.co_filename, line + offset).lstrip()
            if text.startswith(("def ", "async def ")):
                line += offset
                break
        return SourceLocation(self.code.relative(code.co_filename), line, code.co_name)

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
        frames = [f for f in frames_of(exc.__traceback__) if not is_trampoline_frame(f.filename)]
        callee = self.code.callee_after_user(frames)
        explicit = (
            callee is not None
            and callee.name in EXPLICIT_ENTRY_POINTS
            and f"{Path('jax', '_src')}" in callee.filename
        )
        boundary = self._boundary_in(frames)
        location = self.code.locate(frames) or self.step_location()
        return Transfer(
            direction=violation.direction,
            explicit=explicit,
            dtype=violation.dtype,
            shape=violation.shape,
            location=location,
            phase=phase,
            failing=self._fails(violation.direction, explicit, boundary),
            message="JAX's guard, refusing the transfer: "
            + (str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__),
            boundary=boundary,
            source=self._source_line(location),
        )

    def _boundary_in(self, frames: list[traceback.FrameSummary]) -> str | None:
        by_code = {
            (code.co_filename, code.co_name): name
            for code, name in self.callables.boundary_codes.items()
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
        if _buffer_export_refused(exc):
            summary += (
                " (the gate turns off device arrays' buffer export while it watches "
                "device-to-host reads, so memoryview(x), bytes(x) and np.frombuffer(x) raise "
                "under it; read the value with np.asarray(x), which the gate sees, or "
                "jax.device_get(x) at a declared boundary)"
            )
        user_tb = user_frames_text(self.code, frames)
        full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        details = (
            f"Traceback (your code):\n{user_tb}{summary}\n\nFull traceback:\n{full}"
            if user_tb
            else full
        )
        return RegionError(kind, summary, details, self.code.locate(frames))


def _buffer_export_refused(exc: BaseException) -> bool:
    """A TypeError from reading a jax array through the buffer protocol, which
    `gate.witness.detector` switches off while it watches."""
    text = str(exc)
    return (
        isinstance(exc, TypeError)
        and "ArrayImpl" in text
        and ("bytes-like object" in text or "buffer" in text or "to bytes" in text)
    )


def _explicit_functions(jax: Any) -> tuple[Callable[..., Any], ...]:
    """The explicit-transfer functions this JAX version has (some are deprecated away)."""
    found = []
    for name in sorted(EXPLICIT_ENTRY_POINTS):
        try:
            found.append(getattr(jax, name))
        except AttributeError:
            continue
    return tuple(found)


# What the host did with a fetched value, by the array method it went through.
_HOST_USES = {
    "__str__": "printed or turned into a string (print, str)",
    "__repr__": "repr'd (repr, or print of a container)",
    "__format__": "formatted (an f-string or format())",
    "__float__": "converted with float()",
    "__int__": "converted with int()",
    "__index__": "used as an index",
    "__bool__": "tested for truth (if x, bool(x), and/or)",
    "__array__": "read by NumPy (np.asarray, np.array, a NumPy function)",
    "__iter__": "iterated over",
    "tolist": "converted with .tolist()",
    "item": "converted with .item()",
    "device_get": "fetched with jax.device_get",
    "copy_to_host_async": "copied to the host with copy_to_host_async()",
}


def _host_use(what: str) -> str:
    return _HOST_USES.get(what, f"read through {what}")


def _user_threads_alive() -> bool:
    """Threads besides the main one and the worker's own ("gate-...") are running."""
    main = threading.main_thread()
    return any(
        t is not main and not t.name.startswith("gate-") and t.is_alive()
        for t in threading.enumerate()
    )


def _thread_label(name: str) -> str:
    """A thread's name without the counter that changes every run ("Thread-7 (worker)")."""
    return re.sub(r"^Thread-\d+\s*", "", name).strip("()") or "thread"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


class _Sighting(NamedTuple):
    """What the witnesses said about one site, besides counting it."""

    seen_by: str
    argument: str | None = None
    jitted_call: str | None = None
    host_use: str | None = None
    undescribed: bool = False


class _LineRun(NamedTuple):
    """One run of a line within a step: the how-many-th, and how many moves it made."""

    number: int
    size: int


def _line_runs(moves: list[tuple[Site, int]]) -> list[_LineRun]:
    """Per guard line of one step, ``(place, stretch)``, the run of its line it belongs to.

    A stretch is one run of a line (`gate.witness.transfer_map`); the k-th distinct
    stretch seen at a place is that line's k-th run in the step.
    """
    sizes = Counter(moves)
    numbers: dict[tuple[Site, int], int] = {}
    runs_at: Counter[Site] = Counter()
    found = []
    for place, stretch in moves:
        number = numbers.get((place, stretch))
        if number is None:
            number = numbers[(place, stretch)] = runs_at[place]
            runs_at[place] += 1
        found.append(_LineRun(number, sizes[(place, stretch)]))
    return found


class _Described(NamedTuple):
    dtype: str | None
    shape: tuple[int, ...] | None
    argument: str | None
    jitted_call: str | None


def _site_order(key: Site) -> tuple[str, int, str, bool]:
    where = key.location
    return (
        where.path if where else "~",
        where.line if where else 0,
        key.direction.value,
        key.explicit,
    )


def is_array_leaf(leaf: Any) -> bool:
    """A leaf the gate blocks on, times and checks; any other leaf is ignored.

    Models carry more than arrays: an equinox module's activation functions
    (``custom_jvp`` objects), static fields, strings. NumPy arrays of Python
    objects are no data either (and ``np.savez`` could only pickle them).
    """
    import jax
    import numpy as np

    if isinstance(leaf, jax.Array):
        return True
    if isinstance(leaf, np.ndarray | np.generic):
        return not leaf.dtype.hasobject
    return isinstance(leaf, int | float | complex)


def host_leaves(outputs: Any) -> tuple[Any, Leaves]:
    """The outputs with their array leaves fetched to the host, explicitly, and
    those leaves as NumPy arrays with their paths (``jax.tree_util.keystr``).

    Non-array leaves stay in the host copy as they were (a custom check gets
    the whole model back) and are left out of the leaves: writing a
    reference and comparing with one see the same list.
    """
    import jax

    flat, treedef = jax.tree_util.tree_flatten_with_path(outputs)
    values = [value for _, value in flat]
    kept = [i for i, value in enumerate(values) if is_array_leaf(value)]
    for i, value in zip(kept, jax.device_get([values[i] for i in kept]), strict=True):
        values[i] = value
    leaves = [(jax.tree_util.keystr(flat[i][0]), _numpy_of(values[i])) for i in kept]
    return jax.tree_util.tree_unflatten(treedef, values), leaves


def _numpy_of(value: Any) -> Any:
    """A fetched leaf as NumPy; a typed PRNG key (an NNX model's ``Rngs``) as its key data."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    dtype = getattr(value, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)


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
            with _watching_reads(code):  # a module that reads an array at import caches it
                callables = import_region(policy, region)
        except ResolveError as exc:
            return result(error=RegionError(ErrorKind.IMPORT, str(exc), str(exc)))
        return _run_imported(RegionRun(policy, region, code, callables), result)


@contextmanager
def _watching_reads(code: UserCode) -> Iterator[None]:
    """The detector around code outside any run, only to mark what it reads as host-cached."""
    with ExitStack() as stack:
        with suppress(DetectorUnavailable):  # the region's own detector will say why
            stack.enter_context(detect_fetches(code, lambda: None))
        yield


@functools.cache
def platform_info() -> PlatformInfo:
    """What JAX runs on in this process; fixed once JAX has started."""
    return detect_platform()


def _coverage(run: RegionRun, can_map: bool) -> tuple[tuple[str, CoverageJudge], ...]:
    """Per direction, what judged it: JAX's guard, the gate's detector, or nothing."""
    assert run.platform is not None
    # The detector watches the mapped runs only; without a map it did not run.
    active = can_map and run.detector_missing is None
    found = direction_coverage(run.platform, detector_active=active)
    return tuple((direction.label, judge) for direction, judge in found.items())


def _notes(run: RegionRun, can_map: bool, callbacks_missing: str | None) -> list[str]:
    notes = []
    if not can_map:
        notes.append(
            "JAX's transfer-guard log did not reach the gate (TF_CPP_MIN_LOG_LEVEL read before "
            "the gate could set it, or jax_logging_level / JAX_LOGGING_LEVEL raised above "
            "WARNING and not resettable here), so there is no transfer map: the region "
            "was judged with the guard in disallow mode, which shows only the first transfer "
            "of each run."
        )
    if run.detector_missing is not None:
        notes.append(f"device-to-host detector unavailable: {run.detector_missing}")
    if callbacks_missing is not None:
        notes.append(f"host callbacks not counted: {callbacks_missing}")
    where = run.platform.describe() if run.platform else "this platform"
    for direction, judge in _coverage(run, can_map):
        if judge is CoverageJudge.NOT_CHECKED:
            notes.append(
                f"{direction} transfers were NOT checked on {where}: "
                "this region's pass says nothing about them"
            )
    notes.extend(sorted(run.disagreements))
    notes.extend(run.warnings)
    return notes


def _run_imported(run: RegionRun, result: Callable[..., RegionResult]) -> RegionResult:
    import jax

    region = run.region
    run.platform = platform_info()
    base = {"platform": run.platform.describe()}
    wrong_platform = check_required(run.policy.platform, run.platform)
    if wrong_platform is not None:
        return result(error=RegionError(ErrorKind.PLATFORM, wrong_platform, wrong_platform), **base)
    can_map = capture_works()
    callbacks_missing: str | None = None
    # Forget compiled calls from earlier regions, so that this region's first
    # call takes the slow path where JAX checks every move.
    jax.clear_caches()
    checks: tuple[CheckOutcome, ...] = ()
    try:
        with (
            full_tracebacks(),
            run.monitor.installed(run.callables.boundaries),
            guard_kept_by_the_gate(run.code.is_user, run.loosened),
        ):
            threads_before = {t.name for t in threading.enumerate()}
            # The detector also watches between the runs: a thread that lives
            # beyond the step (a logger fed through a queue) fetches when it
            # likes, and those fetches fall outside every mapped run.
            with run._detector() as background:
                with ExitStack() as counting:
                    try:
                        run.callbacks = counting.enter_context(count_callbacks(run.code))
                    except CallbackHookMissing as exc:
                        callbacks_missing = str(exc)
                    if can_map:
                        run.mapped_calls(Phase.FIRST_CALL, 1)
                    else:
                        run.guarded_call(Phase.FIRST_CALL)
                    for _ in range(region.warmup):
                        run.unguarded_call()
                    if can_map:
                        run.mapped_calls(Phase.STEADY_STATE, region.guarded_runs)
                run.callbacks = None
                # JAX's own verdict, once in steady state (every run without a
                # map): a transfer the map somehow missed still fails the region.
                for _ in range(1 if can_map else region.guarded_runs):
                    run.guarded_call(Phase.STEADY_STATE)
                if background is not None and _user_threads_alive():
                    # Work handed to a living thread may still be on its way.
                    time.sleep(SETTLE_S)
            if background is not None:
                run.fetches_between_runs(background, threads_before)
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
        return result(
            transfers=tuple(run.transfers),
            error=abort.error,
            notes=tuple(_notes(run, can_map, callbacks_missing)),
            coverage=_coverage(run, can_map),
            **base,
        )
    coverage = _coverage(run, can_map)
    return result(
        transfers=tuple(run.transfers),
        timing=summarize(samples),
        boundaries=costs,
        checks=checks,
        notes=tuple(_notes(run, can_map, callbacks_missing)),
        coverage=coverage,
        error=_unchecked(run, coverage),
        **base,
    )


def _unchecked(
    run: RegionRun, coverage: tuple[tuple[str, CoverageJudge], ...]
) -> RegionError | None:
    """An error when the policy disallows a direction that nothing could check.

    A pass would claim what nobody saw. The fix is the user's choice: a
    platform where it can be checked, or a policy that says it may go unchecked.
    """
    blind = [
        label
        for label, judge in coverage
        if judge is CoverageJudge.NOT_CHECKED
        and run.region.guard.level(Direction.from_label(label)).fails_implicit
    ]
    if not blind:
        return None
    where = run.platform.describe() if run.platform else "this platform"
    why = run.detector_missing or "the guard's log did not reach the gate (no transfer map)"
    keys = ", ".join(f"{label.replace('-', '_')}: allow" for label in blind)
    message = (
        f"{', '.join(blind)} transfers could not be checked on {where} ({why}), and the "
        f"policy disallows them; run where they can be checked, or accept the gap with "
        f"`guard: {{{keys}}}`"
    )
    return RegionError(ErrorKind.UNCHECKED, message, message)
