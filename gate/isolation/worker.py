"""The child side of isolation: a worker process, started as `worker_command` says.

A worker imports jax once, then works for the parent (`gate.isolation.scheduler`) one
request at a time: it reads frames from ``JOBS_FD`` and answers each on ``RESULTS_FD``:
- `Check`: import every callable of a tree's policies, here where the device is
  (a module may pick its device by kind at import, ``jax.devices("tpu")``), and say what
  failed (`Checked`);
- `Job`: run a region, answered with `Done` as soon as it finishes (and an `Entered` frame
  as it enters each stage, for the gate's live line);
- `Turns`: more timed runs of held regions, answered with `Timed`.
Both are pipes of their own, so nothing the code under test prints to stdout or
stderr can corrupt the protocol. A frame is an 8-byte big-endian length and a pickle; the
parent and the worker are the same program, so pickling between them trusts nothing the
code under test could not already do.

One worker holds the code of up to two trees (``run --base``: the head's and the base's,
`gate.policy.trees`), and at most one held region of each, both of the same region.

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
import gc
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from gate.package import PACKAGE_DIR
from gate.policy.load import NamedCallables
from gate.policy.model import Policy, Region
from gate.policy.problems import Problem
from gate.policy.trees import Trees, config_changes, config_values
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
class Check:
    """Import every callable of ``policies`` (and of the invalid files' ``named``) from the
    tree at ``root``: a policy is checked where its regions will run."""

    number: int
    root: Path
    policies: tuple[Policy, ...]
    named: tuple[NamedCallables, ...] = ()


@dataclass(frozen=True)
class Checked:
    """What `Check` found: the problems, and what the tree's modules do to the process."""

    number: int
    problems: tuple[Problem, ...]
    # JAX options the tree's imports changed (`gate.policy.trees.config_changes`), by name.
    config: tuple[tuple[str, str], ...] = ()
    # Compiled extension modules of the tree's own (not of the environment's): a second copy
    # of one, from another tree, may not load beside it in one process.
    extensions: tuple[str, ...] = ()
    fault: str | None = None  # the gate's own bug while checking, with its traceback


@dataclass(frozen=True)
class Job:
    """Run one region."""

    number: int  # echoed in `Done`, so a reply can never be matched to the wrong job
    policy: Policy
    region: Region
    repo_root: Path  # the tree the region's code comes from
    # Keep the region loaded afterwards for `Turns`, and send its outputs (``run --base``).
    hold: bool = False
    # Send the region's outputs on the host, without holding it (``run --base`` when the two
    # trees run in workers of their own).
    outputs: bool = False


@dataclass(frozen=True)
class Turn:
    """``runs`` timed runs of the region held from the tree at ``root``, on ``cpu``."""

    root: Path
    runs: int
    cpu: int | None = None  # every thread of the worker on this CPU for the runs (`cores`)


@dataclass(frozen=True)
class Turns:
    """Time ``turns`` one after the other."""

    number: int
    turns: tuple[Turn, ...]


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
class Timed:
    """The step times `Turns` asked for, a `StepSamples` per turn; a turn with an error is
    the last."""

    number: int
    samples: tuple[StepSamples, ...]


Request = Check | Job | Turns
Message = Request | Checked | Ready | Entered | Done | Timed
_MESSAGES = (Check, Job, Turns, Checked, Ready, Entered, Done, Timed)


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
    # What is here now (JAX's modules, the backend) lives as long as the worker: out of the
    # collector's sight, its full collections no longer walk it after every few regions
    # (0.66 s of collections in a 100-region run became 0.40 s).
    gc.freeze()
    write_frame(results_fd, Ready(os.getpid(), time.perf_counter() - started))

    jobs: queue.Queue[Request | None] = queue.Queue()
    busy = threading.Event()
    threading.Thread(
        target=_read_jobs, args=(jobs_fd, jobs, busy), name="gate-jobs", daemon=True
    ).start()
    held = _Held(Trees())
    while True:
        job = jobs.get()
        if job is None:
            _exit_now()
        busy.set()
        if isinstance(job, Turns):
            reply: Message = Timed(job.number, held.time(job))
        elif isinstance(job, Check):
            try:
                reply = held.check(job)
            except Exception as exc:  # a gate bug: the parent raises it
                fault = gate_fault("checking the policies", exc)
                reply = Checked(job.number, (), fault=f"{fault.message}\n{fault.details}")
        else:
            held.release(job)
            options = _OptionsWatch(config_values())
            with (
                listening(functools.partial(_stage_entered, results_fd, job.number, options)),
                held.trees.entered(job.repo_root, job.policy.python_path),
            ):
                result = run_job(job, held.keeper(job), held.trees.other_roots(job.repo_root))
            reply = Done(job.number, result, held.take_outputs(options.changed()))
        _end_output(crash_log, job.number)
        write_all(results_fd, _encoded(job, reply))
        busy.clear()


class _Held:
    """The trees this worker runs code from, the region it holds from each (the same region),
    and a held region's outputs until they are sent."""

    def __init__(self, trees: Trees) -> None:
        self.trees = trees
        self.regions: dict[Path, tuple[tuple[str, str], HeldRegion]] = {}
        self._outputs: StepOutputs | None = None
        # JAX's options as the worker started, and what each tree's imports changed.
        self._pristine = config_values()
        self._config: dict[Path, dict[str, str]] = {}

    def release(self, job: Job) -> None:
        """Let go of what ``job`` replaces: the held region of its tree, and any held region
        of another region (the gate is done with it)."""
        key = _key(job)
        for root, (held_key, _) in list(self.regions.items()):
            if root == job.repo_root or held_key != key:
                del self.regions[root]
        if not self.regions:
            unpin()  # its timed runs' core: the new region compiles on every core

    def keeper(self, job: Job) -> Keep | None:
        """What keeps ``job``'s region when it runs to its end, if the job asks for that."""
        if not (job.hold or job.outputs):
            return None

        def keep(region: HeldRegion, outputs: object) -> None:
            """Hold ``region`` with its outputs on the host. Raises what fetching them raises:
            the user's setup failing is the region's error (`RegionAbort`), anything else a
            gate fault (`run_job`), never a comparison quietly not made."""
            self._outputs = region.outputs(outputs)
            if job.hold:
                self.regions[job.repo_root] = (_key(job), region)

        return keep

    def take_outputs(self, late_config: str = "") -> StepOutputs | None:
        """The held region's outputs, with what its run changed of JAX's options."""
        outputs, self._outputs = self._outputs, None
        if outputs is None or not late_config:
            return outputs
        return replace(outputs, late_config=late_config)

    def time(self, job: Turns) -> tuple[StepSamples, ...]:
        """Each turn's timed runs, in order, in its tree; the first that fails is the last."""
        done: list[StepSamples] = []
        for turn in job.turns:
            found = self.regions.get(turn.root)
            if found is None:
                doing = "asking for timed runs of a region this worker does not hold"
                done.append(StepSamples((), error=gate_fault(doing)))
                break
            region = found[1]
            try:
                with self.trees.entered(turn.root, region.code.policy.python_path):
                    samples = region.sample(turn.runs, turn.cpu)
            except Exception as exc:  # a gate bug; the step's own error is in the samples
                samples = StepSamples((), error=gate_fault("timing this region", exc))
            done.append(samples)
            if samples.error is not None:
                break
        return tuple(done)

    def check(self, job: Check) -> Checked:
        """Import what ``job`` names from its tree, and what that did to this process.

        A tree checked after another starts from JAX's options as the worker started: its
        own changes are then measured, not hidden by the other tree's same ones.
        """
        from gate.policy.resolve import check_callables, check_named
        from gate.region.fetch_watch import watching_reads

        first = job.root not in self._config
        if first and self._config:
            _set_config(self._pristine)
        paths = tuple(p for policy in job.policies for p in policy.python_path)
        # A module that reads an array when imported leaves it cached on the host: the
        # detector must know, as when a region imports it (`gate.region.engine`).
        with self.trees.entered(job.root), watching_reads(UserCode(job.root, paths)):
            problems = [p for policy in job.policies for p in check_callables(policy, job.root)]
            for named in job.named:
                problems += check_named(named.path, named.refs, named.python_path, job.root)
            extensions = self.trees.extension_modules()
        changes = config_changes(self._pristine, config_values())
        self._config[job.root] = changes
        return Checked(job.number, tuple(problems), tuple(sorted(changes.items())), extensions)


def _key(job: Job) -> tuple[str, str]:
    return (job.policy.path.as_posix(), job.region.name)


def _set_config(values: dict[str, object]) -> None:
    """Put JAX's options back to ``values``, where an option still takes a new value."""
    import jax

    for name, value in values.items():
        if jax.config.values.get(name, value) != value:
            try:
                jax.config.update(name, value)
            except Exception:  # fixed once the backend started: the difference shows
                continue


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


@dataclass
class _OptionsWatch:
    """JAX's process-wide options through one job (``run --base``: the other tree must not run
    under what this one changed), looked at as each stage begins.

    What differs at the job's end is what the job changed; each option is said with the stage
    it first changed in. The gate's own changes (its region's full tracebacks, the
    recompile watch's cache-miss log) are put back before the end, so they never show.
    """

    start: dict[str, object]
    stage: str = Stage.IMPORTING.value
    first_seen: dict[str, str] = field(default_factory=dict)  # option -> stage

    def entered(self, stage: Stage) -> None:
        for name in config_changes(self.start, config_values()):
            self.first_seen.setdefault(name, self.stage)
        self.stage = stage.value

    def changed(self) -> str:
        """What the job changed and kept: ``jax_enable_x64: False → True, while compiling``."""
        changes = config_changes(self.start, config_values())
        return "; ".join(
            f"{name}: {change}, while {self.first_seen.get(name, self.stage)}"
            for name, change in sorted(changes.items())
        )


def _stage_entered(fd: int, number: int, options: _OptionsWatch, stage: Stage) -> None:
    # From the thread that runs the region, the only one that writes frames while it runs.
    options.entered(stage)
    write_frame(fd, Entered(number, stage.value))


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
        problem = Problem("", None, "", error.message)
        return encode(Checked(request.number, (problem,)))


def _read_jobs(fd: int, jobs: queue.Queue[Request | None], busy: threading.Event) -> None:
    frames = FrameBuffer()
    try:
        while chunk := os.read(fd, 1 << 16):
            for message in frames.feed(chunk):
                if not isinstance(message, Check | Job | Turns):
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


def run_job(job: Job, keep: Keep | None = None, other_roots: tuple[Path, ...] = ()) -> RegionResult:
    """The region's result; a gate bug becomes an INTERNAL error for this region only.

    ``other_roots``: the other trees whose code this worker holds (``run --base``).
    """
    from gate.region import engine

    started = time.perf_counter()
    try:
        return engine.run_region(
            job.policy, job.region, repo_root=job.repo_root, keep=keep, other_roots=other_roots
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
