"""``run --base``'s two workers share a lock: their timed runs never overlap the other's work.

Two `TimingLock` objects on one file conflict as the two workers' do (an flock belongs to the
open file, not the process), so threads stand in for the workers here.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gate.region import quiet
from gate.region.quiet import TimingLock

pytestmark = pytest.mark.skipif(quiet.fcntl is None, reason="no flock on this platform")


def test_timed_runs_wait_for_the_other_workers_work_and_keep_it_waiting(tmp_path: Path) -> None:
    path = str(tmp_path / "timing.lock")
    head, base = TimingLock(path), TimingLock(path)
    events: list[str] = []
    base_working = threading.Event()
    release_base = threading.Event()

    def base_worker() -> None:
        with base.working():
            base_working.set()
            release_base.wait(10)
            events.append("base work done")

    thread = threading.Thread(target=base_worker)
    with head.working():
        thread.start()
        assert base_working.wait(10)  # both work at once: a shared lock each
        timer = threading.Timer(0.3, release_base.set)
        timer.start()
        with head.timing():  # waits until the base's work is done
            events.append("head timing")
    thread.join(10)
    timer.cancel()
    assert events == ["base work done", "head timing"]
    head.close()
    base.close()


def test_a_stuck_neighbour_delays_the_timing_at_most_wait_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet, "WAIT_S", 0.2)
    path = str(tmp_path / "timing.lock")
    stuck, other = TimingLock(path), TimingLock(path)
    entered: list[bool] = []
    with stuck.working(), other.working(), other.timing():
        entered.append(True)  # reached although `stuck` still holds its shared lock
    assert entered == [True]
    stuck.close()
    other.close()


def test_without_a_lock_file_nothing_is_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(quiet.TIMING_LOCK, raising=False)
    one, two = TimingLock.from_environment(), TimingLock(None)
    done: list[bool] = []
    # With a lock, the second exclusive hold would wait for the first (up to WAIT_S).
    with one.working(), one.timing(), two.working(), two.timing():
        done.append(True)
    assert done == [True]
    assert (one._fd, two._fd) == (None, None)
