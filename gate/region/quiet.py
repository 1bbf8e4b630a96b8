"""Timed runs kept apart from the other tree's work: a lock ``run --base``'s two workers share.

``run --base`` runs a region in the head's worker and in the base's at the same time: what
they do first (importing, compiling, the transfer map, checks) is on different cores and
finishes in about half the time. Only their timed runs must not overlap anything: so each
worker holds the lock shared while it works on a region and exclusively for its timed runs.
A worker that reaches its timed runs waits for the other to finish what it is doing, or to
reach its own timed runs; the other waits while those run.

The lock is a file named by ``TIMING_LOCK`` in the worker's environment (the session makes
it); without one (a plain run, or ``check_region``) every method does nothing. A wait is
bounded (`WAIT_S`): a region that hangs in the other worker delays the timing, never stops it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # not POSIX: no lock, the trees' runs may overlap
    fcntl = None  # type: ignore[assignment]

TIMING_LOCK = "TRANSFER_GATE_TIMING_LOCK"
WAIT_S = 60.0
_POLL_S = 0.005


class TimingLock:
    """The shared lock of ``run --base``'s two workers, or nothing."""

    def __init__(self, path: str | None) -> None:
        self._fd: int | None = None
        if path and fcntl is not None:
            with contextlib.suppress(OSError):  # no lock is better than no run
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    @classmethod
    def from_environment(cls) -> TimingLock:
        return cls(os.environ.get(TIMING_LOCK))

    def _take(self, kind: int) -> None:
        if self._fd is None or fcntl is None:
            return
        end = time.monotonic() + WAIT_S
        while True:
            try:
                fcntl.flock(self._fd, kind | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > end:
                    return  # the other worker is stuck: time without the lock
                time.sleep(_POLL_S)

    def _drop(self) -> None:
        if self._fd is not None and fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Shared for the block: the other worker may work too, but not time."""
        self._take(fcntl.LOCK_SH if fcntl is not None else 0)
        try:
            yield
        finally:
            self._drop()

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Exclusive for the block (inside `working`): the other worker waits meanwhile."""
        self._drop()
        self._take(fcntl.LOCK_EX if fcntl is not None else 0)
        try:
            yield
        finally:
            self._drop()
            self._take(fcntl.LOCK_SH if fcntl is not None else 0)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
