"""The cost run: one more run of the step, after every judged and timed run, that sees its programs.

Why a run of its own, last: to see every program the step runs, the gate
sends every jitted call through Python's slower dispatch for that run
(`gate.jaxhooks.executables`), so it must never be one of the timed runs, and
nothing judged depends on it. It is not guarded (as warm-up is not): what it
moves was judged in the runs before. It runs for every region, whatever
``timing:`` says: the compiler's figures cost one step and no noise. Where the step's
time is compared, a few traced runs follow it (never among the timed runs): the
profiler's op times by line, for a slower verdict to name its lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gate.jaxhooks.donation_warnings import WarnedDonation
from gate.region.errors import RegionAbort, first_line
from gate.region.inputs import Inputs
from gate.region.stages import Stage, announce
from gate.results.costs import StepCost, not_measured
from gate.user_code import UserCode
from gate.witness.costs import measure_step_ops
from gate.witness.op_times import op_times


def cost_phase(
    fresh: Callable[[], Inputs],
    call: Callable[[Inputs], Any],
    user: UserCode | None = None,
    warned: Sequence[WarnedDonation] = (),
    *,
    traced: str | None = None,
) -> StepCost:
    """The step's cost, from one ``call`` of the step on ``fresh()`` inputs (setup not counted).

    Its programs' collectives and unused donations too (``warned``: those JAX dropped when
    it lowered them), with lines named after ``user``'s files. A step (or setup) that raises
    only now, having passed every run before, costs the region its cost figures, not its
    verdict: the note says what it raised.

    ``traced`` (the region's ``suite.region``, naming its trace): then a few more runs under
    JAX's profiler give the op time by line (`gate.witness.op_times`), on the fast path
    again, as the timed runs ran.
    """
    import jax

    announce(Stage.COSTING)
    try:
        cost, ops = measure_step_ops(fresh, call, user=user, warned=warned)
        # One more, untimed: each call's first after the cost run goes through Python to put
        # its fast path back, and a held region's timed rounds (`gate.region.held`) come next.
        call(fresh())
        if traced is not None and cost.measured and ops:
            code = user or UserCode(Path.cwd())
            backend = jax.default_backend()
            times = op_times(fresh, call, ops, code, platform=backend, name=traced)
            cost = replace(cost, times=times)
    except RegionAbort as abort:
        return not_measured(f"cost not measured: the cost run raised: {abort.error.message}")
    except Exception as exc:
        why = f"{type(exc).__name__}: {first_line(exc)}"
        return not_measured(f"cost not measured: the step raised in the cost run: {why}")
    return cost
