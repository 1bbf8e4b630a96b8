"""Who watches a run as it goes: each region's stages and what its worker prints.

The scheduler tells a `RunWatcher` when a region enters a stage (``starting a
worker``, then the engine's own, `gate.region.stages`) and hands it every line
a worker prints, with the region that was running. The CLI's watcher
(`gate.report.live`) turns them into the live output; `PrefixedOutput` is the
plain one: each line as ``[suite.region] line``, stages not shown.

Every worker of a run reports to the run's one watcher, so "once per run" is once per
watcher: `first_in_run` keeps what each run has been shown.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Sequence
from typing import Protocol, TextIO

from gate.printable import write

# The label of what a worker prints between regions (importing jax, exiting).
BETWEEN_REGIONS = "worker"
# What the scheduler itself announces before a region's worker is ready.
STARTING_A_WORKER = "starting a worker"


class RunWatcher(Protocol):
    """Told of each region's stages and its worker's output, from the scheduler's threads."""

    def stage(self, label: str, stage: str) -> None:
        """Region ``label`` (``suite.region``) has entered ``stage``."""

    def output(self, label: str, lines: Sequence[str]) -> None:
        """A worker printed ``lines`` while ``label`` ran (`BETWEEN_REGIONS` when none did).

        Called from the thread that drains the worker's pipe: a slow watcher must not block
        the worker for long.
        """


class PrefixedOutput:
    """Every line to ``stream`` as ``[label] line``; the stages are not shown."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def stage(self, label: str, stage: str) -> None:
        pass

    def output(self, label: str, lines: Sequence[str]) -> None:
        # A closed or broken stderr must not stop the run: the report is what counts.
        with contextlib.suppress(OSError, ValueError):
            write("".join(f"[{label}] {line}\n" for line in lines), self.stream)
            self.stream.flush()


# What each run's watcher has been shown once, by key; forgotten with the watcher.
_shown: weakref.WeakKeyDictionary[RunWatcher, set[str]] = weakref.WeakKeyDictionary()
_shown_lock = threading.Lock()  # the workers' output threads ask at once


def first_in_run(watcher: RunWatcher, key: str) -> bool:
    """Whether ``key`` is new to the run that ``watcher`` watches; it is not, from then on.

    A watcher that cannot be referenced weakly (a class with ``__slots__``) is told
    everything every time: more lines, never fewer.
    """
    with _shown_lock:
        try:
            seen = _shown.setdefault(watcher, set())
        except TypeError:
            return True
        if key in seen:
            return False
        seen.add(key)
        return True
