"""A witness that could not see never makes a pass: each gap, planted in the gate's workers
as a JAX that moved a hook would leave it, is an error where the region's levels disallow what
it hides, and a note where they allow it. Through the real CLI."""

from __future__ import annotations

import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, make_repo, run_gate

STEPS = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def inputs():
    return (jax.device_put(np.arange(4, dtype=np.float32)),)


def reads(x):
    y = double(x)
    host = np.asarray(y)  # read through the buffer protocol on CPU
    return y, host.shape[0]


@jax.jit
def prints(x):
    jax.debug.print("x is {x}", x=x)  # a host callback
    return x * 2.0


def rejits(x):
    return jax.jit(lambda y: y * 3.0)(x)  # a new function every call: a compile every call


def loosens(x):
    with jax.transfer_guard_host_to_device("allow"):
        return double(x) + np.float32(1.0)  # an upload under a guard the step loosened
"""

# gap -> (what sitecustomize plants in every worker, the step, the policy keys that accept
# the gap, what the error and the note say)
GAPS = {
    "blind_spot": (
        """
        import gate.witness.detector
        gate.witness.detector.buffer_slot = lambda array_type: "injected: slot refused"
        """,
        "reads",
        "guard: {device_to_host: log}",
        "device-to-host reads: np.asarray(x), np.array(x) and x.item() on single-device CPU "
        "arrays (NumPy reads them through the buffer protocol, which cannot be watched: "
        "injected: slot refused) could not be checked",
    ),
    "callbacks": (
        """
        import gate.witness.callbacks

        def missing():
            raise gate.witness.callbacks.CallbackHookMissing("injected: no callback entry points")

        gate.witness.callbacks._find_hooks = missing
        """,
        "prints",
        "guard: {device_to_host: allow}",
        "host callbacks (jax.debug.print, pure_callback, io_callback) could not be checked on cpu",
    ),
    "recompiles": (
        """
        import gate.jaxhooks.compiles
        gate.jaxhooks.compiles.COMPILE_EVENT = "/jax/core/compile/renamed"
        gate.jaxhooks.compiles.CACHE_HIT_EVENT = "/jax/compilation_cache/renamed"
        """,
        "rejits",
        "recompiles: warn",
        "compilations after warm-up could not be checked on cpu",
    ),
    "guard_setters": (
        """
        import gate.jaxhooks.guard
        gate.jaxhooks.guard.guard_setters = lambda: (None, None)
        """,
        "loosens",
        "guard: {host_to_device: log, device_to_device: log}",
        "transfers in code that loosens the guard itself could not be checked on cpu",
    ),
}


def _region(name: str, step: str, extra: str = "") -> str:
    keys = f"\n    {extra}" if extra else ""
    return f"  - name: {name}\n    step: steps:{step}\n    setup: steps:inputs{keys}\n"


@pytest.fixture(scope="module", params=list(GAPS))
def planted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, GateRun]:
    """One run per gap: the step the gap hides, under the default levels and under levels
    that accept the gap."""
    gap = request.param
    plant, step, accepting, _ = GAPS[gap]
    repo = tmp_path_factory.mktemp(gap)
    regions = _region("strict", step) + _region("accepting", step, accepting)
    make_repo(
        repo,
        {
            "steps.py": STEPS,
            "policies/p.yaml": f"version: 1\n{FAST_DEFAULTS}regions:\n{regions}",
            "inject/sitecustomize.py": plant,
        },
    )
    return gap, run_gate(repo, "run", env={"PYTHONPATH": str(repo / "inject")})


def test_a_gap_that_hides_what_the_region_fails_is_an_error(planted: tuple[str, GateRun]) -> None:
    gap, run = planted
    said = GAPS[gap][3]
    assert run.returncode == 1, run
    error = run.testcase("strict: transfers").find("error")
    assert error is not None, f"{gap}: a pass where the gate could not see\n{run}"
    message = error.get("message", "")
    assert message.startswith("not checked on this platform: "), run
    assert said in message, run
    assert "accept the gap with" in message, run


def test_a_gap_the_region_accepts_is_a_note_on_a_pass(planted: tuple[str, GateRun]) -> None:
    gap, run = planted
    said = GAPS[gap][3]
    case = run.testcase("accepting: transfers")
    assert case.find("error") is None, run
    assert case.find("failure") is None, run
    out = case.findtext("system-out") or ""
    assert said in out, run
    assert "this region's pass says nothing about them" in out, run
