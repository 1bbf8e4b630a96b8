"""How the transfer map hears the code run: each call that starts, each line of the user's, each
return it asked for; from ``sys.monitoring`` (Python 3.12+) or ``sys.settrace``.

The map needs the lines of the user's frames only, but with ``sys.settrace`` Python calls the
trace function at the start of every call in the process, and JAX tracing, lowering and
compiling a small step makes 15-20 thousand Python calls: ~15 ms of a region's first call on
Python 3.11, ~25 ms on 3.12, where ``sys.settrace`` itself runs on ``sys.monitoring``
(docs/performance.md). ``sys.monitoring`` lets the map turn the event off for a code object
once it knows that object is a library's: JAX's functions then cost nothing after their first
call in a worker, in every later region too. The two drivers call one `Listener` alike, so the
map's rules live once, in `gate.witness.transfer_map`.

Differences the drivers keep from the map:

- ``sys.settrace`` reaches only the threads the block starts (``threading.settrace``);
  ``sys.monitoring`` reaches every thread, including one the step's module started before the
  run (its lines then have their place too).
- A call already running when the block begins is heard by neither: ``sys.settrace`` never
  gave it a local trace function; the monitor answers only frames it saw start.
- A code object turned off stays off for this process's monitor (a library's file is never a
  region's, whatever the policy); what the map watches for its returns (``jax.device_put``, an
  operator) is a library's too, so a map that watches one an earlier map turned off turns the
  events back on first (``sys.monitoring.restart_events``, once per such object).
"""

from __future__ import annotations

import enum
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Protocol

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
        with _traced(listener):
            yield
        return
    with _monitored(listener, tool, quiet, watched):
        yield


# -- sys.settrace (Python 3.11) -------------------------------------------------


@contextmanager
def _traced(listener: Listener) -> Iterator[None]:
    def global_trace(frame: types.FrameType, event: str, arg: Any) -> Any:
        # Called for every call in the threads the block runs: one answer decides most.
        watch = listener.started(frame)
        if watch is Watch.LINES:
            return lines
        if watch is Watch.RETURN:
            frame.f_trace_lines = False
            return returns
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

    if any(code in _Monitor.off for code in watched):
        # An earlier block, which did not watch it, turned it off for good: every event back on.
        monitoring.restart_events()
        _Monitor.off.clear()

    def heard(frame: types.FrameType, code: types.CodeType) -> Any:
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
        events.PY_RETURN: returned,
        events.PY_YIELD: returned,
        events.PY_UNWIND: returned,
    }
    for event, callback in callbacks.items():
        monitoring.register_callback(tool, event, callback)
    _Monitor.active = True
    try:
        monitoring.set_events(
            tool, events.PY_START | events.PY_RESUME | events.PY_THROW | events.PY_UNWIND
        )
        yield
    finally:
        monitoring.set_events(tool, 0)
        for code in local:
            monitoring.set_local_events(tool, code, 0)
        for event in callbacks:
            monitoring.register_callback(tool, event, None)
        _Monitor.active = False


def _events(*names: str) -> int:
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return 0
    value = 0
    for name in names:
        value |= getattr(monitoring.events, name)
    return value


_RETURN_EVENTS = _events("PY_RETURN", "PY_YIELD")
_LINE_EVENTS = _RETURN_EVENTS | _events("LINE")
