"""Cancelling a run (SIGINT/SIGTERM, its time budget spent), and what a cancelled region reads.

The scheduler (`gate.isolation.scheduler`) polls a `Cancellation` between
regions and waits on it together with the worker, so a request stops the
running region at once and the report is still written.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType

from gate.isolation.lost_region import seconds
from gate.results.errors import ErrorKind, RegionError


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
                self._cancel(f"the run's time budget of {seconds(budget_s)} was spent")

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


def cancel_reason(cancel: Cancellation | None) -> str:
    """Why ``cancel`` was requested, as a report says it."""
    found = cancel.reason if cancel is not None else None
    return found if found is not None else "a signal arrived"


def cancelled_running(cancel: Cancellation | None) -> RegionError:
    """The error of a region whose worker the cancellation stopped (or never let start)."""
    what = f"{cancel_reason(cancel)} while this region was running"
    return RegionError(
        ErrorKind.CANCELLED,
        f"{what}; the worker was stopped",
        f"The run was cancelled: {what}. Its worker was stopped.\n",
    )


def cancelled_before(cancel: Cancellation | None) -> RegionError:
    """The error of a region the cancellation came before."""
    what = f"{cancel_reason(cancel)} before this region started"
    return RegionError(
        ErrorKind.CANCELLED, what, f"The run was cancelled: {what}; it did not run.\n"
    )
