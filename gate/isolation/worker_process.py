"""One worker process, seen from the gate: starting it, talking to it, stopping it.

Each worker runs in a session of its own: Ctrl-C at a terminal reaches only
the gate, which decides what to stop, and killing the worker's process group
also stops anything the code under test started. The worker's stdout and
stderr go through one pipe that `gate.isolation.worker_output` drains.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import selectors
import threading
import time
from pathlib import Path

from gate.isolation.cancellation import Cancellation
from gate.isolation.device_pool import HeldSlot
from gate.isolation.protocol import (
    DUMP_SIGNAL,
    FrameBuffer,
    Go,
    Message,
    Request,
    write_frame,
)
from gate.isolation.spawn import Spawned, kill_group, spawn
from gate.isolation.watcher import RunWatcher
from gate.isolation.worker_output import WorkerOutput

# After DUMP_SIGNAL: how long the stack dump may take to arrive.
_DUMP_QUIET_S = 0.2
_DUMP_LIMIT_S = 2.0
# A worker with nothing left to do gets this long to exit before it is killed.
_EXIT_GRACE_S = 5.0
# How often a wait checks whether the worker has died with its pipes still
# open (a process it forked holds them).
_POLL_S = 0.25


class WaitEvent(enum.Enum):
    """What ended a wait, other than a message."""

    EXITED = "exited"
    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"


class WorkerProcess:
    """A worker process and the pipes to it."""

    def __init__(self, spawned: Spawned, watcher: RunWatcher | None) -> None:
        """The worker `gate.isolation.spawn.spawn` started, which holds its device until
        `stop` has seen the process gone."""
        self.process = spawned.process
        self.env = spawned.env  # as asked for, without the device's variables
        self.device = spawned.device
        self.output = WorkerOutput(spawned.output, watcher)
        self._jobs: int | None = spawned.jobs
        self._sending = threading.Lock()  # a frame at a time; never one to a closed pipe
        self._results: int | None = spawned.results
        self._frames = FrameBuffer()
        self._pending: collections.deque[Message] = collections.deque()
        self.returncode: int | None = None

    @classmethod
    def start(
        cls,
        repo_root: Path,
        env: dict[str, str],
        watcher: RunWatcher | None,
        device: HeldSlot | None = None,
    ) -> WorkerProcess:
        """Start the worker with ``env``, on ``device`` (its variables over ``env``)."""
        return cls(spawn(repo_root, env, device), watcher)

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

    def send(self, job: Request | Go) -> bool:
        """Hand ``job`` to the worker; False when it is already gone. A `Go` may come from
        another thread than the requests' (`gate.compare.session`): one frame at a time."""
        with self._sending:
            if self._jobs is None:
                return False
            try:
                write_frame(self._jobs, job)
            except BrokenPipeError:
                return False
            return True

    def wait(self, deadline: float, cancel: Cancellation | None) -> Message | WaitEvent:
        """The worker's next message, or why none came before ``deadline``."""
        with selectors.DefaultSelector() as selector:
            if self._results is not None:
                selector.register(self._results, selectors.EVENT_READ)
            if cancel is not None:
                selector.register(cancel.fileno(), selectors.EVENT_READ)
            while not self._pending:
                if self._results is None:
                    return WaitEvent.EXITED
                if cancel is not None and cancel.requested:
                    return WaitEvent.CANCELLED
                left = deadline - time.monotonic()
                if left <= 0:
                    return WaitEvent.TIMED_OUT
                ready = selector.select(min(left, _POLL_S))
                if any(key.fd == self._results for key, _ in ready):
                    chunk = os.read(self._results, 1 << 16)
                    if not chunk:
                        selector.unregister(self._results)
                        self._close_results()
                        continue
                    self._pending.extend(self._frames.feed(chunk))
                elif not ready and self.exited():
                    return WaitEvent.EXITED
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
            self.returncode = kill_group(self.process)
        self._close_jobs()
        self._close_results()
        self.output.finish(_DUMP_LIMIT_S)
        if self.returncode is not None and self.device is not None:
            # Gone and reaped: the next worker may have the device. One that would not die
            # keeps it, so that none starts beside it.
            self.device.release()
            self.device = None
        return self.returncode

    def close(self) -> None:
        """Let an idle worker exit (its jobs pipe closes), then make sure it did."""
        self._close_jobs()
        end = time.monotonic() + _EXIT_GRACE_S
        while not self.exited() and time.monotonic() < end:
            time.sleep(0.01)
        self.stop(dump=False)

    def _close_jobs(self) -> None:
        with self._sending:
            if self._jobs is not None:
                os.close(self._jobs)
                self._jobs = None

    def _close_results(self) -> None:
        if self._results is not None:
            os.close(self._results)
            self._results = None
