"""Starting a worker: early, on a device of the pool, again while another process holds it.

A worker that cannot start becomes the error of the region it was for, with its output; after
two in a row for one environment, the environment is broken and no later region gets a
worker. A device held by another process is asked again for `BUSY_WAIT_S` (a TPU chip can
refuse the next process for a few seconds after one ended: a `doctor` run just before, a
worker just replaced); longer, it is held, and the run ends with `DeviceBusy`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from gate.isolation.cancellation import Cancellation, cancelled_running
from gate.isolation.device_pool import DevicePool
from gate.isolation.lost_region import how_it_ended, lost_region_error, seconds
from gate.isolation.protocol import Ready
from gate.isolation.spawn import spawn_if_device_free, take_first_worker
from gate.isolation.watcher import STARTING_A_WORKER, RunWatcher
from gate.isolation.worker_process import WaitEvent, WorkerProcess
from gate.machine.holders import busy_device_problem, busy_platform
from gate.results.errors import ErrorKind, RegionError
from gate.user_code import UserCode

# Workers in a row that may fail to start before the rest of the regions
# are not given one (a broken environment, e.g. no GPU for JAX_PLATFORMS=cuda).
START_ATTEMPTS = 2
# A device held by another process: how long a worker's start is tried again (seconds, from
# the environment's DEVICE_WAIT when set), and how often.
BUSY_WAIT_S = 30.0
DEVICE_WAIT = "TRANSFER_GATE_DEVICE_WAIT_S"
BUSY_RETRY_S = 2.0
WAITING_FOR_THE_DEVICE = "waiting for the device"

# Tells the run's watcher that region ``label`` has entered a stage (in which tree, if two).
Announce = Callable[[str, str, "str | None"], None]


class WorkerStarts:
    """The workers a scheduler starts, and those that could not start."""

    def __init__(
        self,
        repo_root: Path,
        environ: Mapping[str, str],
        watcher: RunWatcher | None,
        cancel: Cancellation | None,
        announce: Announce,
        *,
        beside: bool = False,
    ) -> None:
        self.repo_root = repo_root
        # Its workers run beside another scheduler's, which holds the device's slot
        # (``run --base``'s base tree on a device that admits two, `Slot.shared`).
        self.beside = beside
        self.environ = environ
        self.watcher = watcher
        self.cancel = cancel
        self.announce = announce
        self.startups: list[Ready] = []  # every worker started, for benchmarks and tests
        # Workers that could not start, in a row, and the last one's error:
        # after two, the environment is broken and no region gets a worker.
        self._failed: list[tuple[dict[str, str], RegionError]] = []
        self._early: WorkerProcess | None = None  # started by `start_early`, not yet waited on

    def start_early(self, env: dict[str, str]) -> None:
        """Start a worker for ``env`` without waiting for it to be ready; not when it would
        have to wait for a device (the first request does that, saying so)."""
        if self._early is not None:
            return
        if self.beside:  # the first worker, and the device's slot, are the other scheduler's
            self._early = WorkerProcess.start(self.repo_root, env, self.watcher, None)
            return
        self._early = self._first(env)
        if self._early is None:
            spawned = spawn_if_device_free(self.repo_root, env)
            self._early = WorkerProcess(spawned, self.watcher) if spawned is not None else None

    def _first(self, env: dict[str, str]) -> WorkerProcess | None:
        """The worker the CLI started for ``env`` as the run began (`gate.isolation.spawn`);
        one it started for another environment is stopped."""
        first = take_first_worker(self.repo_root, env)
        return WorkerProcess(first, self.watcher) if first is not None else None

    def stop_early(self) -> None:
        """Stop the worker `start_early` began, if nobody took it."""
        early, self._early = self._early, None
        if early is not None:
            early.stop(dump=False)

    def start(
        self, label: str, env: dict[str, str], timeout_s: float, tree: str | None = None
    ) -> WorkerProcess | RegionError:
        """A worker started and ready; or the error that says why there is none.

        A device that refuses the worker because another process holds it is asked again for
        `BUSY_WAIT_S`; past that, `DeviceBusy`.
        """
        failed = self._failed
        if len(failed) >= START_ATTEMPTS and all(e == env for e, _ in failed):
            last = failed[-1][1]
            return replace(
                last,
                message=f"{last.message} (not tried again: "
                f"{START_ATTEMPTS} workers in a row could not start)",
            )
        self.announce(label, STARTING_A_WORKER, tree)
        # Beside another of the gate's workers, a refusal is the device's answer that it
        # admits one process: asking again would only wait for the other to end.
        wait_s = 0.0 if self.beside else _device_wait_s(self.environ)
        refused_until = time.monotonic() + wait_s
        while True:
            worker = self._spawn(label, env, tree)
            if worker is None:
                return cancelled_running(self.cancel)
            event = worker.wait(time.monotonic() + timeout_s, self.cancel)
            if isinstance(event, Ready):
                self.startups.append(event)
                self._failed.clear()
                return worker
            if not isinstance(event, WaitEvent):
                worker.stop(dump=False)
                raise RuntimeError(f"worker sent {event!r:.300} before it was ready")
            if event is WaitEvent.CANCELLED:
                worker.stop(dump=False)
                return cancelled_running(self.cancel)
            returncode = worker.stop(dump=event is WaitEvent.TIMED_OUT)
            lines = worker.output.lines_since(0)
            text = "\n".join(lines)
            if event is WaitEvent.EXITED and busy_platform(text) is not None:
                cancelled = self.cancel is not None and self.cancel.requested
                if time.monotonic() < refused_until and not cancelled:
                    self.announce(label, WAITING_FOR_THE_DEVICE, tree)
                    time.sleep(min(BUSY_RETRY_S, max(0.0, refused_until - time.monotonic())))
                    continue
                raise DeviceBusy(busy_device_problem(text) or text.strip(), text)
            break
        code = UserCode(self.repo_root)
        if event is WaitEvent.TIMED_OUT:
            kind = ErrorKind.TIMEOUT
            message = f"the worker process did not start within {seconds(timeout_s)} (timeout_s)"
        else:
            kind = ErrorKind.CRASH
            message = f"the worker process could not start: it {how_it_ended(returncode, lines)}"
        headline = (
            f"{message}. A worker imports jax and starts its backend before it runs a "
            "region; its output below says why it could not."
        )
        error = lost_region_error(kind, message, headline, lines=lines, code=code, crashed=False)
        self._failed.append((env, error))
        return error

    def _spawn(self, label: str, env: dict[str, str], tree: str | None) -> WorkerProcess | None:
        """A new worker for ``env`` (the one `start_early` began, if it is for ``env``), on a
        device of the pool when it will open one; None when the run is cancelled while it
        waits for a device."""
        early, self._early = self._early, None
        if early is not None and early.env == env:
            return early
        if early is not None:
            early.stop(dump=False)
        first = self._first(env)
        if first is not None:
            return first
        pool = DevicePool.for_environment(env)
        device = None
        if pool is not None and not (self.beside and pool.admits_two):

            def waiting(holders: str) -> None:
                self.announce(label, f"{WAITING_FOR_THE_DEVICE} (held by {holders})", tree)

            device = pool.take(self.cancel, waiting)
            if device is None:
                return None
        return WorkerProcess.start(self.repo_root, env, self.watcher, device)


def _device_wait_s(environ: Mapping[str, str]) -> float:
    try:
        return max(0.0, float(environ.get(DEVICE_WAIT, BUSY_WAIT_S)))
    except ValueError:
        return BUSY_WAIT_S


class DeviceBusy(Exception):
    """The device refused the worker, held by another process, past `BUSY_WAIT_S`: the run's
    one error (`gate.isolation.run_loop`), not one per region."""

    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
