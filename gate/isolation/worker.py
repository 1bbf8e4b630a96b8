"""The child side of isolation: a worker process, started as `worker_command` says.

A worker imports jax once, then runs regions one at a time for the parent
(`gate.isolation.scheduler`): it reads `Job` frames from ``JOBS_FD`` and answers each
with a `Done` frame on ``RESULTS_FD`` as soon as the region finishes (and an
`Entered` frame as it enters each stage, for the gate's live line). Both are
pipes of their own, so nothing the code under test prints to stdout or
stderr can corrupt the protocol. A frame is an 8-byte big-endian length and a
pickle; the parent and the worker are the same program, so pickling between
them trusts nothing the code under test could not already do.

What the parent learns when things go wrong:
- faulthandler is on, writing to a private copy of the original stderr: a
  crash (SIGSEGV, SIGABRT...) prints every thread's Python stack before the
  process dies, and `DUMP_SIGNAL` makes a hung worker print it on request;
- the jobs pipe is the worker's lifeline: when it closes while a region
  runs, the parent is gone (killed, or stopping this worker), and the worker
  kills its own process group instead of running on with nobody to report to.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gate.package import PACKAGE_DIR
from gate.policy.model import Policy, Region
from gate.region.cores import unpin
from gate.region.stages import Stage, listening

if TYPE_CHECKING:  # the region engine is imported only when a region runs
    from gate.region.held import HeldRegion, Keep
from gate.results.comparison import StepOutputs, StepSamples
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.records import RegionResult
from gate.user_code import UserCode, frames_of

# The parent sends this to a worker it is about to kill (timeout, cancelled
# run): faulthandler then prints where each thread is, for the report.
DUMP_SIGNAL = signal.SIGUSR1

_HEADER = 8

# Written to the output pipe, with the job's number and a newline, once a job's output is
# flushed and before its reply: the parent's reader then knows every line before it is that
# job's (the reply comes on another pipe and can overtake them). Never forwarded.
END_OF_JOB = "\x00transfer-gate: end of job "

# The folder that holds this `gate` package (site-packages, or a source checkout).
_GATE_HOME = os.path.dirname(PACKAGE_DIR)


def worker_command(jobs_fd: int, results_fd: int) -> list[str]:
    """The command line that starts a worker: this gate's own package, whatever the cwd holds.

    Workers run in the user's repo root, and ``python -m gate.isolation.worker`` would put it
    first on `sys.path`: a ``gate`` package of the user's (a common name) would be imported
    instead of this one. ``-c`` puts ``""`` there instead, which the bootstrap replaces with the
    folder that holds this package (``-P`` would do as well, but only from Python 3.11). The
    user's code still imports as before: `gate.policy.resolve.python_path` puts the policy's
    python_path and the repo root first while a region's code is imported and run.
    """
    bootstrap = (
        f"import sys; sys.path[0] = {_GATE_HOME!r}; "
        "from gate.isolation.worker import main; raise SystemExit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-u", "-c", bootstrap, str(jobs_fd), str(results_fd)]


@dataclass(frozen=True)
class Job:
    """Run one region."""

    number: int  # echoed in `Done`, so a reply can never be matched to the wrong job
    policy: Policy
    region: Region
    repo_root: Path
    # Keep the region loaded afterwards for `Sample` jobs, and send its outputs (``run --base``).
    hold: bool = False


@dataclass(frozen=True)
class Sample:
    """Time ``runs`` more runs of the region the last `Job` held."""

    number: int
    runs: int
    cpu: int | None = None  # every thread of the worker on this CPU for the runs (`cores`)
    reference: bool = False  # time the gate's reference computation instead of the step


@dataclass(frozen=True)
class Ready:
    """The worker has imported jax and initialised its devices."""

    pid: int
    startup_s: float


@dataclass(frozen=True)
class Entered:
    """The running job's region has entered a stage (`gate.region.stages`), for the live line."""

    number: int
    stage: str  # a `Stage` value: the parent shows it as it is


@dataclass(frozen=True)
class Done:
    """A region's result."""

    number: int
    result: RegionResult
    outputs: StepOutputs | None = None  # a held region's outputs on the host


@dataclass(frozen=True)
class Sampled:
    """The step times a `Sample` asked for."""

    number: int
    samples: StepSamples


Message = Job | Sample | Ready | Entered | Done | Sampled
_MESSAGES = (Job, Sample, Ready, Entered, Done, Sampled)


def encode(message: Message) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(payload).to_bytes(_HEADER, "big") + payload


def write_frame(fd: int, message: Message) -> None:
    """Write one frame to ``fd``, blocking until all of it is written."""
    write_all(fd, encode(message))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FrameBuffer:
    """Bytes read from a pipe, cut into frames as they complete."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> Iterator[Message]:
        self._buffer += chunk
        while len(self._buffer) >= _HEADER:
            size = int.from_bytes(self._buffer[:_HEADER], "big")
            if len(self._buffer) < _HEADER + size:
                return
            payload = bytes(self._buffer[_HEADER : _HEADER + size])
            del self._buffer[: _HEADER + size]
            message = pickle.loads(payload)
            if not isinstance(message, _MESSAGES):
                raise TypeError(f"unexpected message from the other side: {message!r:.200}")
            yield message


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
    import jax

    jax.devices()  # backend start-up is paid once per worker, not per region
    write_frame(results_fd, Ready(os.getpid(), time.perf_counter() - started))

    jobs: queue.Queue[Job | Sample | None] = queue.Queue()
    busy = threading.Event()
    threading.Thread(
        target=_read_jobs, args=(jobs_fd, jobs, busy), name="gate-jobs", daemon=True
    ).start()
    held = _Held()
    while True:
        job = jobs.get()
        if job is None:
            return 0
        busy.set()
        if isinstance(job, Sample):
            reply: Message = Sampled(job.number, held.sample(job))
            _end_output(crash_log, job.number)
            write_frame(results_fd, reply)
        else:
            held.region = None  # a new region: the last one is let go
            unpin()  # its timed runs' core: the new region compiles on every core
            with listening(functools.partial(_send_stage, results_fd, job.number)):
                result = run_job(job, held.keep if job.hold else None)
            _end_output(crash_log, job.number)
            _send_result(results_fd, job, result, held.take_outputs())
        busy.clear()


class _Held:
    """The region the last `Job` asked to hold, and its outputs until they are sent."""

    def __init__(self) -> None:
        self.region: HeldRegion | None = None
        self._outputs: StepOutputs | None = None

    def keep(self, region: HeldRegion, outputs: object) -> None:
        """Hold ``region`` with its outputs on the host. Raises what fetching them raises:
        the user's setup failing is the region's error (`RegionAbort`), anything else a gate
        fault (`run_job`), never a comparison quietly not made."""
        self._outputs = region.outputs(outputs)
        self.region = region

    def take_outputs(self) -> StepOutputs | None:
        outputs, self._outputs = self._outputs, None
        return outputs

    def sample(self, job: Sample) -> StepSamples:
        if self.region is None:
            doing = "asking for timed runs of a region this worker does not hold"
            return StepSamples((), error=gate_fault(doing))
        try:
            return self.region.sample(job.runs, job.cpu, job.reference)
        except Exception as exc:  # a gate bug, not the step's (the step's error is in the samples)
            return StepSamples((), error=gate_fault("timing this region", exc))


def _end_output(output: TextIO, number: int) -> None:
    """Flush what the job printed, then mark its end on the output pipe (`END_OF_JOB`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    # The private copy of stderr: the code under test may have pointed fd 1 or 2 elsewhere.
    write_all(output.fileno(), f"{END_OF_JOB}{number}\n".encode())


def _send_stage(fd: int, number: int, stage: Stage) -> None:
    # From the thread that runs the region, the only one that writes frames while it runs.
    write_frame(fd, Entered(number, stage.value))


def _send_result(
    fd: int, job: Job, result: RegionResult, outputs: StepOutputs | None = None
) -> None:
    try:
        frame = encode(Done(job.number, result, outputs))
    except Exception as exc:  # something in the result does not pickle: a gate bug
        error = gate_fault("sending this region's result", exc)
        frame = encode(Done(job.number, _error_result(job, time.perf_counter(), error)))
    write_all(fd, frame)


def _read_jobs(fd: int, jobs: queue.Queue[Job | Sample | None], busy: threading.Event) -> None:
    frames = FrameBuffer()
    try:
        while chunk := os.read(fd, 1 << 16):
            for message in frames.feed(chunk):
                if not isinstance(message, Job | Sample):
                    raise TypeError(f"expected a Job or a Sample, got {type(message).__name__}")
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


def run_job(job: Job, keep: Keep | None = None) -> RegionResult:
    """The region's result; a gate bug becomes an INTERNAL error for this region only."""
    from gate.region import engine

    started = time.perf_counter()
    try:
        return engine.run_region(job.policy, job.region, repo_root=job.repo_root, keep=keep)
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
