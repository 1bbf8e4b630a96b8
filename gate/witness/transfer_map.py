"""The transfer map: every transfer of a run, charged to the user line that made it.

JAX's guard in ``log`` mode writes one C++ warning per transfer to file
descriptor 2 and names no source line; ``disallow`` names the line but stops
at the first offender. So for the map the gate runs the step under the
logging levels with fd 2 pointed at a temporary file (a file, not a pipe: a
full pipe would block the writer) and listens to the user's code
(`gate.witness.code_events`: ``sys.monitoring`` on Python 3.12+, ``sys.settrace``
on 3.11): at every call, line and return event in the user's files it reads what
the guard appended and charges it to the line that was executing.

Each guard line carries the native id of the thread that wrote it, so a
transfer made by a thread the step started is charged to that thread's line.
Lines that are not the guard's (the step's own prints to stderr) are passed
through to the real stderr when the run ends.

Where a line is one simple statement with one call, to a jitted function,
with plain names or numbers as its arguments, the map also works out (before
the line runs) which host values that call will move (`gate.witness.line_calls`), and
names each logged move after its argument when the two agree exactly. Where an
eager operator runs on a device array and a host value (``x * 100``, at the
user's line or in a library it calls), the map reads that operand from the
operator's frame as it is called, and the one move the call logs is that value
(`gate.witness.observed.describe_operands`): jit's C++ fast path logs it with
an empty description once the same op has run before.

The guard's lines vanish when ``TF_CPP_MIN_LOG_LEVEL`` is 2 or more when
jaxlib loads. The gate sets it before importing jax
(`gate.witness.guard_log.prepare_environment`), and `capture_works` checks
with a deliberate transfer that the lines really arrive, so a lost log can
never look like a clean step.
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import tempfile
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gate.levels import Direction
from gate.package import PACKAGE_DIR
from gate.user_code import SourceLocation, UserCode, is_library
from gate.witness.arguments import CallPlan
from gate.witness.code_events import Watch, listening
from gate.witness.guard_log import parse_guard_line, warnings_level
from gate.witness.line_calls import LineCall, call_plan, line_calls
from gate.witness.observed import Observed, describe_operands, name_moves
from gate.witness.operands import HostValue, Operators


@dataclass
class _ThreadState:
    name: str
    location: SourceLocation | None = None
    explicit_depth: int = 0
    fetch_depth: int = 0  # inside jax.device_get: its device-to-host reads are explicit
    boundary: str | None = None
    segment: int = 0
    outside: int = 0  # the stretch while no user frame runs (a jitted step's own call)
    call: CallPlan | None = None  # what the line now executing will move, where known
    # While an eager operator on a device array and a host value runs: that operand as JAX
    # will move it, and the call's number (0: none running).
    operand: HostValue | None = None
    operation: int = 0


@dataclass
class TransferLog:
    """What one mapped run saw, in order."""

    observed: list[Observed] = field(default_factory=list)
    passthrough: list[str] = field(default_factory=list)


class _Mapper:
    def __init__(
        self,
        code: UserCode,
        explicit_codes: frozenset[types.CodeType],
        boundary_codes: Mapping[types.CodeType, str],
        log_file: Any,
        *,
        fetch_codes: frozenset[types.CodeType] = frozenset(),
        all_devices: int | None = None,
        operators: Operators | None = None,
    ) -> None:
        self.code = code
        self.explicit_codes = explicit_codes
        self.operators = operators or Operators()
        self.fetch_codes = fetch_codes
        self.all_devices = all_devices
        self.boundary_codes = boundary_codes
        self.file = log_file
        self.finished = False
        self.log = TransferLog()
        self.lock = threading.Lock()
        self.partial = ""
        self.threads: dict[int, _ThreadState] = {}  # by native thread id
        self.user_files: dict[str, bool] = {}
        self.segments = itertools.count(1)
        self.moves_in: dict[tuple[int, Direction, bool], int] = {}
        self.line_calls: dict[str, dict[int, LineCall]] = {}
        self.calls: dict[types.FrameType, CallPlan | None] = {}  # per frame, its line's plan
        self.plans: dict[int, CallPlan] = {}  # per segment, where its line has one
        self.segments_of: dict[types.FrameType, int] = {}  # per user frame, its line's stretch
        self.untraced: set[types.CodeType] = set()  # code neither the user's nor explicit

    # -- reading the log ----------------------------------------------------

    def _state(self) -> _ThreadState:
        native = threading.get_native_id()
        state = self.threads.get(native)
        if state is None:
            state = self.threads[native] = _ThreadState(threading.current_thread().name)
            state.outside = state.segment = self._new_segment()
        return state

    def _state_of(self, native: int | None, me: _ThreadState) -> _ThreadState:
        """The state of the thread that wrote a guard line.

        A thread the map never traced (it was running before the run began)
        has no known line: say which thread it was, never borrow the line
        another thread is on.
        """
        if native is None:
            return me
        state = self.threads.get(native)
        if state is not None:
            return state
        name = next(
            (t.name for t in threading.enumerate() if t.native_id == native), f"native {native}"
        )
        return _ThreadState(f"{name} (running before this run; not traced)")

    def flush(self) -> None:
        """Charge everything the guard appended to the lines now executing."""
        with self.lock:
            if self.finished:
                return  # a thread that outlived the block; its frames still trace
            chunk = self.file.read()
            if chunk:
                self._charge(self.partial + chunk)

    def finish(self) -> None:
        self.flush()
        with self.lock:
            if self.partial:  # a last line without its newline
                self._charge(self.partial + "\n")
            self.finished = True

    def _charge(self, text: str) -> None:
        lines = text.split("\n")
        self.partial = lines.pop()
        me = self._state()
        for line in lines:
            parsed = parse_guard_line(line, self.all_devices)
            if parsed is None:
                self.log.passthrough.append(line)
                continue
            state = self._state_of(parsed.native_thread, me)
            explicit = state.explicit_depth > 0
            if parsed.direction is Direction.DEVICE_TO_HOST and state.fetch_depth == 0:
                # A read to the host inside jax.device_put (an array on several devices
                # put on another sharding goes through the host) is implicit to JAX:
                # 0.12 refuses it under `disallow` (jax-ml/jax#40285). Only
                # jax.device_get's reads are explicit.
                explicit = False
            slot = (state.segment, parsed.direction, explicit)
            index = self.moves_in.get(slot, 0)
            self.moves_in[slot] = index + 1
            if state.call is not None:
                self.plans[state.segment] = state.call
            self.log.observed.append(
                Observed(
                    parsed.direction,
                    parsed.dtype,
                    parsed.shape,
                    state.location,
                    explicit,
                    state.boundary,
                    state.name,
                    state.segment,
                    index,
                    destination=parsed.destination,
                    lines_per_transfer=parsed.lines_per_transfer,
                    operand=state.operand,
                    operation=state.operation,
                )
            )

    # -- tracing ------------------------------------------------------------

    def _is_user(self, filename: str) -> bool:
        known = self.user_files.get(filename)
        if known is None:
            known = self.user_files[filename] = self.code.is_user(filename)
        return known

    def _location(self, frame: types.FrameType) -> SourceLocation:
        filename = frame.f_code.co_filename
        return SourceLocation(self.code.relative(filename), frame.f_lineno, frame.f_code.co_name)

    def _innermost_user(self, frame: types.FrameType | None) -> types.FrameType | None:
        while frame is not None:
            if self._is_user(frame.f_code.co_filename):
                return frame
            frame = frame.f_back
        return None

    def _boundary_at(self, frame: types.FrameType | None) -> str | None:
        """The innermost declared boundary whose frame encloses ``frame``.

        Read from the stack itself, so the answer is right at every event,
        including the return out of a boundary (where a thread-local flag
        set by the boundary's wrapper would still be up).
        """
        if not self.boundary_codes:
            return None
        while frame is not None:
            name = self.boundary_codes.get(frame.f_code)
            if name is not None:
                return name
            frame = frame.f_back
        return None

    def _new_segment(self) -> int:
        # itertools.count: atomic under the GIL, and takes no lock (callers may hold one).
        return next(self.segments)

    def _enter(self, frame: types.FrameType | None, user: types.FrameType | None) -> None:
        """The thread now runs ``user``'s line (None: no user frame), from ``frame``.

        A new line event starts a new stretch; coming back into a line (a
        callee returned, or the traced body of a jitted function did) goes on
        with that line's stretch, so the n-th move of a line's run is the
        same whether or not the first call traced something in between.
        """
        state = self._state()
        state.location = self._location(user) if user is not None else None
        state.boundary = self._boundary_at(frame)
        if user is None:
            state.segment = state.outside
            state.call = None
            return
        segment = self.segments_of.get(user)
        if segment is None:
            segment = self.segments_of[user] = self._new_segment()
        state.segment = segment
        state.call = self.calls.get(user)

    def _plan_line(self, frame: types.FrameType) -> None:
        """Before a line runs: what its jitted call will move, if it has one."""
        filename = frame.f_code.co_filename
        calls = self.line_calls.get(filename)
        if calls is None:
            calls = self.line_calls[filename] = line_calls(filename)
        call = calls.get(frame.f_lineno)
        if call is None:
            self.calls.pop(frame, None)
            return
        try:
            self.calls[frame] = call_plan(frame, call)
        except Exception:  # naming is a nicety: never let it break the map
            self.calls[frame] = None

    # -- what the map hears (`gate.witness.code_events`) ---------------------

    def started(self, frame: types.FrameType) -> Watch:
        # Only frames of the user's code and the explicit transfer functions
        # are traced; jax calling jax never changes the user's line, so it
        # costs no read of the log. Under sys.settrace this runs for every call in the
        # process (JAX tracing a step makes thousands): one dict lookup decides most.
        if self.finished:
            return Watch.NOT_THIS_CALL  # a thread that outlived the block
        code = frame.f_code
        if code in self.untraced:
            return Watch.UNTRACED
        if self._is_user(code.co_filename):
            self.flush()
            self.segments_of[frame] = self._new_segment()
            self._enter(frame, frame)
            return Watch.LINES
        if code in self.explicit_codes:
            # Whoever calls it, JAX counts a transfer inside jax.device_put /
            # device_get as explicit (config.explicit_device_put_scope), so
            # the gate does too: library code's explicit moves pass `disallow`
            # exactly as they do under JAX's own guard.
            self.flush()
            state = self._state()
            state.explicit_depth += 1
            state.fetch_depth += code in self.fetch_codes
            return Watch.RETURN
        if code in self.operators.codes:
            return self._operator_call(frame)
        self.untraced.add(code)
        return Watch.UNTRACED

    def _operator_call(self, frame: types.FrameType) -> Watch:
        """An eager operator (``ArrayImpl.__mul__``) on a device array and a host value, from
        the user's line or a library it calls: what the call moves is that host operand."""
        operand = self.operators.host_operand(frame)
        if operand is None:
            return Watch.NOT_THIS_CALL
        self.flush()  # what the line moved before the call is not the call's
        state = self._state()
        if state.operation:
            # One inside another: which move is whose is not knowable, so neither is named.
            state.operand = None
            return Watch.NOT_THIS_CALL
        state.operand, state.operation = operand, self._new_segment()
        return Watch.RETURN  # only its return matters

    def line(self, frame: types.FrameType) -> None:
        if self.finished:
            return
        self.flush()
        self._plan_line(frame)
        self.segments_of[frame] = self._new_segment()
        self._enter(frame, frame)

    def returned(self, frame: types.FrameType, watch: Watch) -> None:
        if self.finished:
            return
        self.flush()
        if watch is Watch.LINES:
            self.calls.pop(frame, None)
            self.segments_of.pop(frame, None)
            self._enter(frame.f_back, self._innermost_user(frame.f_back))
            return
        state = self._state()
        if frame.f_code in self.explicit_codes:
            state.explicit_depth -= 1
            state.fetch_depth -= frame.f_code in self.fetch_codes
        else:  # an operator's call
            state.operand, state.operation = None, 0


@contextmanager
def mapped(
    code: UserCode,
    *,
    explicit: tuple[Callable[..., Any], ...] = (),
    boundary_codes: Mapping[types.CodeType, str] | None = None,
) -> Iterator[TransferLog]:
    """Record every transfer the guard logs inside the block, per user line.

    The caller sets the guard to a logging level; this only listens.
    ``explicit`` are the functions whose transfers JAX counts as explicit
    (``jax.device_put``, ``jax.device_get``); ``boundary_codes`` maps the
    original code object of each declared boundary to its name.
    """
    import jax

    functions = [fn for fn in explicit if isinstance(fn, types.FunctionType)]
    explicit_codes = frozenset(fn.__code__ for fn in functions)
    fetch_codes = frozenset(fn.__code__ for fn in functions if fn.__name__ == "device_get")
    sys.stderr.flush()
    writer, reader = _LOG_FILES.take()
    saved_fd = os.dup(2)
    # A GSPMD sharding printed "{replicated}" names no devices: the mesh in context,
    # which on the setups the gate meets is every device (docs/limits.md).
    mapper = _Mapper(
        code,
        explicit_codes,
        boundary_codes or {},
        reader,
        fetch_codes=fetch_codes,
        all_devices=jax.device_count(),
        operators=Operators.of_this_jax(),
    )
    os.dup2(writer, 2)
    try:
        # A library's code is never a region's: a monitor may stop asking about it for good.
        with listening(mapper, _is_library_code, explicit_codes | mapper.operators.codes):
            yield mapper.log
    finally:
        sys.stderr.flush()
        mapper.finish()
        describe_operands(mapper.log.observed)
        name_moves(mapper.log.observed, lambda seen: mapper.plans.get(seen.segment))
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        _LOG_FILES.give_back(writer, reader)
        if mapper.log.passthrough:
            sys.stderr.write("\n".join(mapper.log.passthrough) + "\n")
            sys.stderr.flush()


class _LogFiles:
    """The temporary files the guard's lines go to, each kept for the next map's block.

    A file is two file descriptions: the guard appends through fd 2 while the mapper reads
    from its own offset. Made, opened and unlinked for every block, it cost a region ~0.1 ms
    a block on the CPU machine and more on a TPU host's file system, five blocks a region
    (the capture probe's among them); a block now takes a kept one, emptied, and empties it
    again as it gives it back (what a step printed is not kept beyond its block). A block
    inside another, or in another thread, takes a file of its own; a forked child makes its
    own rather than share its parent's offsets. The kept files are closed when the process
    exits (a user's own process, `gate.check_region`, would warn of them unclosed).
    """

    def __init__(self) -> None:
        self._free: list[tuple[int, TextIO]] = []
        self._pid = os.getpid()
        atexit.register(self.close)

    def close(self) -> None:
        """Close the kept files (this process's own)."""
        free, self._free = self._free, []
        if os.getpid() != self._pid:
            return
        for writer, reader in free:
            os.close(writer)
            reader.close()

    def take(self) -> tuple[int, TextIO]:
        if os.getpid() != self._pid:
            self._free, self._pid = [], os.getpid()
        try:
            return self._free.pop()  # atomic: two threads never take the same one
        except IndexError:
            handle, path = tempfile.mkstemp(prefix="transfer-gate-", suffix=".log")
            os.close(handle)
            writer = os.open(path, os.O_WRONLY | os.O_APPEND)
            reader = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
            os.unlink(path)
            return writer, reader

    def give_back(self, writer: int, reader: TextIO) -> None:
        if os.getpid() != self._pid:  # a child forked inside the block: the file is its parent's
            os.close(writer)
            reader.close()
            return
        os.ftruncate(writer, 0)
        reader.seek(0)
        self._free.append((writer, reader))


_LOG_FILES = _LogFiles()


def _is_library_code(code: types.CodeType) -> bool:
    return is_library(code.co_filename)


def capture_works() -> bool:
    """Whether the guard's log lines reach the gate, now.

    The C++ log level is set when jaxlib loads (TF_CPP_MIN_LOG_LEVEL) but can
    be raised later, by ``jax.config.update("jax_logging_level", "ERROR")`` in
    a user's module, say; so the gate puts it back to warnings and checks with
    one deliberate implicit transfer before every region.

    The transfer is ``jnp.asarray`` of a NumPy scalar: JAX's guard calls it implicit (jax
    0.10.1-0.12). It compiles one small program (``jit(stage)``) once per worker, and again
    after each release of JAX's programs (`gate.jaxhooks.programs.release_programs`); an
    earlier probe, ``jnp.zeros(()) + np.float32(1)``, compiled two. From the second call on
    the guard's line names no value (JAX's fast path), but it still names the direction,
    which is all the probe reads. Not waited for: the guard writes its line in the calling
    thread before the copy starts (``disallow`` raises there); on the TPU v5e the wait was
    ~0.8 ms of the probe (`probe_cost.py`, retired in `2a3c02b`; docs/performance-log.md).
    """
    warnings_level()
    import jax
    import numpy as np

    from gate.jaxhooks.guard import guarded
    from gate.levels import GuardLevel, GuardSpec

    probe = UserCode(repo_root=Path(PACKAGE_DIR).resolve())
    with mapped(probe) as log, guarded(GuardSpec.uniform(GuardLevel.LOG)):
        jax.numpy.asarray(np.float32(1))
    return any(o.direction is Direction.HOST_TO_DEVICE for o in log.observed)
