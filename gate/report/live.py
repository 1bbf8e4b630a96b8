"""The run as it goes, on stderr: a line per region as it finishes, and what is running now.

`LiveOutput` is the CLI's run watcher (the scheduler's side is
`gate.isolation.watcher`): it hears each region's stages and its worker's
output from the scheduler's threads, and each region's result from ``run``.

- Each finished region gets its row, ``[3/20] FAIL  train.step  1 failing line …``, and
  under a failing one the lines to fix; ``-q`` keeps only the failing regions,
  ``-v`` adds the transfers that pass and how long each stage took.
- On a terminal, the last line shows the running region and its stage
  (``[4/20] train.eval: compiling 2 s``), redrawn in place every second and
  wiped before anything else is written, so it never mixes with real lines.
- Under GitHub Actions each region's row heads a ``::group::`` holding what its
  worker printed and its stages, folded in the log; its lines to fix follow
  outside the group, where they are seen. Elsewhere a region's first lines
  (`SHOWN_LINES`, base and head together) are written as they come, a line
  above its row counts the rest, and ``-v`` writes them all. Either way each is
  ``[suite.region] line``: never a line of the code under test's that starts
  with ``::``, a workflow command to GitHub.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TextIO

from gate.printable import command, flat, printable
from gate.report.terminal import progress_lines
from gate.results.records import RegionResult
from gate.text import duration_text

_DIM = "\x1b[2m"
_RESET = "\x1b[0m"
_WIPE = "\r\x1b[K"  # back to the line's start, and clear it
_REDRAW_S = 1.0  # how often the running line's clock moves on
_HELD_LINES = 1000  # in groups: a region's first lines kept, and as many of its last
# Elsewhere, a region's lines shown as they come, for base and head and every run together: a
# step that prints its loss prints it every run (30 times a region, hundreds with --base).
SHOWN_LINES = 10


class LiveOutput:
    """What ``run`` writes to ``stream`` while its regions run. Use as a context manager."""

    def __init__(
        self,
        stream: TextIO,
        *,
        color: bool = False,
        quiet: bool = False,
        verbose: bool = False,
        running_line: bool = False,
        groups: bool = False,
        rows: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.color = color
        self.quiet = quiet
        self.verbose = verbose
        self.running_line = running_line
        self.groups = groups
        # Off for `baseline`: a region's transfers are what it accepts, not failures to fix.
        self.rows = rows
        self.total = 0  # regions planned; set once the plan is known
        self._clock = clock
        self._done = 0
        self._lock = threading.RLock()
        # Per region started and not finished: the stages entered, with when.
        self._stages: dict[str, list[tuple[str, float]]] = {}
        self._held: dict[str, _Held] = {}  # in groups: a region's output until its row
        self._printed: dict[str, int] = {}  # elsewhere: the lines each label printed so far
        self._running: tuple[str, str, float] | None = None  # label, stage, since
        self._shown = False  # the running line is on the screen
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @classmethod
    def for_stream(
        cls,
        stream: TextIO,
        environ: Mapping[str, str],
        *,
        color: bool,
        quiet: bool = False,
        verbose: bool = False,
        rows: bool = True,
    ) -> LiveOutput:
        """Groups under GitHub Actions; the running line on a terminal that can redraw."""
        groups = environ.get("GITHUB_ACTIONS") == "true"
        terminal = shows_escapes(stream, environ)
        return cls(
            stream,
            color=color,
            quiet=quiet,
            verbose=verbose,
            running_line=terminal and not groups,
            groups=groups,
            rows=rows,
        )

    def __enter__(self) -> LiveOutput:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the clock and wipe the running line; what a region still held is written."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        with self._lock:
            self._running = None
            self._wipe()
            for held in self._held.values():  # a region that never finished
                self._write("".join(f"{line}\n" for line in held.lines()))
            self._held.clear()
            self._write("".join(f"{line}\n" for line in map(self._left_out, list(self._printed))))
            self._printed.clear()

    # -- what the scheduler says ------------------------------------------------

    def stage(self, label: str, stage: str) -> None:
        now = self._clock()
        with self._lock:
            self._stages.setdefault(label, []).append((stage, now))
            self._running = (label, stage, now)
            self._draw()
        if self.running_line and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="gate-live", daemon=True)
            self._ticker.start()

    def output(self, label: str, lines: Sequence[str]) -> None:
        with self._lock:
            if self.groups and label in self._stages:
                # Prefixed here too: GitHub runs a line that starts with "::" as a workflow
                # command, and the code under test (a fork's, say) must not end the group,
                # fake an annotation or stop the gate's own commands.
                held = self._held.setdefault(label, _Held())
                held.extend(f"[{label}] {line}" for line in lines)
                return
            before = self._printed.get(label, 0)
            self._printed[label] = before + len(lines)
            # -v shows every line; otherwise the first few, and `_left_out` counts the rest.
            shown = lines if self.verbose else lines[: max(0, SHOWN_LINES - before)]
            if shown:
                self._wipe()
                self._write("".join(f"[{label}] {line}\n" for line in shown))
                self._draw()

    # -- what run says ----------------------------------------------------------

    def finished(self, region: RegionResult) -> None:
        """``region``'s row (as judged: after the baseline), its lines to fix, its stages."""
        label = region.classname
        with self._lock:
            self._done += 1
            stages = _durations(self._stages.pop(label, []), self._clock())
            held = self._held.pop(label, _Held()).lines()
            if self._running is not None and self._running[0] == label:
                self._running = None
            rows = (
                progress_lines(self._done, self.total, region, self.color, self.verbose)
                if self.rows
                else [label]
            )
            timings = [f"    stages: {stages}"] if stages else []
            left_out = self._left_out(label)
            shown = self.rows and not (self.quiet and region.passed)
            self._wipe()
            if self.groups and (shown or held):
                # Folded: the worker's output and the stages. Seen: the lines to fix.
                title = flat(rows[0], escapes=self.color)
                self._write(f"{command(f'::group::{title}', escapes=self.color)}\n", own=True)
                self._write("".join(f"{line}\n" for line in [*held, *timings]))
                self._write(f"{command('::endgroup::')}\n", own=True)
                self._write("".join(f"{line}\n" for line in rows[1:]))
            else:
                lines = ([*rows, *timings] if self.verbose else rows) if shown else []
                self._write("".join(f"{line}\n" for line in [left_out, *lines] if line))
            self._draw()

    def _left_out(self, label: str) -> str:
        """``[label] (… 20 more lines …)`` for what `output` did not show of ``label``'s
        lines, once; "" when it showed them all."""
        more = self._printed.pop(label, 0) - SHOWN_LINES
        if self.verbose or more <= 0:
            return ""
        return (
            f"[{label}] (transfer-gate: {more} more lines it printed are not shown: "
            f"{SHOWN_LINES} a region; -v shows every line)"
        )

    # -- the running line -------------------------------------------------------

    def _tick(self) -> None:
        while not self._stop.wait(_REDRAW_S):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        if not self.running_line or self._running is None:
            return
        label, stage, since = self._running
        count = f"[{self._done + 1}/{self.total}] " if self.total else ""
        elapsed = int(self._clock() - since)
        text = f"{count}{label}: {stage}" + (f" {elapsed} s" if elapsed else "")
        text = text[: _width(self.stream) - 1]  # a line that wraps could not be wiped
        self._write(f"{_WIPE}{_DIM}{text}{_RESET}" if self.color else f"{_WIPE}{text}")
        self._shown = True

    def _wipe(self) -> None:
        if self._shown:
            self._write(_WIPE)
            self._shown = False

    def _write(self, text: str, *, own: bool = False) -> None:
        """``text`` to the stream through the text gate; ``own``: a workflow command the gate
        built with `command`, written as it is."""
        if not text:
            return
        # A terminal (colour, the running line) keeps the gate's own escapes.
        text = text if own else printable(text, escapes=self.color or self.running_line)
        # A closed or broken stderr must not stop the run: the report is what counts.
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text)
            self.stream.flush()


class _Held:
    """A region's output until its row: its first and last lines, the middle counted.

    Bounded, so a step printing millions of lines costs the gate no more memory than
    ``2 * _HELD_LINES`` of them; the report keeps the worker's last lines anyway.
    """

    def __init__(self) -> None:
        self.head: list[str] = []
        self.tail: collections.deque[str] = collections.deque(maxlen=_HELD_LINES)
        self.dropped = 0

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            if len(self.head) < _HELD_LINES:
                self.head.append(line)
                continue
            if len(self.tail) == self.tail.maxlen:
                self.dropped += 1
            self.tail.append(line)

    def lines(self) -> list[str]:
        cut = [f"... {self.dropped} lines left out ..."] if self.dropped else []
        return [*self.head, *cut, *self.tail]


def _durations(stages: list[tuple[str, float]], end: float) -> str:
    """``importing 40.1 ms, compiling 1.20 s, …``: each stage until the next began."""
    if not stages:  # cancelled before it started
        return ""
    ends = [at for _, at in stages[1:]] + [end]
    return ", ".join(
        f"{name} {duration_text(max(0.0, stop - at))}"
        for (name, at), stop in zip(stages, ends, strict=True)
    )


def shows_escapes(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether ``stream`` is a terminal that acts on ANSI escapes (colour, redrawing a line)."""
    return is_terminal(stream) and environ.get("TERM") != "dumb"


def is_terminal(stream: TextIO) -> bool:
    """``stream.isatty()``, False for a closed stream or one that is not a real file."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a real file
        return False


def _width(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns if columns > 1 else 80  # a terminal that says nothing of its size: 0
