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
for the live line.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gate.isolation.cancellation import Cancellation
from gate.isolation.compile_cache import RunCache
from gate.isolation.environment import keep_accelerators_for_workers, worker_environment
from gate.isolation.lost_region import how_it_ended, lost_region_error, seconds
from gate.isolation.watcher import STARTING_A_WORKER, RunWatcher
from gate.isolation.worker import Done, Entered, Job, Message, Ready, Sample, Sampled
from gate.isolation.worker_process import WaitEvent, WorkerProcess
from gate.plan import Plan, region_key
from gate.policy.model import Policy, Region
from gate.region.cores import usable_cpus
from gate.region.quiet import TIMING_LOCK
from gate.results.comparison import StepOutputs, StepSamples
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.records import RegionResult, RunResult, SuiteResult
from gate.user_code import UserCode

# Re-exported for other subsystems: mypy's strict mode accepts a re-export only when listed.
__all__ = [
    "TIMING_LOCK",
    "Scheduler",
    "keep_accelerators_for_workers",
    "run_isolated",
    "usable_cpus",
    "worker_environment",
]

# Workers in a row that may fail to start before the rest of the regions
# are not given one (a broken environment, e.g. no GPU for JAX_PLATFORMS=cuda).
_START_ATTEMPTS = 2
# After a job's reply, how long its last output lines may take to be read (they come on another
# pipe, marked at their end): then the region's output is complete when its row is written.
_OUTPUT_LAG_S = 1.0


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


class Scheduler:
    """Runs regions one at a time in a worker process, replacing it when it is lost.

    Use as a context manager: leaving it stops the worker. ``tree`` names the
    tree this scheduler runs for ``watcher`` when there are two (``run --base``).
    """

    def __init__(
        self,
        repo_root: Path,
        *,
        cancel: Cancellation | None = None,
        watcher: RunWatcher | None = None,
        environ: Mapping[str, str] | None = None,
        tree: str | None = None,
    ) -> None:
        self.repo_root = repo_root
        self.cancel = cancel
        self.watcher = watcher
        self.tree = tree
        self.environ = dict(os.environ if environ is None else environ)
        self.startups: list[Ready] = []  # every worker started, for benchmarks and tests
        self._worker: WorkerProcess | None = None
        # Workers that could not start, in a row, and the last one's error:
        # after two, the environment is broken and no region gets a worker.
        self._failed_starts: list[tuple[dict[str, str], RegionError]] = []
        self._jobs = itertools.count(1)
        # The compilation cache this scheduler's workers share; removed on leaving.
        self._cache = RunCache()
        self._early: WorkerProcess | None = None  # started by `start_early`, not yet waited on

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
        self._cache.remove()

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
        early, self._early = self._early, None
        if early is not None:
            early.stop(dump=False)

    def start_early(self, policy: Policy, region: Region) -> None:
        """Start the worker ``region`` will run in, without waiting for it to be ready: the
        gate's own checks, and ``run --base``'s other worker, overlap its start-up."""
        if self._worker is None and self._early is None:
            env = worker_environment(self.environ, policy, region, run_cache=self._cache.path)
            self._early = WorkerProcess(self.repo_root, env, self.watcher)

    def run(self, policy: Policy, region: Region) -> RegionResult:
        """Run ``region`` in the worker; a lost worker makes it an error, never an exception."""
        result, _ = self._dispatch(policy, region, hold=False)
        return result

    def run_held(self, policy: Policy, region: Region) -> tuple[RegionResult, StepOutputs | None]:
        """`run`, and the worker keeps the region loaded for `sample`; with the result, its
        outputs on the host (None when it did not run to its end)."""
        return self._dispatch(policy, region, hold=True)

    def _dispatch(
        self, policy: Policy, region: Region, *, hold: bool
    ) -> tuple[RegionResult, StepOutputs | None]:
        running = _Running(policy, region, time.monotonic(), 0)
        if self.cancel is not None and self.cancel.requested:
            return running.result(self._cancelled_before()), None
        env = worker_environment(self.environ, policy, region, run_cache=self._cache.path)
        if self._worker is not None and (self._worker.env != env or self._worker.exited()):
            self.close()
        try:
            return self._run(running, env, hold)
        except BaseException:
            # A gate bug: leave no worker behind, and start afresh next time.
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.stop(dump=False)
            raise

    def _run(
        self, running: _Running, env: dict[str, str], hold: bool
    ) -> tuple[RegionResult, StepOutputs | None]:
        region = running.region
        label = running.label
        job = Job(next(self._jobs), running.policy, region, self.repo_root, hold)
        worker: WorkerProcess | None = None
        for attempt in range(2):
            if self._worker is None:
                failed = self._start(running, env)
                if failed is not None:
                    return failed, None
            worker = self._worker
            assert worker is not None
            running = _Running(running.policy, region, running.started, worker.output.count)
            worker.output.start_job(job.number, label)
            if worker.send(job):
                break
            # It died while idle, between regions: not this region's doing.
            self.close()
            if attempt:
                return self._lost(worker, running, WaitEvent.EXITED), None
        assert worker is not None
        event = self._wait(worker, time.monotonic() + region.timeout_s, label)
        if isinstance(event, Done) and event.number == job.number:
            worker.output.wait_ended(job.number, _OUTPUT_LAG_S)
            return event.result, event.outputs
        if not isinstance(event, WaitEvent):
            raise RuntimeError(f"worker answered job {job.number} with {event!r:.300}")
        self._worker = None
        return self._lost(worker, running, event), None

    def sample(
        self, policy: Policy, region: Region, runs: int, *, cpu: int | None, reference: bool
    ) -> StepSamples:
        """``runs`` more timed runs of the held region, on ``cpu`` (None: any); see `Sample`.
        A worker lost meanwhile (crash, timeout, cancellation) is the samples' error."""
        worker = self._worker
        if worker is None:
            error = RegionError(
                ErrorKind.CRASH, "the worker that ran this region is gone; nothing to time", ""
            )
            return StepSamples((), error=error)
        running = _Running(policy, region, time.monotonic(), worker.output.count)
        number = next(self._jobs)
        worker.output.start_job(number, running.label)
        if not worker.send(Sample(number, runs, cpu, reference)):
            self._worker = None
            return StepSamples((), error=self._lost(worker, running, WaitEvent.EXITED).error)
        event = self._wait(worker, time.monotonic() + region.timeout_s, running.label)
        if isinstance(event, Sampled) and event.number == number:
            worker.output.wait_ended(number, _OUTPUT_LAG_S)
            return event.samples
        if not isinstance(event, WaitEvent):
            raise RuntimeError(f"worker answered sample {number} with {event!r:.300}")
        self._worker = None
        return StepSamples((), error=self._lost(worker, running, event).error)

    def _start(self, running: _Running, env: dict[str, str]) -> RegionResult | None:
        """Start a worker and wait until it is ready; the region's error if it is not."""
        failed = self._failed_starts
        if len(failed) >= _START_ATTEMPTS and all(e == env for e, _ in failed):
            last = failed[-1][1]
            return running.result(
                replace(
                    last,
                    message=f"{last.message} (not tried again: "
                    f"{_START_ATTEMPTS} workers in a row could not start)",
                )
            )
        early, self._early = self._early, None
        if early is not None and early.env != env:
            early.stop(dump=False)
            early = None
        self.announce(running.label, STARTING_A_WORKER)
        worker = early if early is not None else WorkerProcess(self.repo_root, env, self.watcher)
        timeout = running.region.timeout_s
        event = worker.wait(time.monotonic() + timeout, self.cancel)
        if isinstance(event, Ready):
            self.startups.append(event)
            self._failed_starts.clear()
            self._worker = worker
            return None
        if not isinstance(event, WaitEvent):
            worker.stop(dump=False)
            raise RuntimeError(f"worker sent {event!r:.300} before it was ready")
        if event is WaitEvent.CANCELLED:
            worker.stop(dump=False)
            return running.result(self._cancelled_running())
        returncode = worker.stop(dump=event is WaitEvent.TIMED_OUT)
        code = UserCode(self.repo_root, running.policy.python_path)
        lines = worker.output.lines_since(0)
        if event is WaitEvent.TIMED_OUT:
            kind = ErrorKind.TIMEOUT
            message = f"the worker process did not start within {seconds(timeout)} (timeout_s)"
        else:
            kind = ErrorKind.CRASH
            message = f"the worker process could not start: it {how_it_ended(returncode, lines)}"
        headline = (
            f"{message}. A worker imports jax and starts its backend before it runs a "
            "region; its output below says why it could not."
        )
        error = lost_region_error(kind, message, headline, lines=lines, code=code, crashed=False)
        self._failed_starts.append((env, error))
        return running.result(error)

    def _lost(self, worker: WorkerProcess, running: _Running, event: WaitEvent) -> RegionResult:
        """Stop the worker that ran ``running``; the region's error says what happened."""
        timeout = running.region.timeout_s
        returncode = worker.stop(dump=event is not WaitEvent.EXITED)
        worker.output.stop_jobs()
        if event is WaitEvent.EXITED and self._signalled_by_cancel(returncode):
            event = WaitEvent.CANCELLED
        fresh = "The regions after it run in a fresh worker."
        if event is WaitEvent.CANCELLED:
            kind = ErrorKind.CANCELLED
            message = self._cancelled_running().message
            headline = (
                f"The run was cancelled: {self._cancel_reason()} while this region was "
                "running. Its worker was stopped."
            )
        elif event is WaitEvent.TIMED_OUT:
            kind = ErrorKind.TIMEOUT
            message = f"still running after {seconds(timeout)} (timeout_s); stopped"
            headline = (
                f"The region was still running after its timeout_s of {seconds(timeout)}, "
                f"so its worker was stopped. {fresh}"
            )
        else:
            kind = ErrorKind.CRASH
            how = how_it_ended(returncode, worker.output.lines_since(running.mark))
            message = how.removeprefix("was ")
            headline = f"The worker process running this region {how}. {fresh}"
        code = UserCode(self.repo_root, running.policy.python_path)
        lines = worker.output.lines_since(running.mark)
        crashed = event is WaitEvent.EXITED
        error = lost_region_error(kind, message, headline, lines=lines, code=code, crashed=crashed)
        return running.result(error)

    def announce(self, label: str, stage: str) -> None:
        """Tell the watcher region ``label`` has entered ``stage`` (in which tree, if two)."""
        if self.watcher is not None:
            self.watcher.stage(label, f"{self.tree}: {stage}" if self.tree else stage)

    def _wait(self, worker: WorkerProcess, deadline: float, label: str) -> Message | WaitEvent:
        """The worker's next message but a stage, which goes to the watcher on the way."""
        while True:
            event = worker.wait(deadline, self.cancel)
            if not isinstance(event, Entered):
                return event
            self.announce(label, event.stage)

    def _signalled_by_cancel(self, returncode: int | None) -> bool:
        """A worker killed by SIGINT/SIGTERM: most likely the same signal is cancelling us."""
        if returncode not in (-signal.SIGINT, -signal.SIGTERM) or self.cancel is None:
            return False
        end = time.monotonic() + 0.5
        while not self.cancel.requested and time.monotonic() < end:
            time.sleep(0.01)
        return self.cancel.requested

    def _cancel_reason(self) -> str:
        found = self.cancel.reason if self.cancel is not None else None
        return found if found is not None else "a signal arrived"

    def _cancelled_running(self) -> RegionError:
        what = f"{self._cancel_reason()} while this region was running"
        return RegionError(
            ErrorKind.CANCELLED,
            f"{what}; the worker was stopped",
            f"The run was cancelled: {what}. Its worker was stopped.\n",
        )

    def _cancelled_before(self) -> RegionError:
        what = f"{self._cancel_reason()} before this region started"
        return RegionError(
            ErrorKind.CANCELLED, what, f"The run was cancelled: {what}; it did not run.\n"
        )


def run_isolated(
    plan: Plan,
    repo_root: Path,
    *,
    cancel: Cancellation | None = None,
    watcher: RunWatcher | None = None,
    finished: Callable[[RegionResult], None] | None = None,
    starting: Callable[[], None] | None = None,
) -> RunResult:
    """Run every region of ``plan``, each in a worker process; never loses one.

    A region whose worker crashes, times out or is cancelled is an error in the result; so is
    a bug in the gate while it ran one (INTERNAL). After ``cancel`` is requested, the regions
    not yet run are CANCELLED errors. ``watcher`` hears each region's stages and its worker's
    output; ``finished`` gets each region's result as soon as it is known. ``starting`` runs
    while the first worker starts (what it raises stops the worker and the run).
    """
    with Scheduler(repo_root, cancel=cancel, watcher=watcher) as scheduler:
        for policy, region in plan.first():
            scheduler.start_early(policy, region)
        if starting is not None:
            starting()
        return each_region(plan, scheduler.run, finished)


def each_region(
    plan: Plan,
    run: Callable[[Policy, Region], RegionResult],
    finished: Callable[[RegionResult], None] | None = None,
) -> RunResult:
    """``run`` of every region of ``plan``, in order, and ``finished`` told of each result.

    The one loop of a run, with or without ``--base``: a bug of the gate's while one region
    runs is that region's INTERNAL error (the run exits 3), and the other regions are judged.
    """
    suites = []
    for policy, regions in plan.steps:
        results = []
        for region in regions:
            started = time.monotonic()
            try:
                result = run(policy, region)
            except Exception as exc:
                error = gate_fault("running this region", exc)
                result = RegionResult.of(
                    policy, region, wall_s=time.monotonic() - started, error=error
                )
            results.append(result)
            if finished is not None:
                finished(result)
        suites.append(SuiteResult(policy.suite, policy.path.as_posix(), tuple(results)))
    return RunResult(tuple(suites))
