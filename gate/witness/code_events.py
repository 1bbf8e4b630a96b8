"""How the transfer map hears the code run: each call that starts, each line of the user's, each
return it asked for; from ``sys.monitoring`` (Python 3.12+) or ``sys.settrace``.

The map needs the lines of the user's frames only, but with ``sys.settrace`` Python calls the
trace function at the start of every call in the process, and JAX tracing, lowering and
compiling a small step makes 15-20 thousand Python calls: ~15 ms of a region's first call on
Python 3.11, ~25 ms on 3.12, where ``sys.settrace`` itself runs on ``sys.monitoring``
(docs/performance-log.md). ``sys.monitoring`` lets the map turn the event off for a code object
once it knows that object is a library's: JAX's functions then cost nothing after their first
call in a worker, in every later region too. ``sys.settrace`` cannot stop asking, but its trace
function answers a library's code it already knows with one lookup, without calling the
listener: about half of what each call cost; and JAX lowers and compiles a traced step with it
off (`gate.jaxhooks.unheard`): no user line runs there, and under a trace function every line
of Python is slower. The two drivers call one `Listener` alike, so the map's rules live once, in
`gate.witness.transfer_map`.

What the two drivers hear alike:

- only the threads the block starts, and the one it runs in: ``sys.settrace`` reaches the new
  ones through ``threading.settrace``; the monitor, which hears every thread, leaves out those
  already running (their frames from before the block would never have their lines heard);
- no call already running when the block begins: ``sys.settrace`` never gave it a local trace
  function; the monitor answers only frames it saw start;
- a line event at each new line and at each jump back to the line it is on (the next turn of
  a loop written on one line): the monitor's LINE comes only when the line changes, so it
  also listens to the user's code's jumps, as ``sys.settrace`` on 3.12 itself does.

A code object the monitor turned off stays off for the process (a library's file is never a
region's, whatever the policy), and so the monitor's events stay on between blocks, with no
callback registered: turning them off would re-instrument every code object that ran in
between and forget. What the map watches for its returns (``jax.device_put``, an operator) is
a library's too, so a map that watches one an earlier map turned off turns the events back on
first (``sys.monitoring.restart_events``, once per such object).
"""

from __future__ import annotations

import bisect
import enum
import functools
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol

from gate.jaxhooks.unheard import lowering_unheard

_TOOL_NAME = "jax-transfer-gate"
# The ids PEP 669 leaves free for any tool (0-2 and 5 are named for debuggers, coverage,
# profilers and optimizers: cProfile takes 2 on 3.12).
_FREE_TOOL_IDS = (4, 3)


class Watch(enum.Enum):
    """What the map wants of a call it saw start."""

    UNTRACED = "untraced"  # none of this code's calls (a monitor may stop asking, see `quiet`)
    NOT_THIS_CALL = "not this call"  # not this call's lines or return; the next call is asked again
    LINES = "lines"  # the user's code: each line it runs and its return
    RETURN = "return"  # its return only (jax.device_get, an operator moving a host value)


class Listener(Protocol):
    """The map's side: what it does at each event a driver hears."""

    def started(self, frame: types.FrameType) -> Watch:
        """A call starts (or a generator resumes) in ``frame``."""
        ...

    def line(self, frame: types.FrameType) -> None:
        """``frame``, which `started` answered `Watch.LINES`, is about to run a new line."""
        ...

    def returned(self, frame: types.FrameType, watch: Watch) -> None:
        """``frame`` returns, yields or unwinds; ``watch`` is what `started` answered for it."""
        ...


@contextmanager
def listening(
    listener: Listener,
    quiet: Callable[[types.CodeType], bool],
    watched: frozenset[types.CodeType],
) -> Iterator[None]:
    """``listener`` hears the code that runs in the block.

    ``quiet(code)`` says whether a code object `started` answered `Watch.UNTRACED` for may be
    turned off for good (a library's: no later block's map would watch it); ``watched`` are the
    library code objects whose returns some call may need.
    """
    tool = _monitoring_tool()
    if tool is None:
        with _traced(listener, quiet, watched):
            yield
        return
    with _monitored(listener, tool, quiet, watched):
        yield


# -- sys.settrace (Python 3.11) -------------------------------------------------


class _Traced:
    """This process's use of ``sys.settrace``: the library code it stopped asking about."""

    # By ``id``: a code object's hash is worked out from its names and constants at every
    # lookup (~80 ns, ~600 ns for one with many constants), and this lookup runs at every call
    # (~527,000 in a flax transformer's first call); an int's is itself. The code objects are
    # held, so that no later one takes a freed one's id; a library's live as long as their
    # modules. Emptied should it ever grow this large (code made anew at run time).
    off: ClassVar[dict[int, types.CodeType]] = {}
    MOST = 100_000
    # What any block watched (`listening`'s ``watched``), by id and held alike: never put in
    # `off`, so that every block that watches one asks its listener about it.
    watched: ClassVar[dict[int, types.CodeType]] = {}
    # Taken to put a code object in `off` and to start a block: a block in another thread
    # that starts watching it between the check and the insert would never hear it.
    lock: ClassVar[threading.Lock] = threading.Lock()


@contextmanager
def _traced(
    listener: Listener,
    quiet: Callable[[types.CodeType], bool],
    watched: frozenset[types.CodeType],
) -> Iterator[None]:
    off = _Traced.off
    if len(off) > _Traced.MOST:
        off.clear()
    ever_watched = _Traced.watched
    lock = _Traced.lock
    with lock:
        for code in watched:  # an earlier block that did not watch it may have put it there
            ever_watched[id(code)] = code
            off.pop(id(code), None)
    ident = id  # a closure's cell: no lookup of the builtins at each call

    def global_trace(frame: types.FrameType, event: str, arg: Any) -> Any:
        # Called for every call in the threads the block runs (JAX tracing a step makes
        # thousands): a library's code, once known, is answered here with one lookup, no call
        # of the listener's, as the monitor turns it off.
        code = frame.f_code
        key = ident(code)
        if key in off:
            return None
        watch = listener.started(frame)
        if watch is Watch.LINES:
            return lines
        if watch is Watch.RETURN:
            frame.f_trace_lines = False
            return returns
        if watch is Watch.UNTRACED and key not in ever_watched and quiet(code):
            with lock:  # once per code object: after this, the lookup above answers it
                if key not in ever_watched:
                    off[key] = code
        return None

    def lines(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            listener.line(frame)
        elif event == "return":
            listener.returned(frame, Watch.LINES)
        return lines

    def returns(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            listener.returned(frame, Watch.RETURN)
            return None
        return returns

    saved_trace = sys.gettrace()
    saved_thread_trace = threading.gettrace()
    try:
        threading.settrace(global_trace)
        sys.settrace(global_trace)
        # No line of the user's runs while JAX lowers and compiles a traced step; under a
        # trace function every line of Python there runs slower (`gate.jaxhooks.unheard`).
        with lowering_unheard(global_trace):
            yield
    finally:
        sys.settrace(saved_trace)
        threading.settrace(saved_thread_trace)


# -- sys.monitoring (Python 3.12+) ----------------------------------------------


class _Monitor:
    """This process's use of the monitor."""

    active = False  # a block listens through it (a nested one traces instead)
    # What it turned off for good since the last restart (weakly: the gate's own trampolines are
    # made anew for each region).
    off: ClassVar[weakref.WeakSet[types.CodeType]] = weakref.WeakSet()


def _monitoring_tool() -> int | None:
    """This process's monitoring tool id, taken on first use; None where there is no monitor
    (Python 3.11), every free id is another tool's, or a block already listens through it."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None or _Monitor.active:
        return None
    for tool in _FREE_TOOL_IDS:
        owner = monitoring.get_tool(tool)
        if owner == _TOOL_NAME:
            return tool
        if owner is None:
            monitoring.use_tool_id(tool, _TOOL_NAME)
            return tool
    return None


@contextmanager
def _monitored(
    listener: Listener,
    tool: int,
    quiet: Callable[[types.CodeType], bool],
    watched: frozenset[types.CodeType],
) -> Iterator[None]:
    monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    events = monitoring.events
    disable = monitoring.DISABLE
    frames: dict[types.FrameType, Watch] = {}  # the calls whose lines or return are wanted
    local: dict[types.CodeType, int] = {}  # the events turned on for one code object
    # Threads already running are not heard, as ``sys.settrace`` does not hear them: their
    # frames that started before the block would never have their lines heard, and a move
    # would be charged to a line they have left.
    this = threading.get_ident()
    before = {t.ident: t for t in threading.enumerate() if t.ident is not None and t.ident != this}

    if any(code in _Monitor.off for code in watched):
        # An earlier block, which did not watch it, turned it off for good: every event back on.
        monitoring.restart_events()
        _Monitor.off.clear()

    def heard(frame: types.FrameType, code: types.CodeType) -> Any:
        running = before.get(threading.get_ident())
        if running is not None and running is threading.current_thread():
            return None  # (a thread started since may have an ended one's number)
        watch = listener.started(frame)
        if watch is Watch.UNTRACED:
            if code in watched or not quiet(code):
                return None
            _Monitor.off.add(code)
            return disable
        if watch is Watch.NOT_THIS_CALL:
            return None
        frames[frame] = watch
        wanted = _LINE_EVENTS if watch is Watch.LINES else _RETURN_EVENTS
        if local.get(code, 0) & wanted != wanted:
            local[code] = local.get(code, 0) | wanted
            monitoring.set_local_events(tool, code, local[code])
        return None

    # Each callback's caller is the frame its event is about: callbacks are not monitored.
    def start(code: types.CodeType, offset: int) -> Any:
        return heard(sys._getframe(1), code)

    def thrown(code: types.CodeType, offset: int, exception: BaseException) -> Any:
        heard(sys._getframe(1), code)
        return None  # a global event: it cannot be turned off for one code object

    def line(code: types.CodeType, number: int) -> Any:
        frame = sys._getframe(1)
        if frames.get(frame) is Watch.LINES:
            listener.line(frame)
        return None

    def jumped(code: types.CodeType, offset: int, destination: int) -> Any:
        # sys.settrace's rule: a jump back to the line it is on (the next turn of a loop or a
        # comprehension written on one line) is a line event too; LINE, which comes only when
        # the line changes, misses it.
        if destination > offset:
            return disable
        frame = sys._getframe(1)
        if frames.get(frame) is Watch.LINES and _line_at(code, destination) == _line_at(
            code, offset
        ):
            listener.line(frame)
        return None

    def returned(code: types.CodeType, offset: int, value: object) -> Any:
        frame = sys._getframe(1)
        watch = frames.pop(frame, None)
        if watch is not None:
            listener.returned(frame, watch)
        return None

    callbacks: dict[int, Callable[..., Any]] = {
        events.PY_START: start,
        events.PY_RESUME: start,
        events.PY_THROW: thrown,
        events.LINE: line,
        events.JUMP: jumped,
        events.PY_RETURN: returned,
        events.PY_YIELD: returned,
        events.PY_UNWIND: returned,
    }
    for event, callback in callbacks.items():
        monitoring.register_callback(tool, event, callback)
    _Monitor.active = True
    try:
        # On from the first block for the process's life: turning them off would re-instrument
        # every code object that ran before the next block, which forgets what was turned off
        # (JAX's functions, heard again in every region). Between blocks no callback is
        # registered: a call of code still on costs ~10 ns.
        if monitoring.get_events(tool) != _GLOBAL_EVENTS:
            monitoring.set_events(tool, _GLOBAL_EVENTS)
        yield
    finally:
        for code in local:
            monitoring.set_local_events(tool, code, 0)
        for event in callbacks:
            monitoring.register_callback(tool, event, None)
        _Monitor.active = False


@functools.lru_cache(maxsize=1024)
def _lines_of(code: types.CodeType) -> tuple[list[int], list[int | None]]:
    """Where each of ``code``'s instruction ranges starts, in bytes, and its line."""
    starts, lines = [], []
    for start, _end, line in code.co_lines():
        starts.append(start)
        lines.append(line)
    return starts, lines


def _line_at(code: types.CodeType, offset: int) -> int | None:
    starts, lines = _lines_of(code)
    index = bisect.bisect_right(starts, offset) - 1
    return lines[index] if index >= 0 else None


def _events(*names: str) -> int:
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return 0
    value = 0
    for name in names:
        value |= getattr(monitoring.events, name)
    return value


_RETURN_EVENTS = _events("PY_RETURN", "PY_YIELD")
_LINE_EVENTS = _RETURN_EVENTS | _events("LINE", "JUMP")
_GLOBAL_EVENTS = _events("PY_START", "PY_RESUME", "PY_THROW", "PY_UNWIND")
