"""Threads of the user's: the step's own are waited for while the map watches them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gate.region.errors import RegionAbort
from gate.results.errors import ErrorKind, RegionError
from gate.user_code import SourceLocation

# How long threads the step started may run on after it returned, while the
# map still watches them.
THREAD_GRACE_S = 5.0


def join_step_threads(
    before: set[threading.Thread], step_location: Callable[[], SourceLocation | None]
) -> None:
    """Wait for the threads the step started, while the map still watches.

    A transfer a background thread makes after the step returned would
    otherwise never be seen; a thread still running after the grace
    period makes the region an error rather than an unwatched pass.
    """
    deadline = time.monotonic() + THREAD_GRACE_S
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in started if t.is_alive()]
    if alive:
        names = ", ".join(alive)
        threads = f"thread{'s' if len(alive) > 1 else ''} {names}"
        raise RegionAbort(
            RegionError(
                ErrorKind.STEP,
                f"the step left {threads} running {THREAD_GRACE_S:g} s after it "
                "returned; the gate cannot watch transfers they make later: join them "
                "before the step returns",
                f"threads still alive after the step: {names}",
                step_location(),
            )
        )


def user_threads_alive() -> bool:
    """Threads besides the main one and the worker's own ("gate-...") are running."""
    main = threading.main_thread()
    return any(
        t is not main and not t.name.startswith("gate-") and t.is_alive()
        for t in threading.enumerate()
    )
