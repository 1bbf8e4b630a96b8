"""The collectives of a region from both trees, compared (`gate.results.collective_changes`)."""

from __future__ import annotations

from dataclasses import replace

from gate.policy.model import Region
from gate.results.collective_changes import CommComparison, compare_communication
from gate.results.comparison import Renamed
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
    base: RegionResult, head: RegionResult, region: Region, renamed: tuple[Renamed, ...] = ()
) -> CommComparison:
    """The collectives, base vs head, under the head's ``collectives:`` and ``cost:`` rules.

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
    return compare_communication(
        base_comm,
        head_comm,
        region.collectives,
        region.cost.max_increase,
        missing=_unread(base if base_comm is None else head),
    )


def _unread(result: RegionResult) -> str:
    cost = result.cost
    if cost is None:
        return "its cost run did not happen"
    return cost.note or "its compiled programs were not read"
