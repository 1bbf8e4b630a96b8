"""Hand-made result records for the reporter tests, and a small repo to run the real CLI on.

The reporters (JUnit, terminal, GitHub) and the grouping into findings are tested on
``RunResult``s built here rather than on real runs: fast, exact, every field chosen.
Each builder's keyword defaults describe one typical failure, a host-to-device
transfer of float32[8] at examples/bad.py:12 in ``train_step``, inside region
``train.step`` of policies/train.yaml:7, so a test names only what it is about.

The end-to-end tests share the step module ``STEPS`` and the policy builders below.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cli_helpers import FAST_DEFAULTS

from gate.levels import Direction, GuardLevel, GuardSpec
from gate.policy.model import CallableRef, Checks, Policy, Region
from gate.results.errors import ErrorKind, RegionError
from gate.results.machine import Machine
from gate.results.records import (
    BoundaryCost,
    CheckName,
    CheckOutcome,
    Phase,
    RegionResult,
    RunResult,
    SuiteResult,
    TimingStats,
    Transfer,
)
from gate.user_code import SourceLocation

# --- policy records, for tests that drive the region engine in-process -------------------------


def callable_ref(spec: str, line: int = 1) -> CallableRef:
    """``module:qualname`` as the policy loader records it, at ``line`` of the policy."""
    module, qualname = spec.split(":")
    return CallableRef(spec, module, qualname, line)


def one_region_policy(
    step: CallableRef,
    setup: CallableRef | None = None,
    *,
    path: str = "p.yaml",
    region_line: int = 1,
    python_path: tuple[Path, ...] = (),
    timeout_s: float = 60.0,
) -> Policy:
    """A policy of one region ``r``, under ``disallow``, run once in each phase."""
    region = Region(
        name="r",
        line=region_line,
        step=step,
        setup=setup,
        boundaries=(),
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        warmup=0,
        guarded_runs=1,
        repeats=1,
        timeout_s=timeout_s,
        checks=Checks(False, None, 1e-5, 1e-8, None),
    )
    return Policy(Path(path), 1, "p", python_path, (region,))


# --- result records -----------------------------------------------------------------------------

POLICY = "policies/train.yaml"

TIMING = TimingStats(
    repeats=20, min_s=0.0011, p25_s=0.0012, median_s=0.00123, p75_s=0.0013, max_s=0.0021
)
BOUNDARY = BoundaryCost(name="pkg.io:save", calls=20, total_s=0.0031, per_step_s=0.000155)

FAILED_CHECK = CheckOutcome(CheckName.REFERENCE, False, "max abs diff 0.3 > 1e-05")


def at(
    line: int = 12, path: str = "examples/bad.py", function: str = "train_step"
) -> SourceLocation:
    """A line of user code; by default the one every sample transfer comes from."""
    return SourceLocation(path, line, function)


def transfer(
    direction: Direction = Direction.HOST_TO_DEVICE,
    *,
    line: int = 12,
    path: str = "examples/bad.py",
    phase: Phase = Phase.FIRST_CALL,
    count: int = 1,
    dtype: str | None = "float32",
    shape: tuple[int, ...] | None = (8,),
    failing: bool = True,
    explicit: bool = False,
    boundary: str | None = None,
    thread: str | None = None,
    source: str | None = None,
    message: str | None = None,
) -> Transfer:
    """One sighting of a transfer at ``path:line`` in ``train_step``.

    ``message`` (what JAX logged) defaults to a guard message naming the direction.
    """
    return Transfer(
        direction=direction,
        explicit=explicit,
        dtype=dtype,
        shape=shape,
        location=at(line, path),
        phase=phase,
        failing=failing,
        message=message or f"Disallowed {direction.label} transfer: aval=ShapedArray(float32[8])",
        boundary=boundary,
        count=count,
        source=source,
        thread=thread,
    )


def region_error(
    kind: ErrorKind = ErrorKind.STEP,
    *,
    message: str = "ValueError: boom",
    details: str = "Traceback ...",
    location: SourceLocation | None = None,
) -> RegionError:
    """A region that raised; by default its step, at examples/bad.py:30."""
    return RegionError(kind, message, details, location if location is not None else at(30))


# The usual error of the samples: setup raised, with a traceback and a line to point at.
SETUP_ERROR = region_error(
    ErrorKind.SETUP,
    details=(
        'Traceback (most recent call last):\n  File "examples/setup.py", line 3\nValueError: boom'
    ),
    location=at(3, "examples/setup.py", "make_batch"),
)


# The machine a sample region's times were measured on, as a worker reads it.
MACHINE = Machine(
    processor="Intel(R) Xeon(R) CPU @ 2.20GHz",
    cores=2,
    platform="cpu",
    accelerator="cpu",
    devices=1,
    jax="0.10.2",
    jaxlib="0.10.2",
    transfer_gate="0.1.0",
)


def region(name: str = "step", **changes: object) -> RegionResult:
    """Region ``train.<name>``, passing, timed and with one boundary, then ``changes``."""
    base = RegionResult(
        suite="train",
        name=name,
        policy_path=POLICY,
        policy_line=7,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        timing=TIMING,
        boundaries=(BOUNDARY,),
        wall_s=0.5,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def run_of(*regions: RegionResult) -> RunResult:
    """A run of one suite, ``train`` from policies/train.yaml, holding ``regions``."""
    return RunResult((SuiteResult("train", POLICY, regions),))


# --- a repo for the real CLI ----------------------------------------------------------------------

# Steps for `mod.py`: `step` moves nothing, `leaky` moves a host array every call.
STEPS = """
import jax
import numpy as np


@jax.jit
def step(x):
    return x + 1.0


def inputs():
    return (jax.device_put(np.zeros(3, np.float32)),)


def leaky(x):
    return step(np.zeros(3, np.float32))
"""


def region_yaml(name: str, step: str, checks: str = "") -> str:
    """One region entry of a policy: ``mod:<step>`` after ``mod:inputs``, plus ``checks``."""
    return f"  - name: {name}\n    step: mod:{step}\n    setup: mod:inputs\n{checks}"


def policy_yaml(*regions: str) -> str:
    """A policy with the fast test defaults and the given ``region_yaml`` entries."""
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{''.join(regions)}"


def policy(*steps: str) -> str:
    """A policy with one region per step, each named after its step."""
    return policy_yaml(*(region_yaml(step, step) for step in steps))
