"""The cost run: a run of the step that sees its programs, and what they cost.

To see every program the step runs, the gate sends every jitted call through
Python's slower dispatch for that run (`gate.jaxhooks.executables`), so it must
never be one of the timed runs, and nothing judged depends on it. The first of a
region's warm-up runs is that run where there are two or more (`costed`): it costs no run
of its own, ~3.5 ms a region on a TPU, where making setup's inputs is most of a run. It
is unguarded and unwatched, as every warm-up run is, and the next warm-up run leaves jit's
C++ fast path as the mapped and timed runs will find it. Never a guarded run: on Python's
path JAX checks moves it checks only in a first call, and a steady-state run would report
them differently. With fewer warm-up runs a run of its own comes after the checks
(`cost_phase`), unguarded: what it moves was judged in the runs before. Every region has
its cost, whatever ``timing:`` says: the compiler's figures cost no noise. Where the step's
time is compared, a few traced runs follow (never among the timed runs): the profiler's op
times by line, for a slower verdict to name its lines.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gate.jaxhooks.donation_warnings import WarnedDonation
from gate.region.errors import RegionAbort, first_line
from gate.region.inputs import Inputs
from gate.region.stages import Stage, announce
from gate.results.costs import StepCost, not_measured
from gate.results.line_times import OpTimes
from gate.user_code import UserCode
from gate.witness.costs import measure_step_ops
from gate.witness.line_work import OpWork
from gate.witness.op_times import op_times


@dataclass(frozen=True)
class Costed:
    """What a run that saw the step's programs measured (`costed`): its cost, and its ops by
    line, which the traced runs' op times are matched to."""

    cost: StepCost
    ops: tuple[OpWork, ...]


def costed(
    fresh: Callable[[], Inputs],
    run: Callable[[Inputs], Any],
    user: UserCode,
    warned: Sequence[WarnedDonation] = (),
) -> Costed:
    """``run(fresh())``, every program it runs seen (setup is not), and what they cost: the
    step's cost, its collectives and unused donations, its ops by line (`measure_step_ops`).
    Whatever ``fresh`` or ``run`` raises propagates."""
    return Costed(*measure_step_ops(fresh, run, user=user, warned=warned))


@dataclass(frozen=True)
class CostRun:
    """What the cost run gives: the step's cost, and its traced runs where they were left for
    later (``run --base`` holds the region: traced only if the comparison says "slower")."""

    cost: StepCost
    traced_later: Callable[[], OpTimes] | None = None


def cost_phase(
    fresh: Callable[[], Inputs],
    call: Callable[[Inputs], Any],
    user: UserCode | None = None,
    warned: Sequence[WarnedDonation] = (),
    *,
    traced: str | None = None,
    traces: Path | None = None,
    later: bool = False,
    measured: Costed | None = None,
) -> CostRun:
    """The step's cost, from one ``call`` of the step on ``fresh()`` inputs (setup not counted);
    ``measured``, what a warm-up run already measured (`costed`), makes that run unneeded.

    Its programs' collectives and unused donations too (``warned``: those JAX dropped when
    it lowered them), with lines named after ``user``'s files. A step (or setup) that raises
    only now, having passed every run before, costs the region its cost figures, not its
    verdict: the note says what it raised.

    ``traced`` (the region's ``suite.region``, naming its trace): then a few more runs under
    JAX's profiler give the op time by line (`gate.witness.op_times`), on the fast path
    again, as the timed runs ran; the trace is kept under ``traces`` where that is given.
    With ``later``, those runs are not made now but handed back (`CostRun.traced_later`): a
    held region makes them only when its comparison with the base is "slower", the one
    verdict that lists lines. On a TPU a trace costs ~0.9 s a
    region and tree; most comparisons never read it.
    """
    import jax

    announce(Stage.COSTING)
    code = user or UserCode(Path.cwd())
    try:
        # Every call after it finds its fast path as before (`gate.jaxhooks.executables`): a
        # held region's timed rounds (`gate.region.held`) and the traced runs come next.
        if measured is None:
            measured = costed(fresh, call, code, warned)
        cost, ops = measured.cost, measured.ops
        if traced is not None and cost.measured and ops:
            trace = functools.partial(
                op_times,
                fresh,
                call,
                ops,
                code,
                platform=jax.default_backend(),
                name=traced,
                kept=traces,
            )
            if later:
                return CostRun(cost, trace)
            cost = replace(cost, times=trace())
    except RegionAbort as abort:
        return CostRun(
            not_measured(f"cost not measured: the cost run raised: {abort.error.message}")
        )
    except Exception as exc:
        why = f"{type(exc).__name__}: {first_line(exc)}"
        return CostRun(not_measured(f"cost not measured: the step raised in the cost run: {why}"))
    return CostRun(cost)
