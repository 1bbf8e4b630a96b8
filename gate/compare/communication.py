"""The collectives and unused donations of a region from both trees, compared.

Both come from the same compiled programs and are compared alike: collectives by
`gate.results.collective_changes`, donations by `gate.results.donation_changes`.
"""

from __future__ import annotations

from dataclasses import replace

from gate.policy.model import Region
from gate.results.collective_changes import CommComparison, compare_communication
from gate.results.comparison import Renamed
from gate.results.donation_changes import DonationComparison, compare_donations
from gate.results.line_map import LineMap
from gate.results.records import RegionResult


def program_names(renamed: tuple[Renamed, ...]) -> dict[str, str]:
    """``jit(clean)`` -> ``jit(clean2)``: the base's programs under the names the head's have.

    JAX names a jitted function's program after the function: a step the change renamed
    is the same program, not one gone and another new.
    """
    return {f"jit({_leaf(r.base)})": f"jit({_leaf(r.head)})" for r in renamed if r.head}


def _leaf(spec: str) -> str:
    """``clean`` of ``pkg.steps:clean``, ``m`` of ``pkg.steps:Model.m``: what jit names it."""
    return spec.rsplit(":", maxsplit=1)[-1].rsplit(".", maxsplit=1)[-1]


def compare_sides(
    base: RegionResult,
    head: RegionResult,
    region: Region,
    renamed: tuple[Renamed, ...] = (),
    lines: LineMap | None = None,
) -> CommComparison:
    """The collectives, base vs head, under the head's ``collectives:`` and ``cost:`` rules;
    the unused donations with them, under its ``donation:``.

    Always made, as ``collectives: fail`` is always in force: a side without an inventory
    is then a check that could not be made, never a silent pass.
    """
    names = program_names(renamed)
    base_comm = base.cost.comm if base.cost is not None else None
    if base_comm is not None and names:
        collectives = tuple(
            replace(c, function=names.get(c.function, c.function)) for c in base_comm.collectives
        )
        base_comm = replace(base_comm, collectives=collectives)
    head_comm = head.cost.comm if head.cost is not None else None
    compared = compare_communication(
        base_comm,
        head_comm,
        region.collectives,
        region.cost.max_increase,
        missing=_unread(base if base_comm is None else head),
        lines=lines,
    )
    return replace(compared, donations=donations_compared(base, head, region, names))


def donations_compared(
    base: RegionResult, head: RegionResult, region: Region, names: dict[str, str]
) -> DonationComparison | None:
    """The head's unused donations against the base's, under the head's ``donation:``.

    Each side's whole inventory (`StepCost.donations`), whatever its own policy judged:
    a donation is lost when the base reused it, not when the base's policy looked at it.
    """
    base_donations = base.cost.donations if base.cost is not None else None
    if base_donations is not None and names:
        base_donations = tuple(
            replace(d, function=names.get(d.function, d.function)) for d in base_donations
        )
    head_donations = head.cost.donations if head.cost is not None else None
    base_reused = base.cost.reused if base.cost is not None else None
    if base_reused is not None and names:
        base_reused = tuple(
            replace(d, function=names.get(d.function, d.function)) for d in base_reused
        )
    return compare_donations(
        base_donations,
        head_donations,
        region.donation,
        missing=_donations_unread(base if base_donations is None else head),
        base_reused=base_reused,
        head_reused=head.cost.reused if head.cost is not None else None,
    )


def _unread(result: RegionResult) -> str:
    cost = result.cost
    if cost is None:
        return "its cost run did not happen"
    return cost.note or "its compiled programs were not read"


def _donations_unread(result: RegionResult) -> str:
    cost = result.cost
    if cost is None:
        return "its cost run did not happen"
    if cost.comm is not None and cost.comm.note:
        return cost.comm.note  # the program whose text could not be read, and why
    return cost.note or "its compiled programs were not read"
