"""Running regions in worker processes, so one broken region takes down only itself.

The gate's own process runs no region. It starts a worker (`gate.isolation.worker`) that imports
jax once, sends it one region at a time and waits for each result with the region's
``timeout_s``. A healthy worker runs the next region too: importing jax and starting its backend
costs ~0.6 s on CPU and seconds on a GPU (`benchmarks/worker_overhead.py` measures it). When a
worker crashes (SIGSEGV, abort, the OOM killer), runs past the timeout or the run is cancelled,
the region becomes an error saying what happened, with the worker's Python stack and last output
lines, and the next region gets a fresh worker.

Each worker runs in a session of its own: Ctrl-C at a terminal reaches only the gate, which
decides what to stop, and killing the worker's process group also stops anything the code under
test started. The worker's stdout and stderr go through one pipe that a thread here drains all
the time (a full pipe would block the worker), keeping the last lines for error messages and
handing every line to the run's watcher (`gate.isolation.watcher`) with the region's name, so
what a step prints still reaches the CI log; the watcher also hears each stage a region enters,
for the live line. Starting a worker (early, on a device of the pool, again while another
process holds the device) is `gate.isolation.worker_start`'s.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gate.isolation.cancellation import (
    Cancellation,
    cancel_reason,
    cancelled_before,
    cancelled_running,
)
from gate.isolation.environment import worker_environment
from gate.isolation.lost_region import how_it_ended, lost_region_error, seconds
from gate.isolation.protocol import (
    Check,
    Checked,
    Done,
    Entered,
    Fetch,
    Fetched,
    Go,
    Job,
    Message,
    Reached,
    Request,
    Timed,
    Trace,
    Traced,
    Turn,
    Turns,
)
from gate.isolation.run_settings import DEFAULT_SETTINGS, RunSettings
from gate.isolation.watcher import BETWEEN_REGIONS, RunWatcher
from gate.isolation.worker_process import WaitEvent, WorkerProcess
from gate.isolation.worker_start import START_ATTEMPTS, WorkerStarts
from gate.plan import region_key
from gate.policy.model import NamedCallables, Policy, Region
from gate.region.cores import usable_cpus
from gate.results.comparison import StepOutputs, StepSamples
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.line_times import OpTimes
from gate.results.records import RegionResult
from gate.user_code import UserCode

# Re-exported for other subsystems: mypy's strict mode accepts a re-export only when listed.
__all__ = [
    "Checked",
    "Scheduler",
    "Turn",
    "usable_cpus",
    "worker_environment",
]

# After a job's reply, how long its last output lines may take to be read (they come on another
# pipe, marked at their end): then the region's output is complete when its row is written.
_OUTPUT_LAG_S = 1.0
# While a job waits for its cue (`TimingCue`), how often its clock is stopped and looked at again.
_CUE_POLL_S = 0.05


# -- the scheduler ---------------------------------------------------------------


@dataclass(frozen=True)
class _Running:
    """A region in flight, for the error if it is lost."""

    policy: Policy
    region: Region
    started: float  # time.monotonic()
    mark: int  # the worker's output count when it started

    @property
    def label(self) -> str:
        return region_key(self.policy, self.region)

    def result(self, error: RegionError) -> RegionResult:
        return RegionResult.of(
            self.policy, self.region, wall_s=time.monotonic() - self.started, error=error
        )


class TimingCue:
    """When a job's timed runs may start (`Job.times_after_go`): given once, from any thread
    (``run --base`` gives it as the base's run beside the head's ends); what waits for it
    runs then, or at once where it was given already, whichever comes first.

    ``reached``: the job sends `Reached` as its first call starts (`Job.reports_reach`), and
    this hears its paths, in the thread that waits for the job: where the change reached
    none, it gives the cue; otherwise it starts the base's run (`hold`), which gives it as it
    ends."""

    def __init__(self, reached: Callable[[tuple[str, ...]], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._given = False
        # The base's run is under way beside the job: from the start, or once `reached` starts it.
        self._held = reached is None
        self._waiting: list[Callable[[], object]] = []
        self.reached = reached

    @property
    def holds(self) -> bool:
        """Whether the job's clock stands still (`Scheduler._wait`): the base's run beside it is
        under way, and the cue not given yet. Never before then: the job's own import and
        inputs, until `Reached`, are the job's time, and a job that hangs there times out."""
        with self._lock:
            return self._held and not self._given

    def hold(self) -> None:
        """The base's run has started beside the job, after `reached`: the job's clock stands
        still until the cue is given."""
        with self._lock:
            self._held = True

    @property
    def given(self) -> bool:
        with self._lock:
            return self._given

    def give(self) -> None:
        with self._lock:
            self._given = True
            waiting, self._waiting = self._waiting, []
        for then in waiting:
            then()

    def on_given(self, then: Callable[[], object]) -> None:
        with self._lock:
            if not self._given:
                self._waiting.append(then)
                return
        then()


class RegionBudgets:
    """The seconds each region has taken so far, over every request for it, in both trees'
    workers (``run --base``: its run, its timed turns, its traced runs): ``timeout_s`` bounds
    the region in all, as the policy says, not each request. Shared by the schedulers of one
    comparison; regions compared at once in threads each have their own entry."""

    def __init__(self) -> None:
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()

    def left_s(self, label: str, limit_s: float) -> float:
        with self._lock:
            return limit_s - self._spent.get(label, 0.0)

    def spend(self, label: str, seconds: float) -> None:
        with self._lock:
            self._spent[label] = self._spent.get(label, 0.0) + seconds


class Scheduler:
    """Runs regions one at a time in a worker process, replacing it when it is lost.

    At most one worker is alive at any moment: a GPU or TPU is held by one process (a TPU
    chip admits one; a GPU's memory is one pool), so a worker is gone, reaped, before the
    next one starts, whatever ended it. Its workers run the code of the tree at ``repo_root``
    (``run --base`` runs the base's regions from a scheduler of its own, `gate.compare.session`);
    a region's policy with another ``env:`` gets a fresh worker. Use as a context manager:
    leaving it stops the worker.
    """

    def __init__(
        self,
        repo_root: Path,
        *,
        cancel: Cancellation | None = None,
        watcher: RunWatcher | None = None,
        environ: Mapping[str, str] | None = None,
        settings: RunSettings = DEFAULT_SETTINGS,
        beside: bool = False,
        moved_paths: tuple[tuple[Path, Path], ...] = (),
        audited: bool = False,
    ) -> None:
        """``settings``: the run's, sent with each job (`Job.settings`), never in a worker's
        environment (the worker the CLI started first has none, `gate.isolation.spawn`);
        ``beside``: its worker runs beside another scheduler's, which holds the device
        (``run --base``'s base tree, `WorkerStarts.beside`); ``moved_paths``: folders of the
        head's checkout its worker takes in its own tree (`Job.moved_paths`); ``audited``: its
        workers' audit hook listens from their first request (`Job.audited`)."""
        self.repo_root = repo_root
        self.moved_paths = moved_paths
        self.audited = audited
        self.cancel = cancel
        self.watcher = watcher
        self.settings = settings
        self.environ = dict(os.environ if environ is None else environ)
        self._starts = WorkerStarts(
            repo_root, self.environ, watcher, cancel, self.announce, beside=beside
        )
        self.startups = self._starts.startups  # every worker started, for benchmarks and tests
        self._worker: WorkerProcess | None = None
        self._jobs = itertools.count(1)
        self._paused_s = 0.0  # how long the request now in flight waited for its cue (`_wait`)
        # Set by ``run --base`` (`gate.compare.session`): each region's requests in both
        # trees draw on one ``timeout_s``. None: each request has the region's whole timeout.
        self.budgets: RegionBudgets | None = None

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker, if any, and wait until it is gone."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
        self._starts.stop_early()

    def environment(self, policy: Policy | None) -> dict[str, str]:
        """The environment a worker for ``policy``'s regions starts with (None: no policy's)."""
        return worker_environment(self.environ, policy)

    def start_early(self, policy: Policy) -> None:
        """Start the worker ``policy``'s regions will run in, without waiting for it to be
        ready: the gate's own work overlaps its start-up. Not when it would have to wait for
        a device: the first request does that, saying so."""
        if self._worker is None:
            self._starts.start_early(self.environment(policy))

    def check(self, policies: Sequence[Policy], named: Sequence[NamedCallables] = ()) -> Checked:
        """Import every callable of ``policies`` (one ``env:``) and of ``named`` from this
        scheduler's tree, in the worker their regions will run in.

        Raises `WorkerUnavailable` when no worker could take the request, and RuntimeError
        for a gate bug in the worker (its traceback in the message).
        """
        # The live line shows the worker starting for the first region it will run.
        firsts = [region_key(p, p.regions[0]) for p in policies if p.regions]
        label = firsts[0] if firsts else BETWEEN_REGIONS
        env = self.environment(policies[0] if policies else None)
        number = next(self._jobs)
        request = Check(number, self.repo_root, tuple(policies), tuple(named), self.audited)
        timeout = max((r.timeout_s for p in policies for r in p.regions), default=600.0)
        for _ in range(START_ATTEMPTS):  # a worker that could not start gets one successor
            reply = self._request(request, env, label, timeout)
            if not isinstance(reply, RegionError) or self._worker is not None:
                break
        if isinstance(reply, RegionError):
            raise WorkerUnavailable(reply)
        if not isinstance(reply, Checked):
            raise RuntimeError(f"worker answered check {number} with {reply!r:.300}")
        if reply.fault is not None:
            raise RuntimeError(reply.fault)
        return reply

    def run(self, policy: Policy, region: Region, tree: str | None = None) -> RegionResult:
        """Run ``region`` in the worker; a lost worker makes it an error, never an exception."""
        result, _ = self._dispatch(policy, region, tree, hold=False, outputs=False)
        return result

    def run_held(
        self,
        policy: Policy,
        region: Region,
        tree: str | None = None,
        footprint_top: Path | None = None,
        *,
        cue: TimingCue | None = None,
    ) -> tuple[RegionResult, StepOutputs | None]:
        """`run`, and the worker keeps the region loaded for `time_turns`; with the result,
        its outputs on the host (None when it did not run to its end). The worker holds one
        region: the next job lets it go. ``footprint_top``: record the region's footprint
        under this git top level (`Job.footprint_top`), and leave the outputs in the worker
        until `fetch_outputs` asks (`Job.fetch_later`): the reply has None for them.
        ``cue``: its timed runs wait for it to be given (`Job.times_after_go`)."""
        return self._dispatch(
            policy,
            region,
            tree,
            hold=True,
            outputs=True,
            top=footprint_top,
            cue=cue,
        )

    def run_footprinted(
        self, policy: Policy, region: Region, tree: str | None, footprint_top: Path
    ) -> RegionResult:
        """`run`, recording the region's footprint under ``footprint_top`` (`Job.footprint_top`):
        let go of as it ends, as in a plain run, and untraced (its step times are compared with
        nothing: a region compared after all runs again, held, `run_held`). Its time is not
        taken from the region's budget (`budgets`): ``timeout_s`` bounds this run, and then
        bounds in all the runs a comparison needs, as without it."""
        result, _ = self._dispatch(
            policy,
            region,
            tree,
            hold=False,
            outputs=False,
            top=footprint_top,
            traced=False,
            budgeted=False,
        )
        return result

    def run_for_outputs(
        self,
        policy: Policy,
        region: Region,
        tree: str | None = None,
        footprint_top: Path | None = None,
        *,
        cue: TimingCue | None = None,
    ) -> tuple[RegionResult, StepOutputs | None]:
        """`run`, with the region's outputs on the host (None when it did not run to its end);
        ``footprint_top`` and ``cue`` as in `run_held`."""
        return self._dispatch(
            policy,
            region,
            tree,
            hold=False,
            outputs=True,
            top=footprint_top,
            cue=cue,
        )

    def _dispatch(
        self,
        policy: Policy,
        region: Region,
        tree: str | None,
        *,
        hold: bool,
        outputs: bool,
        top: Path | None = None,
        cue: TimingCue | None = None,
        traced: bool = True,
        budgeted: bool = True,
    ) -> tuple[RegionResult, StepOutputs | None]:
        running = _Running(policy, region, time.monotonic(), 0)
        if self.cancel is not None and self.cancel.requested:
            return running.result(cancelled_before(self.cancel)), None
        job = Job(
            next(self._jobs),
            policy,
            region,
            self.repo_root,
            hold,
            outputs,
            self.settings if traced else self.settings.untraced(),
            self.moved_paths,
            top,
            self.audited,
            times_after_go=cue is not None,
            # Only a job that records its footprint can say what it reached: any other would
            # leave the cue to its end, its timed runs waiting for a Go that never came.
            reports_reach=cue is not None and cue.reached is not None and top is not None,
        )
        limit = region.timeout_s
        reply = self._request(
            job,
            self.environment(policy),
            running.label,
            limit,
            tree,
            limit_s=limit if budgeted else None,
            cue=cue,
        )
        if isinstance(reply, RegionError):
            return running.result(reply), None
        if isinstance(reply, Done) and reply.number == job.number:
            return reply.result, reply.outputs
        raise RuntimeError(f"worker answered job {job.number} with {reply!r:.300}")

    def time_turns(
        self,
        policy: Policy,
        region: Region,
        turns: Sequence[Turn],
        *,
        tree: str | None = None,
    ) -> tuple[StepSamples, ...]:
        """The timed runs of ``turns``, one `StepSamples` each, by the worker that holds the
        region (`run_held`). A worker lost meanwhile (crash, timeout, cancellation) is the
        error of the turn it was on."""
        if self._worker is None:
            error = RegionError(
                ErrorKind.CRASH, "the worker that ran this region is gone; nothing to time", ""
            )
            return (StepSamples((), error=error),)
        request = Turns(next(self._jobs), tuple(turns))
        label = region_key(policy, region)
        # Each turn may take up to the region's timeout, as one run of it may.
        timeout = region.timeout_s * max(1, len(turns))
        reply = self._request(
            request, self._worker.env, label, timeout, tree, start=False, limit_s=region.timeout_s
        )
        if isinstance(reply, RegionError):
            return (StepSamples((), error=reply),)
        if isinstance(reply, Timed) and reply.number == request.number:
            return reply.samples
        raise RuntimeError(f"worker answered turns {request.number} with {reply!r:.300}")

    def trace_held(
        self, policy: Policy, region: Region, *, tree: str | None = None
    ) -> OpTimes | None:
        """The traced runs of the region the worker holds (`run_held`): its `OpTimes`, None
        where it has none; a worker lost meanwhile is a note in them."""
        request = Trace(next(self._jobs))
        reply = self._ask_holder(request, policy, region, tree)
        if isinstance(reply, RegionError):
            return OpTimes.not_traced(reply.message)
        if isinstance(reply, Traced) and reply.number == request.number:
            return reply.times
        raise RuntimeError(f"worker answered trace {request.number} with {reply!r:.300}")

    def fetch_outputs(
        self, policy: Policy, region: Region, *, tree: str | None = None
    ) -> StepOutputs | RegionError:
        """The outputs the worker kept of the region it last ran with a footprint
        (`run_held`, `run_for_outputs`), on the host; or the error that kept them from it
        (the user's setup failing as it repeats, a worker lost meanwhile)."""
        request = Fetch(next(self._jobs))
        reply = self._ask_holder(request, policy, region, tree)
        if isinstance(reply, RegionError):
            return reply
        if isinstance(reply, Fetched) and reply.number == request.number:
            if reply.error is not None:
                return reply.error
            if reply.outputs is None:
                return gate_fault("comparing with the base: the head's outputs were not kept")
            return reply.outputs
        raise RuntimeError(f"worker answered fetch {request.number} with {reply!r:.300}")

    def _ask_holder(
        self, request: Request, policy: Policy, region: Region, tree: str | None
    ) -> Message | RegionError:
        """``request``'s reply from the worker that ran ``region`` last, within its timeout;
        the worker gone is a crash."""
        if self._worker is None:
            return RegionError(ErrorKind.CRASH, "the worker that ran this region is gone", "")
        timeout = region.timeout_s
        label = region_key(policy, region)
        return self._request(
            request, self._worker.env, label, timeout, tree, start=False, limit_s=timeout
        )

    def _request(
        self,
        request: Request,
        env: dict[str, str],
        label: str,
        timeout_s: float,
        tree: str | None = None,
        *,
        start: bool = True,
        limit_s: float | None = None,
        cue: TimingCue | None = None,
    ) -> Message | RegionError:
        """``request``'s reply from a worker started with ``env`` (started, or replaced by
        one, if need be); or the error that says why none came (the worker is then gone).

        ``limit_s``: the region's ``timeout_s``; with `budgets`, the request waits no longer
        than what is left of it after the region's earlier requests, in either tree."""
        if self._worker is not None and (self._worker.env != env or self._worker.exited()):
            self.close()
        budgets = self.budgets if limit_s is not None else None
        in_all: float | None = None
        if budgets is not None and limit_s is not None:
            left = budgets.left_s(label, limit_s)
            if left < timeout_s:
                timeout_s, in_all = max(left, 0.0), limit_s
            if left <= 0:
                return _out_of_time(limit_s)
        began = time.monotonic()
        self._paused_s = 0.0
        try:
            return self._send_and_wait(
                request, env, label, timeout_s, tree=tree, start=start, in_all=in_all, cue=cue
            )
        except BaseException:
            # A gate bug: leave no worker behind, and start afresh next time.
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.stop(dump=False)
            raise
        finally:
            if budgets is not None:  # a job's wait for its cue is the base's time, paid there
                budgets.spend(label, time.monotonic() - began - self._paused_s)

    def _send_and_wait(
        self,
        request: Request,
        env: dict[str, str],
        label: str,
        timeout_s: float,
        *,
        tree: str | None,
        start: bool,
        in_all: float | None = None,
        cue: TimingCue | None = None,
    ) -> Message | RegionError:
        worker: WorkerProcess | None = None
        mark = 0
        for attempt in range(2):
            if self._worker is None:
                if not start:
                    return RegionError(
                        ErrorKind.CRASH, "the worker that ran this region is gone", ""
                    )
                started = self._starts.start(label, env, timeout_s, tree)
                if isinstance(started, RegionError):
                    return started
                self._worker = started
            worker = self._worker
            assert worker is not None
            mark = worker.output.count
            worker.output.start_job(request.number, label)
            if worker.send(request):
                if cue is not None:  # now, or once given, from the thread that gives it
                    cue.on_given(functools.partial(worker.send, Go(request.number)))
                break
            # It died while idle, between regions: not this region's doing.
            self.close()
            if attempt:
                return self._lost(worker, mark, timeout_s, WaitEvent.EXITED)
        assert worker is not None
        event = self._wait(worker, time.monotonic() + timeout_s, label, tree, cue)
        if isinstance(event, WaitEvent):
            self._worker = None
            return self._lost(worker, mark, timeout_s, event, in_all)
        worker.output.wait_ended(request.number, _OUTPUT_LAG_S)
        return event

    def _lost(
        self,
        worker: WorkerProcess,
        mark: int,
        timeout_s: float,
        event: WaitEvent,
        in_all: float | None = None,
    ) -> RegionError:
        """Stop the worker that was running a region; the error says what happened
        (``in_all``: the region's ``timeout_s`` that ran out over its requests, not this one's
        own wait)."""
        returncode = worker.stop(dump=event is not WaitEvent.EXITED)
        worker.output.stop_jobs()
        if event is WaitEvent.EXITED and self._signalled_by_cancel(returncode):
            event = WaitEvent.CANCELLED
        fresh = "The regions after it run in a fresh worker."
        if event is WaitEvent.CANCELLED:
            kind = ErrorKind.CANCELLED
            message = cancelled_running(self.cancel).message
            headline = (
                f"The run was cancelled: {cancel_reason(self.cancel)} while this region was "
                "running. Its worker was stopped."
            )
        elif event is WaitEvent.TIMED_OUT and in_all is not None:
            kind = ErrorKind.TIMEOUT
            message = _out_of_time(in_all).message
            headline = (
                f"The region ran past its timeout_s of {seconds(in_all)} in all (its runs, timed "
                f"turns and traced runs in both trees), so its worker was stopped. {fresh}"
            )
        elif event is WaitEvent.TIMED_OUT:
            kind = ErrorKind.TIMEOUT
            message = f"still running after {seconds(timeout_s)} (timeout_s); stopped"
            headline = (
                f"The region was still running after its timeout_s of {seconds(timeout_s)}, "
                f"so its worker was stopped. {fresh}"
            )
        else:
            kind = ErrorKind.CRASH
            how = how_it_ended(returncode, worker.output.lines_since(mark))
            message = how.removeprefix("was ")
            headline = f"The worker process running this region {how}. {fresh}"
        code = UserCode(self.repo_root)
        lines = worker.output.lines_since(mark)
        crashed = event is WaitEvent.EXITED
        return lost_region_error(kind, message, headline, lines=lines, code=code, crashed=crashed)

    def announce(self, label: str, stage: str, tree: str | None = None) -> None:
        """Tell the watcher region ``label`` has entered ``stage`` (in which tree, if two)."""
        if self.watcher is not None:
            self.watcher.stage(label, f"{tree}: {stage}" if tree else stage)

    def _wait(
        self,
        worker: WorkerProcess,
        deadline: float,
        label: str,
        tree: str | None,
        cue: TimingCue | None = None,
    ) -> Message | WaitEvent:
        """The worker's next message but a stage, which goes to the watcher on the way.

        With ``cue``, the job's clock stands still while it holds (`_paused_s` says how long):
        the job's own runs then overlap the base's run, whose request pays for that time, and a
        base that is slow or hangs is the base's timeout, never this job's."""
        while True:
            if cue is not None and cue.holds:
                began = time.monotonic()
                event = worker.wait(began + _CUE_POLL_S, self.cancel)
                paused = time.monotonic() - began
                self._paused_s += paused
                deadline += paused
                if event is WaitEvent.TIMED_OUT:
                    continue
            else:
                event = worker.wait(deadline, self.cancel)
            if isinstance(event, Reached):
                if cue is not None and cue.reached is not None and not cue.given:
                    cue.reached(event.paths)
                continue
            if not isinstance(event, Entered):
                return event
            self.announce(label, event.stage, tree)

    def _signalled_by_cancel(self, returncode: int | None) -> bool:
        """A worker killed by SIGINT/SIGTERM: most likely the same signal is cancelling us."""
        if returncode not in (-signal.SIGINT, -signal.SIGTERM) or self.cancel is None:
            return False
        end = time.monotonic() + 0.5
        while not self.cancel.requested and time.monotonic() < end:
            time.sleep(0.01)
        return self.cancel.requested


class WorkerUnavailable(Exception):
    """No worker could take a request that is not a region's (a policy check): why not."""

    def __init__(self, error: RegionError) -> None:
        super().__init__(error.message)
        self.error = error


def _out_of_time(limit_s: float) -> RegionError:
    """A region whose ``timeout_s`` ran out over its requests in both trees (``run --base``)."""
    message = (
        f"still running after {seconds(limit_s)} in all (timeout_s, over its runs, timed turns "
        "and traced runs in both trees); stopped"
    )
    return RegionError(ErrorKind.TIMEOUT, message, message)
