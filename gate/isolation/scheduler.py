"""Running regions in worker processes, so one broken region takes down only itself.

The gate's own process runs no region. It starts a worker (`gate.isolation.worker`)
that imports jax once, sends it one region at a time and waits for each
result with the region's ``timeout_s``. A healthy worker runs
the next region too: importing jax and starting its backend costs ~0.6 s on
CPU and seconds on a GPU (`benchmarks/worker_overhead.py` measures it).
When a worker crashes (SIGSEGV, abort, the OOM killer), runs past the
timeout or the run is cancelled, the region becomes an error saying what
happened, with the worker's Python stack and last output lines, and the next
region gets a fresh worker.

Each worker runs in a session of its own: Ctrl-C at a terminal reaches only
the gate, which decides what to stop, and killing the worker's process group
also stops anything the code under test started. The worker's stdout and
stderr go through one pipe that a thread here drains all the time (a full
pipe would block the worker), keeping the last lines for error messages and
forwarding every line to the gate's stderr with the region's name in front,
so what a step prints still reaches the CI log.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import itertools
import os
import re
import selectors
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TextIO

from gate.isolation.worker import (
    DUMP_SIGNAL,
    Done,
    FrameBuffer,
    Job,
    Message,
    Ready,
    worker_command,
    write_frame,
)
from gate.isolation.worker_output import StackDump, WorkerOutput, split_output
from gate.plan import Plan
from gate.policy.model import Policy, Region
from gate.results.records import (
    ErrorKind,
    RegionError,
    RegionResult,
    RunResult,
    SuiteResult,
)
from gate.witness.transfer_map import prepare_environment
from gate.witness.user_code import UserCode

# Lines of the worker's output shown in an error's body.
_SHOWN_LINES = 20
# After DUMP_SIGNAL: how long the stack dump may take to arrive.
_DUMP_QUIET_S = 0.2
_DUMP_LIMIT_S = 2.0
# A worker with nothing left to do gets this long to exit before it is killed.
_EXIT_GRACE_S = 5.0
# Workers in a row that may fail to start before the rest of the regions
# are not given one (a broken environment, e.g. no GPU for JAX_PLATFORMS=cuda).
_START_ATTEMPTS = 2
# How often a wait checks whether the worker has died with its pipes still
# open (a process it forked holds them).
_POLL_S = 0.25


def worker_environment(parent: Mapping[str, str], policy: Policy, region: Region) -> dict[str, str]:
    """The environment a worker for ``region`` starts with.

    This is the place for what must be set before ``import jax``: XLA_FLAGS,
    JAX_PLATFORMS, TF_CPP_MIN_LOG_LEVEL (jaxlib reads it once, when it loads;
    CI images often set it to 2, which hides every ``log``-level guard line).
    The gate decides it here rather than leaving it to the caller's shell. A
    region whose environment differs from the running worker's gets a fresh
    worker, so this may depend on the region.

    The gate's own environment (whose TF_CPP_MIN_LOG_LEVEL `gate.cli.main` has
    already made safe), plus the policy's ``env:``.
    """
    del region  # a policy's regions share its environment
    env = {**parent, **dict(policy.env)}
    prepare_environment(env)  # a policy's env must not hide the guard's log lines either
    return env


def keep_accelerators_for_workers() -> None:
    """Keep the gate's own process off GPUs and TPUs; call before importing the user's modules.

    The gate imports the user's modules to check a policy, and a module that
    makes an array when imported would start JAX's backend in the gate's
    process: on a GPU, JAX then preallocates most of the memory
    (XLA_PYTHON_CLIENT_PREALLOCATE) in a process that runs no region, and
    the worker runs out. Only this process's JAX config changes; workers
    start with the environment as it is.
    """
    import jax

    jax.config.update("jax_platforms", "cpu")


# -- cancellation ----------------------------------------------------------------


class Cancellation:
    """A run's cancellation, polled and waited on by the scheduler.

    Requested by a signal (`cancel_on_signals`) or by the run's time budget
    running out (`cancel_after`); the first request wins and says why.
    """

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        # Why the run was cancelled, as the report says it:
        # "SIGTERM arrived", "the run's time budget of 3300 s was spent".
        self.reason: str | None = None
        self._lock = threading.RLock()  # a signal handler and a timer thread may both request
        # Readable once cancelled, so a wait on the worker wakes up at once.
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, signum: int) -> None:
        """Cancel the run because of a signal; a second request changes nothing."""
        with self._lock:
            if self.reason is None:
                self.signal = signal.Signals(signum)
                self._cancel(f"{self.signal.name} arrived")

    def expire(self, budget_s: float) -> None:
        """Cancel the run because its time budget is spent; nothing if it is already cancelled."""
        with self._lock:
            if self.reason is None:
                self._cancel(f"the run's time budget of {_seconds(budget_s)} was spent")

    def _cancel(self, reason: str) -> None:
        self.reason = reason
        with contextlib.suppress(OSError):
            os.write(self._write, b"!")

    def fileno(self) -> int:
        return self._read

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def cancel_on_signals(
    signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
) -> Iterator[Cancellation]:
    """SIGINT and SIGTERM cancel the run instead of killing the gate; restored on exit.

    CI cancels a job with SIGINT or SIGTERM, then SIGKILL a few seconds
    later: the gate stops the running region and writes its report in that
    time. Further signals while it does are ignored. Outside the main thread
    (where Python cannot install handlers) nothing is installed.
    """
    cancel = Cancellation()
    saved: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        cancel.request(signum)

    try:
        if threading.current_thread() is threading.main_thread():
            for signum in signals:
                saved[signum] = signal.signal(signum, handler)
        yield cancel
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        cancel.close()


@contextlib.contextmanager
def cancel_after(cancel: Cancellation, budget_s: float | None) -> Iterator[None]:
    """Cancel the run once ``budget_s`` seconds have passed (None: never); stopped on exit.

    The cancellation is the one a signal makes: the running region is stopped
    and it and the regions after it become CANCELLED errors, so the report is
    still written. In CI this is what guarantees a report: a job's step runs
    under `docker exec` in a container job, which does not pass the runner's
    signals on, and `timeout-minutes` kills the container outright.
    """
    if budget_s is None:
        yield
        return
    timer = threading.Timer(budget_s, cancel.expire, args=(budget_s,))
    timer.daemon = True
    timer.name = "transfer-gate time budget"
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # never let a late expire() write to the pipe once it is closed


# -- one worker process ----------------------------------------------------------


class _Event(enum.Enum):
    """What ended a wait, other than a message."""

    EXITED = "exited"
    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"


class _Worker:
    """A worker process and the pipes to it."""

    def __init__(self, repo_root: Path, env: dict[str, str], forward: TextIO | None) -> None:
        jobs_read, jobs_write = os.pipe()
        results_read, results_write = os.pipe()
        output_read, output_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                worker_command(jobs_read, results_write),
                cwd=repo_root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output_write,
                stderr=subprocess.STDOUT,
                pass_fds=(jobs_read, results_write),
                start_new_session=True,
            )
        except BaseException:
            for fd in (jobs_write, results_read, output_read):
                os.close(fd)
            raise
        finally:
            for fd in (jobs_read, results_write, output_write):
                os.close(fd)
        self.env = env
        self.output = WorkerOutput(output_read, forward)
        self._jobs: int | None = jobs_write
        self._results: int | None = results_read
        self._frames = FrameBuffer()
        self._pending: collections.deque[Message] = collections.deque()
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> bool:
        """Whether the process has ended, without reaping it.

        Until it is reaped its pid cannot be reused, so killing its process
        group (`stop`) can never hit someone else's.
        """
        if self.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def send(self, job: Job) -> bool:
        """Hand ``job`` to the worker; False when it is already gone."""
        if self._jobs is None:
            return False
        try:
            write_frame(self._jobs, job)
        except BrokenPipeError:
            return False
        return True

    def wait(self, deadline: float, cancel: Cancellation | None) -> Message | _Event:
        """The worker's next message, or why none came before ``deadline``."""
        with selectors.DefaultSelector() as selector:
            if self._results is not None:
                selector.register(self._results, selectors.EVENT_READ)
            if cancel is not None:
                selector.register(cancel.fileno(), selectors.EVENT_READ)
            while not self._pending:
                if self._results is None:
                    return _Event.EXITED
                if cancel is not None and cancel.requested:
                    return _Event.CANCELLED
                left = deadline - time.monotonic()
                if left <= 0:
                    return _Event.TIMED_OUT
                ready = selector.select(min(left, _POLL_S))
                if any(key.fd == self._results for key, _ in ready):
                    chunk = os.read(self._results, 1 << 16)
                    if not chunk:
                        selector.unregister(self._results)
                        self._close_results()
                        continue
                    self._pending.extend(self._frames.feed(chunk))
                elif not ready and self.exited():
                    return _Event.EXITED
            return self._pending.popleft()

    def stop(self, dump: bool) -> int | None:
        """Kill the worker and its process group; its exit status (None if it would not die).

        With ``dump``, first ask for its Python stack (faulthandler), for the report.
        """
        if dump and not self.exited():
            mark = self.output.count
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, DUMP_SIGNAL)
            self.output.wait_quiet(mark, _DUMP_QUIET_S, _DUMP_LIMIT_S, gone=self.exited)
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.returncode = self.process.wait(_EXIT_GRACE_S)
        self._close_jobs()
        self._close_results()
        self.output.finish(_DUMP_LIMIT_S)
        return self.returncode

    def close(self) -> None:
        """Let an idle worker exit (its jobs pipe closes), then make sure it did."""
        self._close_jobs()
        end = time.monotonic() + _EXIT_GRACE_S
        while not self.exited() and time.monotonic() < end:
            time.sleep(0.01)
        self.stop(dump=False)

    def _close_jobs(self) -> None:
        if self._jobs is not None:
            os.close(self._jobs)
            self._jobs = None

    def _close_results(self) -> None:
        if self._results is not None:
            os.close(self._results)
            self._results = None


# -- what a lost region looks like in the report --------------------------------


def _how_it_ended(returncode: int | None, lines: Sequence[str] = ()) -> str:
    """``was killed by SIGSEGV (Segmentation fault)``, ``exited with code 3``.

    When the worker's last output ``lines`` show an import error, that is said instead of
    guessing at memory: ``exited with code 1 after an import error (ModuleNotFoundError: ...)``.
    """
    if returncode is None:
        return "did not exit even after SIGKILL"
    failed_import = _import_error(split_output(lines)[0])
    after = f" after an import error ({failed_import})" if failed_import else ""
    if returncode >= 0:
        return f"exited with code {returncode}{after}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    description = signal.strsignal(number) or name
    if number == signal.SIGKILL and not failed_import:
        description += ", e.g. by the kernel's out-of-memory killer"
    return f"was killed by {name} ({description}){after}"


# The last line of a traceback that ends in a failed import.
_IMPORT_ERROR = re.compile(r"^(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError): \S")


def _import_error(printed: Sequence[str]) -> str | None:
    """The last import error among the lines a report shows, as one line, if there is one."""
    for line in reversed(printed[-_SHOWN_LINES:]):
        if _IMPORT_ERROR.match(line.strip()):
            return " ".join(line.split())[:200]
    return None


def _last_printed(printed: Sequence[str], message: str) -> str:
    for line in reversed(printed):
        if line.strip():
            last = " ".join(line.split())[:200]
            return "" if last in message else f"; last output: {last}"
    return ""


def _lost_region_error(
    kind: ErrorKind,
    message: str,
    headline: str,
    *,
    lines: Sequence[str],
    code: UserCode,
    crashed: bool,
) -> RegionError:
    """The error of a region whose worker was lost, from what the worker printed.

    ``message`` is the short form (the report's message and the log line),
    ``headline`` the sentence that opens the body.
    """
    printed, dumped = split_output(lines)
    dump = StackDump.parse(dumped)
    parts = [headline]
    shown = printed[-_SHOWN_LINES:]
    if shown:
        what = "line" if len(shown) == 1 else f"{len(shown)} lines"
        parts.append(f"The last {what} the worker printed:\n" + "\n".join(shown).rstrip("\n"))
    else:
        parts.append("The worker printed nothing in this region.")
    if dump.threads:
        parts.append("Its Python stack (faulthandler, most recent call first):\n" + dump.text(code))
    phase = _phase_of(dump)
    return RegionError(
        kind,
        message + (f" {phase}" if phase else "") + _last_printed(printed, message),
        "\n\n".join(parts) + "\n",
        dump.location(code, crashed),
    )


# The runner's functions, innermost first, and the phase each one runs: a
# stack dump that passes through one of them says when the region was lost.
_PHASES = (
    ("fresh_inputs", "while setup ran"),
    ("run_checks", "during the result checks"),
    ("timed_calls", "during the timed runs"),
    ("unguarded_call", "during warm-up"),
    ("guarded_call", "during the run under the region's guard"),
    ("mapped_calls", "during a watched run (the first call, which compiles, or steady state)"),
)


def _phase_of(dump: StackDump) -> str:
    """``during warm-up``: the phase the main thread was in, from the runner's frames."""
    for thread in dump.threads:
        names = {frame.name for frame in thread.frames}
        for function, phase in _PHASES:
            if function in names:
                return phase
    return ""


def _seconds(value: float) -> str:
    return f"{value:g} s"


# -- the scheduler ---------------------------------------------------------------


@dataclass(frozen=True)
class _Running:
    """A region in flight, for the error if it is lost."""

    policy: Policy
    region: Region
    started: float  # time.monotonic()
    mark: int  # the worker's output count when it started

    def result(self, error: RegionError) -> RegionResult:
        return RegionResult(
            suite=self.policy.suite,
            name=self.region.name,
            policy_path=self.policy.path.as_posix(),
            policy_line=self.region.line,
            guard=self.region.guard,
            has_checks=self.region.checks.any,
            wall_s=time.monotonic() - self.started,
            error=error,
        )


class Scheduler:
    """Runs regions one at a time in a worker process, replacing it when it is lost.

    Use as a context manager: leaving it stops the worker.
    """

    def __init__(
        self,
        repo_root: Path,
        *,
        cancel: Cancellation | None = None,
        forward: TextIO | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.repo_root = repo_root
        self.cancel = cancel
        self.forward = forward
        self.environ = dict(os.environ if environ is None else environ)
        self.startups: list[Ready] = []  # every worker started, for benchmarks and tests
        self._worker: _Worker | None = None
        # Workers that could not start, in a row, and the last one's error:
        # after two, the environment is broken and no region gets a worker.
        self._failed_starts: list[tuple[dict[str, str], RegionError]] = []
        self._jobs = itertools.count(1)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    def run(self, policy: Policy, region: Region) -> RegionResult:
        """Run ``region`` in the worker; a lost worker makes it an error, never an exception."""
        running = _Running(policy, region, time.monotonic(), 0)
        if self.cancel is not None and self.cancel.requested:
            return running.result(self._cancelled_before())
        env = worker_environment(self.environ, policy, region)
        if self._worker is not None and (self._worker.env != env or self._worker.exited()):
            self.close()
        try:
            return self._run(running, env)
        except BaseException:
            # A gate bug: leave no worker behind, and start afresh next time.
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.stop(dump=False)
            raise

    def _run(self, running: _Running, env: dict[str, str]) -> RegionResult:
        region = running.region
        label = f"{running.policy.suite}.{region.name}"
        job = Job(next(self._jobs), running.policy, region, self.repo_root)
        worker: _Worker | None = None
        for attempt in range(2):
            if self._worker is None:
                failed = self._start(running, env)
                if failed is not None:
                    return failed
            worker = self._worker
            assert worker is not None
            running = _Running(running.policy, region, running.started, worker.output.count)
            worker.output.label = label
            if worker.send(job):
                break
            # It died while idle, between regions: not this region's doing.
            self.close()
            if attempt:
                return self._lost(worker, running, _Event.EXITED)
        assert worker is not None
        event = worker.wait(time.monotonic() + region.timeout_s, self.cancel)
        if isinstance(event, Done) and event.number == job.number:
            worker.output.label = "worker"
            return event.result
        if not isinstance(event, _Event):
            raise RuntimeError(f"worker answered job {job.number} with {event!r:.300}")
        self._worker = None
        return self._lost(worker, running, event)

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
        worker = _Worker(self.repo_root, env, self.forward)
        timeout = running.region.timeout_s
        event = worker.wait(time.monotonic() + timeout, self.cancel)
        if isinstance(event, Ready):
            self.startups.append(event)
            self._failed_starts.clear()
            self._worker = worker
            return None
        if not isinstance(event, _Event):
            worker.stop(dump=False)
            raise RuntimeError(f"worker sent {event!r:.300} before it was ready")
        if event is _Event.CANCELLED:
            worker.stop(dump=False)
            return running.result(self._cancelled_running())
        returncode = worker.stop(dump=event is _Event.TIMED_OUT)
        code = UserCode(self.repo_root, running.policy.python_path)
        lines = worker.output.lines_since(0)
        if event is _Event.TIMED_OUT:
            kind = ErrorKind.TIMEOUT
            message = f"the worker process did not start within {_seconds(timeout)} (timeout_s)"
        else:
            kind = ErrorKind.CRASH
            message = f"the worker process could not start: it {_how_it_ended(returncode, lines)}"
        headline = (
            f"{message}. A worker imports jax and starts its backend before it runs a "
            "region; its output below says why it could not."
        )
        error = _lost_region_error(kind, message, headline, lines=lines, code=code, crashed=False)
        self._failed_starts.append((env, error))
        return running.result(error)

    def _lost(self, worker: _Worker, running: _Running, event: _Event) -> RegionResult:
        """Stop the worker that ran ``running``; the region's error says what happened."""
        timeout = running.region.timeout_s
        returncode = worker.stop(dump=event is not _Event.EXITED)
        worker.output.label = "worker"
        if event is _Event.EXITED and self._signalled_by_cancel(returncode):
            event = _Event.CANCELLED
        fresh = "The regions after it run in a fresh worker."
        if event is _Event.CANCELLED:
            kind = ErrorKind.CANCELLED
            message = self._cancelled_running().message
            headline = (
                f"The run was cancelled: {self._cancel_reason()} while this region was "
                "running. Its worker was stopped."
            )
        elif event is _Event.TIMED_OUT:
            kind = ErrorKind.TIMEOUT
            message = f"still running after {_seconds(timeout)} (timeout_s); stopped"
            headline = (
                f"The region was still running after its timeout_s of {_seconds(timeout)}, "
                f"so its worker was stopped. {fresh}"
            )
        else:
            kind = ErrorKind.CRASH
            how = _how_it_ended(returncode, worker.output.lines_since(running.mark))
            message = how.removeprefix("was ")
            headline = f"The worker process running this region {how}. {fresh}"
        code = UserCode(self.repo_root, running.policy.python_path)
        lines = worker.output.lines_since(running.mark)
        crashed = event is _Event.EXITED
        error = _lost_region_error(kind, message, headline, lines=lines, code=code, crashed=crashed)
        return running.result(error)

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
    forward: TextIO | None = None,
) -> RunResult:
    """Run every region of ``plan``, each in a worker process; never loses one.

    A region whose worker crashes, times out or is cancelled is an error in
    the result; so is a bug in the gate while it ran one (INTERNAL). After
    ``cancel`` is requested, the regions not yet run are CANCELLED errors.
    ``forward`` receives the workers' output, line by line.
    """
    suites = []
    with Scheduler(repo_root, cancel=cancel, forward=forward) as scheduler:
        for policy, regions in plan.steps:
            results = []
            for region in regions:
                started = time.monotonic()
                try:
                    result = scheduler.run(policy, region)
                except Exception as exc:
                    running = _Running(policy, region, started, 0)
                    result = running.result(_internal_error(exc))
                results.append(result)
            suites.append(SuiteResult(policy.suite, policy.path.as_posix(), tuple(results)))
    return RunResult(tuple(suites))


def _internal_error(exc: BaseException) -> RegionError:
    return RegionError(
        ErrorKind.INTERNAL,
        f"transfer-gate itself failed while running this region "
        f"({type(exc).__name__}: {exc}); this is a bug",
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )
