"""gate.jaxhooks.unheard: under the transfer map's ``sys.settrace`` (Python 3.11), JAX lowers and
compiles a first call with the map's trace function off, and puts it back; another tool's trace
function stays on; a JAX without the hook is traced as before."""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import pytest
from jax._src import pjit
from jax._src.interpreters import pxla

from gate.api import check_region
from gate.witness import code_events
from gate.witness.code_events import Watch, listening

pytestmark = pytest.mark.pythons


class Lines:
    """A listener that hears `calls_jit`'s lines and nothing else."""

    def __init__(self) -> None:
        self.lines: list[int] = []

    def started(self, frame: types.FrameType) -> Watch:
        return Watch.LINES if frame.f_code is calls_jit.__code__ else Watch.UNTRACED

    def line(self, frame: types.FrameType) -> None:
        self.lines.append(frame.f_lineno - frame.f_code.co_firstlineno)

    def returned(self, frame: types.FrameType, watch: Watch) -> None:
        pass


def calls_jit(scale: float) -> float:
    fresh = jax.jit(lambda x: x * scale)  # a function of its own: traced, lowered, compiled
    out = fresh(jax.numpy.ones(3))
    return float(out.sum())


def _seen_in_jax(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """The trace function each of JAX's lowering and compiling ran under."""
    seen: list[tuple[str, object]] = []

    def watching(what: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append((what, sys.gettrace()))
            return real(*args, **kwargs)

        return call

    lower, compiled = pxla.lower_sharding_computation, pxla._cached_compilation
    monkeypatch.setattr(pxla, "lower_sharding_computation", watching("lowering", lower))
    monkeypatch.setattr(pxla, "_cached_compilation", watching("compiling", compiled))
    return seen


@pytest.fixture
def settrace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The map's Python 3.11 driver, on any Python."""
    monkeypatch.setattr(code_events, "_monitoring_tool", lambda: None)


@pytest.mark.usefixtures("settrace")
def test_jax_lowers_and_compiles_without_the_maps_trace_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _seen_in_jax(monkeypatch)
    original = (pjit._resolve_and_lower, pxla.MeshComputation.__dict__["compile"])
    listener = Lines()
    with listening(listener, lambda code: True, frozenset()):
        ours = sys.gettrace()
        assert calls_jit(2.0) == 6.0
        assert sys.gettrace() is ours  # put back after each
    assert ours is not None
    # The step's program, and the eager operations' around it the first time they run.
    assert {what for what, _ in seen} == {"lowering", "compiling"}
    assert all(trace is None for _, trace in seen), seen
    assert listener.lines == [1, 2, 3]  # the user's lines after the call are heard
    # Gone with the block.
    assert (pjit._resolve_and_lower, pxla.MeshComputation.__dict__["compile"]) == original


@pytest.mark.usefixtures("settrace")
def test_another_tools_trace_function_stays_on_while_jax_lowers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _seen_in_jax(monkeypatch)
    calls: list[str] = []

    def coverage(frame: types.FrameType, event: str, arg: object) -> None:
        calls.append(frame.f_code.co_name)

    with listening(Lines(), lambda code: True, frozenset()):
        ours = sys.gettrace()
        sys.settrace(coverage)  # a debugger or coverage tool, set while the gate's block runs
        try:
            calls_jit(3.0)
        finally:
            sys.settrace(ours)
    assert seen
    assert all(trace is coverage for _, trace in seen), seen
    assert "lower_sharding_computation" in calls


@pytest.mark.usefixtures("settrace")
def test_a_jax_without_the_hook_lowers_and_compiles_traced_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Not a plain function any more: `internals.lowering_and_compiling` refuses the hook.
    real = pxla.MeshComputation.__dict__["compile"]
    monkeypatch.setattr(pxla.MeshComputation, "compile", functools.partialmethod(real))
    seen = _seen_in_jax(monkeypatch)
    listener = Lines()
    with listening(listener, lambda code: True, frozenset()):
        ours = sys.gettrace()
        assert calls_jit(2.0) == 6.0
    assert seen
    assert all(trace is ours for _, trace in seen), seen
    assert listener.lines == [1, 2, 3]
    assert isinstance(pxla.MeshComputation.__dict__["compile"], functools.partialmethod)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")
def test_under_the_monitor_nothing_is_set_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _seen_in_jax(monkeypatch)
    original = pjit._resolve_and_lower
    with listening(Lines(), lambda code: True, frozenset()):
        assert pjit._resolve_and_lower is original  # no trace function: nothing to set aside
        calls_jit(2.0)
    assert seen
    assert all(trace is None for _, trace in seen), seen


STEPS = """
import jax
import jax.numpy as jnp

CONST = jnp.arange(3.0)  # a device array the step closes over: JAX reads it while lowering


@jax.jit
def closes_over(x):
    return x + CONST * 2


def step(x):
    y = closes_over(x)
    return y * 2


def batch():
    return (jnp.ones(3),)
"""


@pytest.mark.usefixtures("settrace")
@pytest.mark.parametrize("hooked", [True, False], ids=["lowering unheard", "without the hook"])
def test_what_jax_moves_while_lowering_is_charged_to_the_line_that_called_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hooked: bool
) -> None:
    if not hooked:
        real = pxla.MeshComputation.__dict__["compile"]
        monkeypatch.setattr(pxla.MeshComputation, "compile", functools.partialmethod(real))
    name = f"lowering_steps_{'hooked' if hooked else 'plain'}"
    (tmp_path / f"{name}.py").write_text(STEPS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    steps = importlib.import_module(name)
    result = check_region(steps.step, setup=steps.batch, guard="disallow")
    moves = [(t.direction.value, str(t.location), t.phase.value) for t in result.transfers]
    # The same with the hook and without: the constant read while lowering (the detector's,
    # at the line calling the step) and the scalar moved at the next line (the guard's log,
    # charged by the map's events, which resume after lowering).
    assert moves == [
        ("device_to_host", f"{name}.py:14", "first call"),
        ("host_to_device", f"{name}.py:15", "first call"),
        ("host_to_device", f"{name}.py:15", "steady state"),
    ], moves
