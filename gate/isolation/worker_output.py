"""What a worker process prints, as the gate's process sees it.

`WorkerOutput` drains the worker's stdout and stderr (one pipe) in a thread,
so a full pipe never blocks the worker, keeps the last lines for the report
and forwards every line to the run's watcher (`gate.isolation.watcher`). `StackDump` reads the stack
dump faulthandler prints when a worker crashes or is asked for it before
being stopped (`gate.isolation.protocol.DUMP_SIGNAL`): it says which line of the user's
code was running. `RepeatedWarnings` keeps a platform warning that every worker prints at
start-up (`gate.machine.platform_warnings`) to one copy per run in what the watcher shows.
"""

from __future__ import annotations

import codecs
import collections
import os
import re
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gate.isolation.protocol import END_OF_JOB
from gate.isolation.watcher import BETWEEN_REGIONS, RunWatcher, first_in_run
from gate.machine.platform_warnings import known_warning
from gate.user_code import SourceLocation, UserCode

_KEPT_LINES = 400  # per worker
_MAX_LINE = 2000  # characters; a longer line (a progress bar without newlines) is cut


class WorkerOutput:
    """A worker's stdout and stderr: drained by a thread, kept as the last lines, forwarded.

    The lines go to ``watcher`` with `label`: the region of the job the worker
    is on. The scheduler names each job's region as it sends the job
    (`start_job`); the worker's end-of-job mark (`END_OF_JOB`) moves the label on
    to the next job's, so a region's last lines are its own even when its reply
    arrived first, and a mark read late cannot take the next region's lines.
    """

    def __init__(self, fd: int, watcher: RunWatcher | None) -> None:
        # The jobs sent whose end-of-job mark has not been read, oldest first, with their labels.
        self._jobs: collections.deque[tuple[int, str]] = collections.deque()
        self._watcher = watcher
        self._repeats = RepeatedWarnings(watcher) if watcher is not None else None
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        self._count = 0  # lines received so far
        self._partial = ""
        self._last_data = time.monotonic()
        self._ended = 0  # the last job whose end-of-job mark has been read
        self._lock = threading.Lock()
        self._job_ended = threading.Condition(self._lock)
        self._thread = threading.Thread(
            target=self._drain, args=(fd,), name="gate-worker-output", daemon=True
        )
        self._thread.start()

    @property
    def count(self) -> int:
        """A mark for `lines_since`: the number of lines received so far."""
        with self._lock:
            return self._count

    def lines_since(self, mark: int) -> list[str]:
        """The lines received after ``mark`` (as many as are kept), an unfinished one last."""
        with self._lock:
            kept = max(0, min(self._count - mark, len(self._lines)))
            lines = list(self._lines)[len(self._lines) - kept :]
            if self._partial:
                lines.append(self._partial)
            return lines

    def wait_quiet(
        self, mark: int, quiet_s: float, limit_s: float, gone: Callable[[], bool]
    ) -> None:
        """Wait until lines arrived after ``mark`` and then nothing for ``quiet_s``.

        Stops early once ``gone()`` says the writer has exited (`finish` then
        collects what is still in the pipe).
        """
        end = time.monotonic() + limit_s
        while time.monotonic() < end and not gone():
            with self._lock:
                settled = self._count > mark and time.monotonic() - self._last_data >= quiet_s
            if settled:
                return
            time.sleep(0.02)

    @property
    def label(self) -> str:
        """The region whose lines arrive now: the oldest job sent whose end has not been read."""
        return self._jobs[0][1] if self._jobs else BETWEEN_REGIONS

    def start_job(self, number: int, label: str) -> None:
        """Job ``number``, of region ``label``, is about to be sent: its lines are that region's."""
        with self._lock:
            self._jobs.append((number, label))

    def stop_jobs(self) -> None:
        """The worker is gone: what is still in the pipe is nobody's region."""
        with self._lock:
            self._jobs.clear()

    def wait_ended(self, number: int, timeout_s: float) -> bool:
        """Wait until job ``number``'s output has all been read (its end-of-job mark)."""
        with self._job_ended:
            return self._job_ended.wait_for(lambda: self._ended >= number, timeout_s)

    def finish(self, timeout_s: float) -> None:
        """Wait for the rest of the output (the pipe closes when the worker is gone)."""
        self._thread.join(timeout_s)

    def _drain(self, fd: int) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := os.read(fd, 1 << 16):
                self._add(decoder.decode(chunk))
            rest = decoder.decode(b"", final=True)
            if rest or self._partial:
                self._add(rest + "\n")
        finally:
            os.close(fd)

    def _add(self, text: str) -> None:
        with self._lock:
            self._last_data = time.monotonic()
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()
            if len(self._partial) > _MAX_LINE:
                parts.append(self._partial)
                self._partial = ""
            # Each run of lines with the label it was printed under: a job's end switches it.
            runs: list[tuple[str, list[str]]] = [(self.label, [])]
            for part in parts:
                # After a last line without a newline (print(x, end="")), the mark follows it.
                text, marked, number = part.partition(END_OF_JOB)
                if text or not marked:
                    # What a terminal shows of a line redrawn with "\r" (a progress bar): its
                    # last part. No "\r" is left inside, where GitHub would start a line
                    # that its prefix no longer guards ("x\r::error::...").
                    line = text.rstrip("\r").rsplit("\r", 1)[-1][:_MAX_LINE]
                    runs[-1][1].append(line)
                    self._lines.append(line)
                    self._count += 1
                if marked:
                    ended = _job_number(number)
                    self._ended = max(self._ended, ended)
                    while self._jobs and self._jobs[0][0] <= ended:
                        self._jobs.popleft()
                    runs.append((self.label, []))
            self._job_ended.notify_all()
        if self._watcher is not None and self._repeats is not None:
            # Outside the lock: a slow stderr must not stall the scheduler. The kept lines
            # (a crashed worker's report) stay whole; the log shows a known warning once.
            for label, lines in runs:
                shown = self._repeats.filter(lines)
                if shown:
                    self._watcher.output(label, shown)


class RepeatedWarnings:
    """One worker's output without the known platform warnings its run has shown already.

    The first copy in a run is shown, followed by a note that says why it is not repeated.
    The source line Python prints under a warning (JAX's own ``  warnings.warn(``) is left
    out of every copy: it says nothing. Any other line, a warning from the user's code
    included, passes untouched.
    """

    def __init__(self, watcher: RunWatcher) -> None:
        self._watcher = watcher
        self._after_known = False  # the last line was a known warning: its source line follows

    def filter(self, lines: Sequence[str]) -> list[str]:
        kept = []
        for line in lines:
            if self._after_known and line[:1].isspace():
                self._after_known = False
                continue
            warning = known_warning(line)
            self._after_known = warning is not None
            if warning is None:
                kept.append(line)
            elif first_in_run(self._watcher, warning.name):
                kept.append(line)
                kept.append(
                    f"(transfer-gate: every worker prints this {warning.name} warning; it is "
                    f"shown once per run: {warning.why})"
                )
        return kept


def _job_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # mangled: no job ends, and the scheduler's wait runs out
        return 0


# faulthandler's format, e.g.
#   Fatal Python error: Segmentation fault
#
#   Current thread 0x00007f3a5c0b8740 (most recent call first):
#     File "/repo/steps.py", line 12 in crash_step
_FATAL = "Fatal Python error: "
_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-fA-F]+")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>.*)$')
# Where `run_job` is: the thread that runs regions has it in its stack.
_WORKER_FILE = os.path.join("gate", "isolation", "worker.py")


def split_output(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """(what was printed, faulthandler's stack dump) from a worker's last lines."""
    for index, line in enumerate(lines):
        if line.startswith(_FATAL) or _THREAD.match(line):
            return list(lines[:index]), list(lines[index:])
    return list(lines), []


@dataclass(frozen=True)
class DumpedThread:
    heading: str  # "Current thread 0x... (most recent call first):"
    current: bool  # the thread that crashed or took the signal
    frames: tuple[traceback.FrameSummary, ...]  # innermost first, as dumped

    @property
    def runs_region(self) -> bool:
        """Whether this is the worker's thread that runs regions."""
        return any(f.name == "run_job" and f.filename.endswith(_WORKER_FILE) for f in self.frames)


@dataclass(frozen=True)
class StackDump:
    """faulthandler's dump of a worker's threads."""

    fatal: str | None  # "Fatal Python error: Aborted" for a crash
    threads: tuple[DumpedThread, ...]

    @classmethod
    def parse(cls, lines: Sequence[str]) -> StackDump:
        fatal = None
        threads: list[tuple[str, bool, list[traceback.FrameSummary]]] = []
        for line in lines:
            if line.startswith(_FATAL) and fatal is None:
                fatal = line
            elif match := _THREAD.match(line):
                threads.append((line, match["current"] == "Current thread", []))
            elif (frame := _FRAME.match(line)) and threads:
                threads[-1][2].append(
                    traceback.FrameSummary(
                        frame["file"], int(frame["line"]), frame["name"], lookup_line=False
                    )
                )
        return cls(fatal, tuple(DumpedThread(h, c, tuple(f)) for h, c, f in threads))

    def location(self, code: UserCode, crashed: bool) -> SourceLocation | None:
        """The user's line: where a crash happened, or where a stopped region was.

        For a crash the crashing thread ("Current thread") is asked first; for
        a region stopped on request, the thread running the region.
        """

        def first(thread: DumpedThread) -> bool:
            return thread.current if crashed else thread.runs_region

        for thread in sorted(self.threads, key=lambda t: not first(t)):
            where = code.locate(thread.frames[::-1])
            if where is not None:
                return where
        return None

    def text(self, code: UserCode) -> str:
        """The dump for a report: only threads in the user's code (all when none is)."""
        shown = [t for t in self.threads if any(code.is_user(f.filename) for f in t.frames)]
        parts = [self.fatal] if self.fatal else []
        for thread in shown or self.threads:
            frames = "".join(
                f'  File "{f.filename}", line {f.lineno} in {f.name}\n' for f in thread.frames
            )
            parts.append(f"{thread.heading}\n{frames}".rstrip("\n"))
        return "\n\n".join(parts)
