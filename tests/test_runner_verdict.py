"""JAX's own refusal outranks the map: a line the map judged allowed still fails.

In-process, on one region built by hand: the map's record of a line is
planted as "allowed", then the guarded run (JAX at `disallow`) refuses the
same transfer. No CLI run can force the map to be wrong on purpose, so this
pins the rule itself.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from result_samples import callable_ref, one_region_policy

from gate.levels import Direction
from gate.policy.resolve import python_path
from gate.region.callables import RegionCode, import_region
from gate.region.region_run import RegionRun
from gate.results.records import Phase, Transfer
from gate.user_code import SourceLocation, UserCode

STEP = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def step():
    return double(np.ones(3, np.float32))  # the refused transfer
"""


def test_a_refusal_fails_a_line_the_map_called_allowed(tmp_path: Path) -> None:
    (tmp_path / "refusal_step.py").write_text(textwrap.dedent(STEP))
    policy = one_region_policy(callable_ref("refusal_step:step"), python_path=(tmp_path,))
    [region] = policy.regions
    source = (tmp_path / "refusal_step.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "the refused transfer" in text)
    planted = Transfer(
        direction=Direction.HOST_TO_DEVICE,
        explicit=False,
        dtype="float32",
        shape=(3,),
        location=SourceLocation("refusal_step.py", line, "step"),
        phase=Phase.STEADY_STATE,
        failing=False,
        message="the map, wrongly lenient",
    )
    with python_path(policy.python_path, tmp_path):
        code = RegionCode(policy, region, UserCode(tmp_path), import_region(policy, region))
        run = RegionRun(code)
        run.verdict.transfers.append(planted)
        run.guarded_call(Phase.STEADY_STATE)
    failing = [t for t in run.verdict.transfers if t.failing]
    assert len(failing) == 1
    assert failing[0].location == planted.location
    assert failing[0].message.startswith("JAX's guard, refusing the transfer: ")
