"""A while loop's work counts its trip count: in the totals, per function and by line.

XLA's cost analysis counts a loop's body once; the gate adds the other runs where XLA knows
the trip count (`gate.witness.costs.Loops`), and says where it does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import msgspec
import pytest

from gate.policy.model import CostRule
from gate.results.costs import StepCost, compare_costs
from gate.results.timing_baseline import StoredCost
from gate.witness.costs import measure_step

TRIPS = 5


def _body(i: jax.Array, x: jax.Array) -> jax.Array:
    return (x @ x) * 0.5


def _rolled(x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, TRIPS, _body, x, unroll=False)


def _unrolled(x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, TRIPS, _body, x, unroll=True)


def _until(x: jax.Array) -> jax.Array:
    # Its trip count depends on the data: XLA cannot know it.
    return jax.lax.while_loop(lambda x: x[0, 0] < 100.0, lambda x: (x @ x) * 0.5 + 1.0, x)


def _cost_of(fn: Callable[[jax.Array], jax.Array]) -> StepCost:
    step = jax.jit(fn)
    x = jnp.full((64, 64), 0.01, jnp.float32)
    step(x).block_until_ready()  # warm, as the cost run is
    return measure_step(lambda: x, lambda v: step(v).block_until_ready())


def test_a_loop_rolled_and_unrolled_reads_the_same_flops_everywhere() -> None:
    rolled, unrolled = _cost_of(_rolled), _cost_of(_unrolled)
    once = 2 * 64**3 + 64**2  # one run of the body: the dot and the scaling
    for cost in (rolled, unrolled):
        flops = cost.total("flops")
        assert flops is not None
        # Within the loop's counter: a few flops of its own, rolled only.
        assert abs(flops - TRIPS * once) <= 4 * TRIPS, flops
        (function,) = cost.functions
        assert function.figure("flops") == flops
        assert function.loops == ""
        lines = cost.lines
        body = [w for w in lines if w.function == "_body"]
        assert [w.flops for w in body] == [TRIPS * once], body
    # What XLA's figures alone read for the rolled loop: one run of the body.
    assert (rolled.total("flops") or 0) > 4 * once


def test_a_loop_whose_trip_count_is_unknown_is_counted_once_and_said_so() -> None:
    cost = _cost_of(_until)
    (function,) = cost.functions
    assert function.loops == "1 loop whose trip count is unknown, counted once a run"
    assert cost.headline().startswith("≥ ")
    assert function.figure("flops") < 2 * (2 * 64**3 + 2 * 64**2)


@pytest.mark.parametrize(
    "before",
    [
        # A file from before the gate counted trip counts at all.
        {"loops_counted": False, "loops_added": False, "trips_read": False},
        # One from before it read them from the loops' counters: a TPU's loops counted once.
        {"trips_read": False},
    ],
)
def test_a_baseline_that_counted_loops_once_bounds_no_work_until_recorded_again(
    before: dict[str, bool],
) -> None:
    rolled = _cost_of(_rolled)
    stored = StoredCost.of(rolled)
    assert stored.loops_counted
    assert stored.trips_read
    assert not compare_costs(stored.step_cost(), rolled, CostRule()).changes
    # Its figures read one run of the body.
    old = msgspec.structs.replace(stored, **before)
    once = dataclasses.replace(
        old.step_cost(), totals=(("flops", (rolled.total("flops") or 0) / TRIPS),)
    )
    compared = compare_costs(once, rolled, CostRule(), against="baseline")
    assert not compared.failing
    assert compared.listing()[-1] == (
        "work not bounded: the baseline counted each loop's body once "
        "(recorded before the gate counted trip counts); run `transfer-gate baseline` to record "
        "it again"
    )
