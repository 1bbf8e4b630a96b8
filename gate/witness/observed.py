"""A transfer seen in a mapped run, and naming a stretch's moves after its call's arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gate.policy.levels import Direction
from gate.results.records import SourceLocation
from gate.witness.arguments import CallPlan, match


@dataclass(frozen=True)
class Observed:
    """A transfer seen during a mapped run, with where it came from."""

    direction: Direction
    dtype: str | None
    shape: tuple[int, ...] | None
    location: SourceLocation | None
    explicit: bool
    boundary: str | None
    thread: str
    # One stretch of a thread at one line (from one trace event to the next),
    # and this move's place among that stretch's moves of its direction and
    # kind: JAX moves a call's arguments in order, so the n-th move of a
    # stretch is the same array every time the line runs.
    segment: int = 0
    index: int = 0
    argument: str | None = None  # the jitted call's argument it was, where known
    jitted_call: str | None = None  # the jitted function the line called, where known


def name_moves(observed: list[Observed], plan_of: Callable[[Observed], CallPlan | None]) -> None:
    """Name the implicit host-to-device moves of each stretch after its call's arguments.

    ``plan_of`` gives the stretch's plan (from a move of it). A stretch is named
    only when its moves and the plan agree exactly (`gate.witness.arguments.match`).
    """
    stretches: dict[int, list[int]] = {}
    for position, seen in enumerate(observed):
        if seen.direction is Direction.HOST_TO_DEVICE and not seen.explicit:
            stretches.setdefault(seen.segment, []).append(position)
    for positions in stretches.values():
        plan = plan_of(observed[positions[0]])
        if plan is None:
            continue
        moves = match(plan, [(observed[p].dtype, observed[p].shape) for p in positions])
        if moves is None:
            continue
        for position, move in zip(positions, moves, strict=True):
            # An undescribed move named from the plan is that value's array.
            observed[position] = replace(
                observed[position],
                argument=move.label,
                jitted_call=plan.function,
                dtype=move.dtype,
                shape=move.shape,
            )
