"""gate.witness.code_events: the two ways the transfer map hears code run say the same.

Python 3.11 has only ``sys.settrace``; 3.12+ (the container's Python) listens through
``sys.monitoring``, where a library's code object is turned off after its first call. The
monitor's tests skip on 3.11; .ci/run runs them (marked `pythons`) on Python 3.12 and 3.13 too.
"""

from __future__ import annotations

import itertools
import sys
import threading
import types
from collections.abc import Iterator

import pytest

from gate.witness import code_events
from gate.witness.code_events import Watch, listening

pytestmark = pytest.mark.pythons
needs_monitoring = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+"
)


def library() -> int:  # stands for JAX: never watched
    return 1


def explicit() -> int:  # stands for jax.device_get: only its return is watched
    return library() + 1


def numbers() -> Iterator[int]:
    yield 1
    yield 2


def failing() -> None:
    raise KeyError("unwinds")


def user() -> int:
    a = library()
    b = explicit()
    try:  # noqa: SIM105  the lines a try statement runs, which the expected events count
        failing()
    except KeyError:
        pass
    return a + b + sum(numbers())


USER = {user.__code__, numbers.__code__, failing.__code__}
Event = tuple[str, ...]


class Recorder:
    """A listener that watches this module's user functions' lines, `explicit`'s return,
    and nothing else; records what it hears of this module's functions."""

    def __init__(self, *, returns: frozenset[types.CodeType] = frozenset()) -> None:
        self.returns = returns or frozenset({explicit.__code__})
        self.events: list[Event] = []
        self.asked: list[str] = []  # every start it was asked about, of this module's code

    def started(self, frame: types.FrameType) -> Watch:
        code = frame.f_code
        if code.co_filename == __file__:
            self.asked.append(code.co_name)
        if code in USER:
            self.events.append(("start", code.co_name))
            return Watch.LINES
        if code in self.returns:
            self.events.append(("start", code.co_name))
            return Watch.RETURN
        return Watch.UNTRACED

    def line(self, frame: types.FrameType) -> None:
        line = frame.f_lineno - frame.f_code.co_firstlineno
        self.events.append(("line", frame.f_code.co_name, str(line)))

    def returned(self, frame: types.FrameType, watch: Watch) -> None:
        self.events.append(("return", frame.f_code.co_name, watch.value))


def _is_library(code: types.CodeType) -> bool:
    return code.co_name == "library"


_made = itertools.count(1)


def _fresh_library() -> types.FunctionType:
    """`library` with a code object of its own: what a driver turned off stays off for the
    process, so a test that counts what it is asked needs code no earlier test ran. (Equal code
    objects are one to a set, and the trace function's is one: its line is moved.)"""
    code = library.__code__
    return types.FunctionType(code.replace(co_firstlineno=code.co_firstlineno + next(_made)), {})


def _heard(*, monitor: bool, monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    recorder = Recorder()
    with monkeypatch.context() as patched:
        if not monitor:
            patched.setattr(code_events, "_monitoring_tool", lambda: None)
        with listening(recorder, _is_library, frozenset({explicit.__code__})):
            assert user() == 6
    return recorder.events


EXPECTED: list[Event] = [
    ("start", "user"),
    ("line", "user", "1"),
    ("line", "user", "2"),
    ("start", "explicit"),
    ("return", "explicit", "return"),
    ("line", "user", "3"),
    ("line", "user", "4"),
    ("start", "failing"),
    ("line", "failing", "1"),
    ("return", "failing", "lines"),  # unwinding: a return all the same
    ("line", "user", "5"),
    ("line", "user", "6"),
    ("line", "user", "7"),
    ("start", "numbers"),
    ("line", "numbers", "1"),
    ("return", "numbers", "lines"),  # each yield returns, each resume starts again
    ("start", "numbers"),
    ("line", "numbers", "2"),
    ("return", "numbers", "lines"),
    ("start", "numbers"),
    ("return", "numbers", "lines"),
    ("return", "user", "lines"),
]


def test_the_trace_function_hears_lines_returns_unwinding_and_generators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _heard(monitor=False, monkeypatch=monkeypatch) == EXPECTED


@needs_monitoring
def test_the_monitor_hears_exactly_what_the_trace_function_hears(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _heard(monitor=True, monkeypatch=monkeypatch) == EXPECTED


@pytest.fixture(
    params=[False, pytest.param(True, marks=needs_monitoring)], ids=["settrace", "monitor"]
)
def either_driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that uses it runs under both drivers: ``sys.settrace``, then the monitor."""
    if not request.param:
        monkeypatch.setattr(code_events, "_monitoring_tool", lambda: None)


@pytest.mark.usefixtures("either_driver")
def test_a_library_function_is_asked_about_once_per_process_then_costs_nothing() -> None:
    # Under sys.settrace too: the trace function answers it without the listener's call
    # (half the cost of each of JAX's calls while it traces a step, on Python 3.11).
    fresh = _fresh_library()
    first, second = Recorder(), Recorder()
    with listening(first, _is_library, frozenset()):
        user()
        fresh()
    fresh()  # between blocks, as the timed runs call JAX: it must stay off all the same
    with listening(second, _is_library, frozenset()):
        user()
        fresh()
    assert "library" in first.asked
    assert "library" not in second.asked  # turned off for good: JAX's code after region 1
    assert second.events == first.events  # the user's code is heard in every block


@pytest.mark.usefixtures("either_driver")
def test_a_function_an_earlier_block_turned_off_is_heard_again_once_watched() -> None:
    fresh = _fresh_library()
    with listening(Recorder(), _is_library, frozenset()):
        fresh()  # turned off here: this block does not watch it
    watching = Recorder(returns=frozenset({fresh.__code__}))
    with listening(watching, _is_library, frozenset({fresh.__code__})):
        fresh()
    assert watching.events == [("start", "library"), ("return", "library", "return")]


def test_nothing_is_heard_after_the_block() -> None:
    recorder = Recorder()
    with listening(recorder, _is_library, frozenset()):
        pass
    user()
    assert recorder.events == []


@needs_monitoring
def test_a_block_inside_another_is_traced_and_both_hear_the_users_code() -> None:
    outer, inner = Recorder(), Recorder()
    with listening(outer, _is_library, frozenset()):
        with listening(inner, _is_library, frozenset()):
            user()
        user()
    assert inner.events == EXPECTED
    assert outer.events == EXPECTED + EXPECTED


@pytest.mark.usefixtures("either_driver")
def test_what_an_inner_block_turns_off_the_outer_block_still_hears_if_it_watches_it() -> None:
    fresh = _fresh_library()
    watched = frozenset({explicit.__code__, fresh.__code__})
    outer, inner = Recorder(returns=watched), Recorder()
    with listening(outer, _is_library, watched):
        with listening(inner, _is_library, frozenset({explicit.__code__})):
            fresh()  # the inner block's library: off for good, as far as it knows
        fresh()
    assert "library" in inner.asked
    assert outer.events[-2:] == [("start", "library"), ("return", "library", "return")]


def test_a_block_in_another_thread_hears_what_it_watches_though_one_turns_it_off_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``sys.settrace`` the table of code turned off is the process's: block A, in a
    thread of its own, decides a function is a quiet library's while block B, starting in
    this thread, begins to watch it. A must not put it in the table after B began."""
    monkeypatch.setattr(code_events, "_monitoring_tool", lambda: None)
    fresh = _fresh_library()
    asking, watching_now = threading.Event(), threading.Event()

    def slow_quiet(code: types.CodeType) -> bool:
        if code is fresh.__code__:  # A between its check and its insert: B starts now
            asking.set()
            assert watching_now.wait(timeout=10)
        return _is_library(code)

    def block_a() -> None:
        with listening(Recorder(), slow_quiet, frozenset()):
            fresh()

    watching = Recorder(returns=frozenset({fresh.__code__}))
    other = threading.Thread(target=block_a)
    try:
        other.start()
        assert asking.wait(timeout=10)
        with listening(watching, _is_library, frozenset({fresh.__code__})):
            watching_now.set()
            other.join(timeout=10)
            assert not other.is_alive()
            fresh()
    finally:
        watching_now.set()
        other.join(timeout=10)
        threading.settrace(None)  # the blocks overlapped: neither put back what was there
    assert watching.events == [("start", "library"), ("return", "library", "return")]


@needs_monitoring
def test_another_tool_on_every_free_id_leaves_the_trace_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    ours = [i for i in code_events._FREE_TOOL_IDS if monitoring.get_tool(i) is not None]
    for tool in ours:
        monitoring.free_tool_id(tool)
    for tool in code_events._FREE_TOOL_IDS:
        monitoring.use_tool_id(tool, "someone else's profiler")
    try:
        recorder = Recorder()
        with listening(recorder, _is_library, frozenset()):
            user()
        assert recorder.events == EXPECTED
        assert sys.gettrace() is None  # put back
    finally:
        for tool in code_events._FREE_TOOL_IDS:
            monitoring.free_tool_id(tool)


@pytest.mark.usefixtures("either_driver")
def test_a_thread_running_before_the_block_is_not_heard_and_one_it_starts_is() -> None:
    go, done = threading.Event(), threading.Event()

    def waiting() -> None:
        go.wait(10)
        user()
        done.set()

    early = threading.Thread(target=waiting, daemon=True)
    early.start()
    recorder = Recorder()
    with listening(recorder, _is_library, frozenset()):
        go.set()
        assert done.wait(10)
        # Its frames from before the block would never have their lines heard: a move would be
        # charged to a line it has left. Under both drivers it is not heard at all.
        assert recorder.events == []
        late = threading.Thread(target=user, daemon=True)
        late.start()
        late.join(10)
    early.join(10)
    assert recorder.events == EXPECTED


# fmt: off
def loops() -> int:  # each loop on one line: its turns never change the line
    total = 0
    for x in range(3): total += library() + x  # noqa: E701
    squares = [library() * y for y in range(2)]
    while total < 12: total += 1  # noqa: E701
    return total + sum(squares)
# fmt: on


@needs_monitoring
def test_each_turn_of_a_loop_on_one_line_is_a_line_event_for_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heard = {}
    for monitor in (True, False):
        recorder = Recorder()
        with monkeypatch.context() as patched:
            if not monitor:
                patched.setattr(code_events, "_monitoring_tool", lambda: None)
            USER.add(loops.__code__)
            try:
                with listening(recorder, _is_library, frozenset()):
                    loops()
            finally:
                USER.discard(loops.__code__)
        heard[monitor] = recorder.events
    assert heard[True] == heard[False]
    # A line event at each turn: the map's line, and so each move's index, is per turn.
    assert heard[True].count(("line", "loops", "2")) >= 3
