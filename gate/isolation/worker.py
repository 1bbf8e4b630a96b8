"""The child side of isolation: a worker process, as `gate.isolation.spawn` starts it.

A worker imports jax once, then works for the parent (`gate.isolation.scheduler`) one
request at a time: it reads frames from ``JOBS_FD`` and answers each on ``RESULTS_FD``
(`gate.isolation.protocol`), holding what ``run --base`` keeps between requests in
`gate.isolation.held_regions`.

What the parent learns when things go wrong:
- faulthandler is on, writing to a private copy of the original stderr: a
  crash (SIGSEGV, SIGABRT...) prints every thread's Python stack before the
  process dies, and `DUMP_SIGNAL` makes a hung worker print it on request;
- the jobs pipe is the worker's lifeline: when it closes while a region
  runs, the parent is gone (killed, or stopping this worker), and the worker
  kills its own process group instead of running on with nobody to report to.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from gate.isolation.backend import start_backend
from gate.isolation.held_regions import HeldRegions
from gate.isolation.leftovers import Leftovers
from gate.isolation.own_tree import take_from_own_tree
from gate.isolation.protocol import (
    DUMP_SIGNAL,
    END_OF_JOB,
    Check,
    Checked,
    Done,
    Entered,
    Fetch,
    Fetched,
    FrameBuffer,
    Go,
    Job,
    Message,
    Reached,
    Ready,
    Request,
    Timed,
    Trace,
    Traced,
    Turns,
    encode,
    write_all,
    write_frame,
)
from gate.policy.problems import Problem
from gate.policy.resolve import running_from
from gate.region.stages import Stage, listening

if TYPE_CHECKING:  # the region engine is imported only when a region runs
    from gate.region.held import Keep
from gate.results.comparison import StepSamples
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.footprint import Footprint
from gate.results.line_times import OpTimes
from gate.results.records import RegionResult, region_key
from gate.user_code import UserCode, frames_of
from gate.witness.footprint import FootprintRecorder

# -- the worker process --------------------------------------------------------


def main(argv: list[str]) -> int:
    jobs_fd, results_fd = (int(arg) for arg in argv)
    # Keep the protocol pipes out of processes the code under test starts.
    os.set_inheritable(jobs_fd, False)
    os.set_inheritable(results_fd, False)
    # A private copy of stderr: the crash dump still reaches the parent if a
    # region points fd 2 somewhere else while it runs.
    crash_log = os.fdopen(os.dup(2), "w")
    faulthandler.enable(crash_log, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, crash_log, all_threads=True)

    started = time.perf_counter()
    leftovers = Leftovers()
    with leftovers.starting_up():
        start_backend()
    write_frame(results_fd, Ready(os.getpid(), time.perf_counter() - started))

    jobs: queue.Queue[Request | None] = queue.Queue()
    busy = threading.Event()
    go = _GoSignal()
    threading.Thread(
        target=_read_jobs, args=(jobs_fd, jobs, busy, go), name="gate-jobs", daemon=True
    ).start()
    held = HeldRegions()
    footprints = FootprintRecorder()
    # A check imported modules before the recorder listened: what they read then is unheard,
    # so no footprint this worker records is complete.
    checked_unheard = False
    # A region ran since what regions leave was last collected (`Leftovers.between_regions`).
    left_over = False
    while True:
        job = jobs.get()
        if job is None:
            _exit_now()
        busy.set()
        done_with: list[Callable[[], None]] = []  # what the job's region lets go of
        if isinstance(job, Turns):
            reply: Message = Timed(job.number, held.time(job))
        elif isinstance(job, Trace):
            reply = Traced(job.number, held.trace())
        elif isinstance(job, Fetch):
            reply = Fetched(job.number, *held.fetch())
        elif isinstance(job, Check):
            if job.audited:  # before the policies are checked: what modules read at import
                footprints.install()
            checked_unheard = checked_unheard or not footprints.installed
            try:
                reply = held.check(job)
            except Exception as exc:  # a gate bug: the parent raises it
                fault = gate_fault("checking the policies", exc)
                reply = Checked(job.number, (), fault=f"{fault.message}\n{fault.details}")
        else:
            if job.audited:
                footprints.install()
            held.release()
            # After a region, never while a held one still runs its programs: the first
            # region starts what the process starts once, which is no region's leftover.
            if left_over:
                leftovers.between_regions()
            left_over = True
            take_from_own_tree(job.moved_paths)
            top = job.footprint_top
            entered = functools.partial(_stage_entered, results_fd, job.number)
            if job.times_after_go:
                entered = functools.partial(_timing_after_go, results_fd, go, job.number, entered)
            if job.reports_reach and top is not None:
                reach = functools.partial(_reach, footprints, job, top, checked_unheard)
                entered = functools.partial(_reach_as_first_call_starts, results_fd, reach, entered)
            with (
                listening(entered),
                running_from(job.repo_root, job.policy.python_path),
                footprints.recording() if top is not None else contextlib.nullcontext(),
            ):
                result = run_job(job, held.keeper(job), let_go=done_with.append)
            if top is not None:  # after the job: hashing is never inside its timed runs
                footprint = None if checked_unheard else _footprint(footprints, job, top)
                result = replace(result, footprint=footprint)
            reply = Done(job.number, result, held.take_outputs())
        _end_output(crash_log, job.number)
        write_all(results_fd, _encoded(job, reply))
        busy.clear()
        # Done while the parent reads the reply and sends the next job, which this worker
        # would otherwise wait for idle (~2 ms a region on the CPU): the finished region's
        # programs go, and what it left is collected, as they would be before the next job.
        for let_go in done_with:
            try:
                let_go()
            except Exception:  # the programs stay until the next release; the worker goes on
                traceback.print_exc()
        if left_over and held.region is None:
            leftovers.between_regions()
            left_over = False


def _footprint(recorder: FootprintRecorder, job: Job, top: Path) -> Footprint | None:
    """What ``job``'s region read of its tree; None when recording it failed (a gate bug,
    printed: the region is then compared in full)."""
    region = job.region
    callables = (region.step, region.setup, *region.boundaries, region.checks.custom)
    modules = [c.module for c in callables if c is not None]
    try:
        return recorder.footprint(top, (*job.policy.python_path, job.repo_root), modules)
    except Exception:
        traceback.print_exc()
        return None


def _reach(recorder: FootprintRecorder, job: Job, top: Path, unheard: bool) -> Reached:
    """What ``job``'s region has reached so far (`Job.reports_reach`): its footprint's files
    and absent paths; none where its footprint will be None (``unheard``, or recording it
    failed), so the parent waits for the job's end, where the region is compared in full."""
    footprint = None if unheard else _footprint(recorder, job, top)
    if footprint is None:
        return Reached(job.number, ())
    return Reached(job.number, (*(path for path, _ in footprint.files), *footprint.absent))


def _reach_as_first_call_starts(
    fd: int, reach: Callable[[], Reached], entered: Callable[[Stage], None], stage: Stage
) -> None:
    """``entered``, and, as the job's first call starts (its code imported; setup has not
    made its inputs yet, so what setup reads is not in it), `Reached`: the parent may start
    the base's run beside it now, not at its end."""
    if stage is Stage.COMPILING:
        write_frame(fd, reach())
    entered(stage)


def _exit_now() -> NoReturn:
    """Leave without the interpreter's teardown: the gate is done with this worker.

    Tearing JAX down (its backend, every compiled program, a TPU's runtime) takes half a
    second on the CPU and more on an accelerator, and the parent waits for it before the
    next worker may hold the device or the run may end. The process's exit frees the device
    all the same. What the code under test registered with ``atexit`` does not run.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _end_output(output: TextIO, number: int) -> None:
    """Flush what the job printed, then mark its end on the output pipe (`END_OF_JOB`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    # The private copy of stderr: the code under test may have pointed fd 1 or 2 elsewhere.
    write_all(output.fileno(), f"{END_OF_JOB}{number}\n".encode())


def _stage_entered(fd: int, number: int, stage: Stage) -> None:
    # From the thread that runs the region, the only one that writes frames while it runs.
    write_frame(fd, Entered(number, stage.value))


class _GoSignal:
    """The highest job number a `Go` has come for, which the job's timed runs wait for
    (`Job.times_after_go`). Numbers only grow, so a `Go` for a job that ended before it came
    never lets a later job's timed runs start."""

    def __init__(self) -> None:
        self._given = -1
        self._changed = threading.Condition()

    def give(self, number: int) -> None:
        with self._changed:
            self._given = max(self._given, number)
            self._changed.notify_all()

    def given_for(self, number: int) -> bool:
        with self._changed:
            return self._given >= number

    def wait(self, number: int) -> None:
        # Unbounded: the parent stops this worker when the region's timeout_s runs out, and
        # a parent that is gone closes the jobs pipe, which kills it (`_read_jobs`).
        with self._changed:
            self._changed.wait_for(lambda: self._given >= number)


# The stage the live line shows while a job's timed runs wait for its `Go`.
WAITING_FOR_THE_BASE = "waiting for the base's run"


def _timing_after_go(
    fd: int, go: _GoSignal, number: int, entered: Callable[[Stage], None], stage: Stage
) -> None:
    """``entered``, and, as job ``number`` enters its timed runs, the wait for its `Go`: the
    base's run beside it has ended (`Job.times_after_go`). The wait is a stage of its own on
    the live line, not the end of the one before."""
    if stage is Stage.TIMING and not go.given_for(number):
        write_frame(fd, Entered(number, WAITING_FOR_THE_BASE))
        go.wait(number)
    entered(stage)


def _encoded(request: Request, reply: Message) -> bytes:
    """``reply`` as a frame; a reply that does not pickle is a gate bug, said as the region's
    error (or the check's problem) instead of a worker that dies."""
    try:
        return encode(reply)
    except Exception as exc:
        error = gate_fault("sending this request's reply", exc)
        if isinstance(request, Job):
            return encode(Done(request.number, _error_result(request, time.perf_counter(), error)))
        if isinstance(request, Turns):
            return encode(Timed(request.number, (StepSamples((), error=error),)))
        if isinstance(request, Trace):
            return encode(Traced(request.number, OpTimes.not_traced(error.message)))
        if isinstance(request, Fetch):
            return encode(Fetched(request.number, None, error))
        problem = Problem("", None, "", error.message)
        return encode(Checked(request.number, (problem,)))


def _read_jobs(
    fd: int, jobs: queue.Queue[Request | None], busy: threading.Event, go: _GoSignal
) -> None:
    frames = FrameBuffer()
    try:
        while chunk := os.read(fd, 1 << 16):
            for message in frames.feed(chunk):
                if isinstance(message, Go):  # for the job running now: not queued behind it
                    go.give(message.number)
                    continue
                if not isinstance(message, Request):
                    raise TypeError(f"expected a request, got {type(message).__name__}")
                jobs.put(message)
    except BaseException:
        traceback.print_exc()
        os._exit(70)  # a protocol bug: the parent reports the crash and this output
    if busy.is_set():
        _kill_own_group()
    jobs.put(None)


def _kill_own_group() -> None:
    """The parent is gone mid-region: stop this worker and whatever it started."""
    if os.getpgrp() == os.getpid():  # started by the scheduler, in a session of its own
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def run_job(
    job: Job,
    keep: Keep | None = None,
    *,
    let_go: Callable[[Callable[[], None]], None] | None = None,
) -> RegionResult:
    """The region's result; a gate bug becomes an INTERNAL error for this region only.

    ``let_go``: handed what lets go of the region's programs, unless the job holds the region
    (`gate.region.engine.run_region`).
    """
    from gate.region import engine

    started = time.perf_counter()
    settings = job.settings
    try:
        return engine.run_region(
            job.policy,
            job.region,
            repo_root=job.repo_root,
            keep=keep,
            traced=settings.traces_region(region_key(job.policy.suite, job.region.name)),
            traces=settings.traces,
            trace_held=job.hold,
            # A held one's go when it is let go of (`HeldRegions.release`).
            let_go=None if job.hold else let_go,
        )
    except Exception as exc:
        # run_region turns every exception of the user's code into a RegionError.
        return _error_result(job, started, gate_fault("running this region", exc))
    except BaseException as exc:  # SystemExit, KeyboardInterrupt from the code under test
        code = UserCode(job.repo_root, job.policy.python_path)
        return _error_result(
            job,
            started,
            RegionError(
                ErrorKind.STEP,
                f"{type(exc).__name__}({exc}) raised: code under test must not exit the process",
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                code.locate(frames_of(exc.__traceback__)),
            ),
        )


def _error_result(job: Job, started: float, error: RegionError) -> RegionResult:
    return RegionResult.of(
        job.policy, job.region, wall_s=time.perf_counter() - started, error=error
    )
