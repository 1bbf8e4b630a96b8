"""The wire between the gate and its workers: the requests, the replies, and their frames.

The parent (`gate.isolation.scheduler`) sends a worker (`gate.isolation.worker`) one request
at a time on its jobs pipe, and the worker answers each on its results pipe:
- `Check`: import every callable of a tree's policies, where the device is, answered with
  `Checked`;
- `Job`: run a region, answered with `Done` (and an `Entered` frame as it enters each
  stage, for the gate's live line);
- `Turns`: more timed runs of the held region, answered with `Timed`;
- `Trace`: the held region's traced runs, which a slower verdict names its lines from,
  answered with `Traced`;
- `Fetch`: the outputs of the last region a `Job` with ``fetch_later`` ran, on the host,
  answered with `Fetched`;
- `Go`: the job running now (one with ``times_after_go``) may start its timed runs; no
  answer, and it may come while the job runs. A job with ``reports_reach`` sends `Reached`
  as its first call starts, so that the parent may start the base's run beside it then.
Both are pipes of their own, so nothing the code under test prints to stdout or stderr can
corrupt the protocol. A frame is an 8-byte big-endian length and a pickle; the parent and
the worker are the same program, so pickling between them trusts nothing the code under
test could not already do.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gate.isolation.run_settings import DEFAULT_SETTINGS, RunSettings
from gate.policy.model import NamedCallables, Policy, Region
from gate.policy.problems import Problem
from gate.results.comparison import StepOutputs, StepSamples
from gate.results.errors import RegionError
from gate.results.line_times import OpTimes
from gate.results.records import RegionResult

# The parent sends this to a worker it is about to kill (timeout, cancelled
# run): faulthandler then prints where each thread is, for the report.
DUMP_SIGNAL = signal.SIGUSR1

_HEADER = 8

# Written to the output pipe, with the job's number and a newline, once a job's output is
# flushed and before its reply: the parent's reader then knows every line before it is that
# job's (the reply comes on another pipe and can overtake them). Never forwarded.
END_OF_JOB = "\x00transfer-gate: end of job "


@dataclass(frozen=True)
class Check:
    """Import every callable of ``policies`` (and of the invalid files' ``named``) from the
    tree at ``root``: a policy is checked where its regions will run."""

    number: int
    root: Path
    policies: tuple[Policy, ...]
    named: tuple[NamedCallables, ...] = ()
    # The worker's audit hook listens before this check imports anything (`Job.audited`): the
    # head's footprints then have what each module read as it was imported.
    audited: bool = False


@dataclass(frozen=True)
class Checked:
    """What `Check` found: the problems."""

    number: int
    problems: tuple[Problem, ...]
    fault: str | None = None  # the gate's own bug while checking, with its traceback


@dataclass(frozen=True)
class Job:
    """Run one region."""

    number: int  # echoed in `Done`, so a reply can never be matched to the wrong job
    policy: Policy
    region: Region
    repo_root: Path  # the tree the region's code comes from
    # Keep the region loaded afterwards for `Turns`, and send its outputs (``run --base``).
    hold: bool = False
    # Send the region's outputs on the host, without holding it (``run --base`` when the two
    # trees run in workers of their own).
    outputs: bool = False
    # The run's settings for the region's call (traces kept, regions traced). Sent with each
    # job, not in the worker's environment (`gate.isolation.run_settings`).
    settings: RunSettings = DEFAULT_SETTINGS
    # (the head's top level, this tree's): folders of the head's checkout on `sys.path` that a
    # base tree's worker takes in its own checkout instead (`gate.isolation.own_tree`).
    moved_paths: tuple[tuple[Path, Path], ...] = ()
    # The tree's git top level, to record the region's footprint under it (``run --base``'s
    # head, `gate.witness.footprint`); None: not recorded.
    footprint_top: Path | None = None
    # The worker's audit hook listens before this job (`gate.witness.footprint`): in both trees
    # of a ``run --base`` that records footprints, so that both time their steps under it
    # alike. Never in a plain run: the hook hears every audit event after it, a Python call
    # each (~16 ms a small region on the CPU, ~4 µs a call of a tiny step).
    audited: bool = False
    # The head's run while the base's runs beside it on the other cores (``run --base`` on the
    # CPU, `gate.compare.session`): its timed runs wait for `Go`, sent once the base's run has
    # ended, so that nothing of the base's (compiling, above all) runs beside them.
    times_after_go: bool = False
    # Send `Reached` once the region's code is imported, as its first call starts: what its
    # footprint holds so far (``run --base``'s head on the CPU, with ``times_after_go``: the
    # parent starts the base's run beside it there when the change reached those files).
    reports_reach: bool = False

    @property
    def fetch_later(self) -> bool:
        """Keep the outputs (`hold`, `outputs`) as they are, on the device, and send them only
        when `Fetch` asks: a job that records its footprint (``run --base``'s head), since the
        footprint may show the base has the region unchanged, and then nothing is fetched,
        setup does not run twice more, no array is hashed or sent. The next job lets them go."""
        return self.footprint_top is not None


@dataclass(frozen=True)
class Turn:
    """``runs`` timed runs of the region the worker holds, on ``cpu``."""

    runs: int
    cpu: int | None = None  # every thread of the worker on this CPU for the runs (`cores`)


@dataclass(frozen=True)
class Turns:
    """Time ``turns`` one after the other."""

    number: int
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Trace:
    """The traced runs of the region the worker holds."""

    number: int


@dataclass(frozen=True)
class Fetch:
    """The outputs a `Job` with ``fetch_later`` kept, on the host."""

    number: int


@dataclass(frozen=True)
class Go:
    """Job ``number``'s timed runs may start (`Job.times_after_go`). Not a request: the worker
    takes it as it arrives, while that job runs, and answers nothing."""

    number: int


@dataclass(frozen=True)
class Ready:
    """The worker has imported jax and initialised its devices."""

    pid: int
    startup_s: float


@dataclass(frozen=True)
class Entered:
    """The running job's region has entered a stage (`gate.region.stages`), for the live line."""

    number: int
    stage: str  # a `Stage` value: the parent shows it as it is


@dataclass(frozen=True)
class Reached:
    """The paths under the tree's top level that the running job's region has reached once its
    code is imported: its footprint so far, the files and the absent paths (`Job.reports_reach`).
    The footprint only grows from here: a change to any of them is a change to the region."""

    number: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Done:
    """A region's result."""

    number: int
    result: RegionResult
    outputs: StepOutputs | None = None  # a held region's outputs on the host


@dataclass(frozen=True)
class Timed:
    """The step times `Turns` asked for, a `StepSamples` per turn; a turn with an error is
    the last."""

    number: int
    samples: tuple[StepSamples, ...]


@dataclass(frozen=True)
class Traced:
    """The op times `Trace` asked for (None: no region was traced: none held, or its cost run
    measured nothing)."""

    number: int
    times: OpTimes | None


@dataclass(frozen=True)
class Fetched:
    """What `Fetch` asked for: the outputs on the host, or why there are none (the user's
    setup failing as it repeats is the region's error, as in the job itself)."""

    number: int
    outputs: StepOutputs | None
    error: RegionError | None = None


Request = Check | Job | Turns | Trace | Fetch
Message = Request | Go | Checked | Ready | Entered | Reached | Done | Timed | Traced | Fetched


def encode(message: Message) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(payload).to_bytes(_HEADER, "big") + payload


def write_frame(fd: int, message: Message) -> None:
    """Write one frame to ``fd``, blocking until all of it is written."""
    write_all(fd, encode(message))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class FrameBuffer:
    """Bytes read from a pipe, cut into frames as they complete."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> Iterator[Message]:
        self._buffer += chunk
        while len(self._buffer) >= _HEADER:
            size = int.from_bytes(self._buffer[:_HEADER], "big")
            if len(self._buffer) < _HEADER + size:
                return
            payload = bytes(self._buffer[_HEADER : _HEADER + size])
            del self._buffer[: _HEADER + size]
            message = pickle.loads(payload)
            if not isinstance(message, Message):
                raise TypeError(f"unexpected message from the other side: {message!r:.200}")
            yield message
