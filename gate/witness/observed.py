"""A transfer seen in a mapped run; naming a stretch's moves after its call's arguments, and
describing an eager operator's move by its host operand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gate.levels import Direction
from gate.results.placement import Placement
from gate.user_code import SourceLocation
from gate.witness.arguments import CallPlan, match
from gate.witness.operands import HostValue


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
    # Over several devices, where it lands; and how many guard lines one such transfer
    # writes (JAX logs a host value sent to N devices once per device).
    destination: Placement | None = None
    lines_per_transfer: int = 1
    # Logged while an eager operator on a device array and a host value ran
    # (`gate.witness.operands`): that operand, and the call's number (0: none was running).
    operand: HostValue | None = None
    operation: int = 0


def transfers_of(observed: list[Observed], positions: list[int]) -> list[list[int]]:
    """The positions of one stretch's guard lines, grouped into the transfers they make.

    JAX logs one host value sent over N devices as N consecutive lines naming the same
    array and destination (`Observed.lines_per_transfer`); two arguments of the same
    array and destination follow each other as 2N such lines. A line JAX left
    undescribed is a transfer of its own: nothing says which its group would be.
    """
    groups: list[list[int]] = []
    for position in positions:
        seen = observed[position]
        if groups:
            last = observed[groups[-1][0]]
            same = (seen.dtype, seen.shape, seen.destination) == (
                last.dtype,
                last.shape,
                last.destination,
            )
            if same and seen.dtype is not None and len(groups[-1]) < seen.lines_per_transfer:
                groups[-1].append(position)
                continue
        groups.append([position])
    return groups


def describe_operands(observed: list[Observed]) -> None:
    """Describe the move an eager operator's call logged without a description: it is the
    call's host operand (``x * 100`` moves ``int32[]``).

    Only a call that logged exactly one implicit host-to-device move: one operand is one
    move on one device; more (the operand sent to each device of a sharded array) are left
    as JAX described them, as nothing here says how many devices one move went to.
    """
    calls: dict[int, list[int]] = {}
    for position, seen in enumerate(observed):
        if seen.operation and seen.direction is Direction.HOST_TO_DEVICE and not seen.explicit:
            calls.setdefault(seen.operation, []).append(position)
    for positions in calls.values():
        if len(positions) != 1:
            continue
        seen = observed[positions[0]]
        if seen.dtype is None and seen.operand is not None:
            dtype, shape = seen.operand
            observed[positions[0]] = replace(seen, dtype=dtype, shape=shape)


def name_moves(observed: list[Observed], plan_of: Callable[[Observed], CallPlan | None]) -> None:
    """Name the implicit host-to-device moves of each stretch after its call's arguments.

    ``plan_of`` gives the stretch's plan (from a move of it). A stretch is named
    only when its transfers (a mesh's per-device lines grouped, `transfers_of`) and the
    plan agree exactly (`gate.witness.arguments.match`).
    """
    stretches: dict[int, list[int]] = {}
    for position, seen in enumerate(observed):
        if seen.direction is Direction.HOST_TO_DEVICE and not seen.explicit:
            stretches.setdefault(seen.segment, []).append(position)
    for positions in stretches.values():
        plan = plan_of(observed[positions[0]])
        if plan is None:
            continue
        transfers = transfers_of(observed, positions)
        moves = match(plan, [(observed[t[0]].dtype, observed[t[0]].shape) for t in transfers])
        if moves is None:
            continue
        for transfer, move in zip(transfers, moves, strict=True):
            for position in transfer:
                # An undescribed move named from the plan is that value's array.
                observed[position] = replace(
                    observed[position],
                    argument=move.label,
                    jitted_call=plan.function,
                    dtype=move.dtype,
                    shape=move.shape,
                )
