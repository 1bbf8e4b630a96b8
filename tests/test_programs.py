"""A region's own programs: a cold first call for its step whatever ran before, setup's shared.

Without ``jax.clear_caches()`` before each region, what an earlier region left in JAX's
caches must still change nothing in a later region's verdict: the same regions in either
order, in one worker, give the same verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import pytest
from cli_helpers import FAST_DEFAULTS, make_repo, run_gate

from gate.jaxhooks.programs import RegionPrograms, _context, shared_programs


def _traced_counter() -> tuple[list[int], object]:
    traces: list[int] = []

    @jax.jit
    def double(x: jax.Array) -> jax.Array:
        traces.append(1)  # runs only when JAX traces the function
        return x * 2

    return traces, double


def test_each_region_traces_its_step_afresh_and_setup_once() -> None:
    traces, double = _traced_counter()
    x = jax.numpy.ones(3)
    for _ in range(3):
        with RegionPrograms().entered():
            double(x)  # type: ignore[operator]
            double(x)  # type: ignore[operator]
    assert len(traces) == 3  # once per region, none for the second call in one
    shared, triple = _traced_counter()
    for _ in range(3):
        with RegionPrograms().entered(), shared_programs():
            triple(x)  # type: ignore[operator]
    assert len(shared) == 1


def test_one_regions_programs_are_the_same_each_time_it_is_entered() -> None:
    traces, double = _traced_counter()
    programs = RegionPrograms()
    x = jax.numpy.ones(3)
    for _ in range(3):  # the region's run, then its held rounds, then its cost run
        with programs.entered():
            double(x)  # type: ignore[operator]
    assert len(traces) == 1


def test_the_context_is_put_back_also_on_an_exception() -> None:
    before = _context().get_global()
    seen: list[object] = []

    def step() -> None:
        seen.append(_context().get_global())
        raise RuntimeError("step broke")

    with RegionPrograms().entered(), pytest.raises(RuntimeError, match="step broke"):
        step()
    assert seen != [before]
    assert _context().get_global() == before


# The same jitted `add` in two regions: `allows` moves an uncommitted array to device 1 under
# a guard that allows it (recorded, not failing); `refuses` makes the same move under
# `disallow`. JAX checks the move only on a call's slow path, so if `allows` left the fast
# path warm, `refuses` would pass whenever it runs second. (Host callbacks are placed when a
# program is traced: the trace counters above cover them.)
SHARED = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def add(x, y):
    return x + y


def inputs():
    committed = jax.device_put(np.ones(4, np.float32), jax.devices()[1])
    return jnp.ones(4), committed


def step(uncommitted, committed):
    return add(uncommitted, committed)
"""


def _policy(order: list[str]) -> str:
    regions = {
        "allows": "  - {name: allows, step: shared:step, setup: shared:inputs, guard: allow}\n",
        "refuses": "  - {name: refuses, step: shared:step, setup: shared:inputs}\n",
    }
    return (
        "version: 1\nenv:\n  XLA_FLAGS: --xla_force_host_platform_device_count=2\n"
        f"{FAST_DEFAULTS}regions:\n" + "".join(regions[name] for name in order)
    )


@pytest.mark.parametrize("order", [["allows", "refuses"], ["refuses", "allows"]])
def test_verdicts_do_not_depend_on_what_ran_before_in_the_worker(
    tmp_path: Path, order: list[str]
) -> None:
    repo = make_repo(tmp_path, {"shared.py": SHARED, "policies/p.yaml": _policy(order)})
    run = run_gate(repo, "run", "--json", "reports/r.json", devices=2)
    assert run.returncode == 1, run
    assert run.testcase("refuses: transfers").find("failure") is not None, run
    assert run.testcase("allows: transfers").find("failure") is None, run
    regions = {
        r["name"]: r
        for r in json.loads((repo / "reports/r.json").read_text())["suites"][0]["regions"]
    }
    for name in order:
        moves = [(t["direction"], t["cause"]) for t in regions[name]["transfers"]]
        assert ("device-to-device", "uncommitted") in moves, (name, moves)
