"""Applying a region's ``accept:`` to its comparison with the base.

An entry accepts a change of its kind only while it is new in the head: the base's copy of
the policy has no entry of that kind with the same reason (`gate.policy.acceptance`). So an
acceptance lasts as long as the pull request that wrote it: merged, the base has it, and a
later change of the same kind fails again until its own pull request says why. Nothing to
remember to delete, and no commit to write down that a rebase would make stale.

An accepted comparison keeps every figure; it only stops failing, and each report says
where it was accepted. What stays failing ends with the exact edit that accepts it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gate.compare.base_policy import base_document
from gate.policy.acceptance import accept_edit, base_reasons, new_in_head
from gate.policy.model import AcceptedChange, ChangeKind, Policy, Region
from gate.results.collective_changes import CommComparison
from gate.results.comparison import BaseComparison, TimingComparison
from gate.results.donation_changes import DonationComparison
from gate.results.records import Recompile


def base_accept(policy: Policy, region: str, head_root: Path, base_root: Path) -> dict[str, str]:
    """``{kind: reason}``: the ``accept:`` of ``region`` in the base's copy of the policy."""
    regions = base_document(policy, head_root, base_root) or []
    entry = next((r for r in regions if isinstance(r, dict) and r.get("name") == region), None)
    return base_reasons(entry)


def accepted(
    comparison: BaseComparison,
    policy: Policy,
    region: Region,
    base: dict[str, str],
    recompiles: tuple[Recompile, ...] = (),
) -> tuple[BaseComparison, tuple[Recompile, ...], tuple[str, ...]]:
    """``comparison`` and the head's ``recompiles`` with the changes the head's ``accept:``
    accepts, and the notes on entries that accept nothing: ones the base has too (stale),
    ones with nothing to accept."""
    path = str(policy.path)
    applying = {e.kind: e for e in region.accept if new_in_head(e, base)}
    stale = {e.kind: e for e in region.accept if not new_in_head(e, base)}
    edits = tuple(
        (kind, accept_edit(kind, region, path, stale.get(kind)))
        for kind in ChangeKind
        if kind not in applying
    )
    comparison = replace(comparison, to_accept=edits)
    used: list[AcceptedChange] = []
    for kind, entry in applying.items():
        where = f"{path}:{entry.line}: {entry.reason}"
        if kind is ChangeKind.RECOMPILES:
            # Not a comparison of the base's record: the head's startup programs judged
            # against the base's count (`gate.witness.recompiles.startup_recompiles`).
            beyond = [r for r in recompiles if r.beyond_the_base]
            if beyond:
                recompiles = tuple(
                    replace(r, failing=False, accepted=where) if r in beyond else r
                    for r in recompiles
                )
                used.append(entry)
            continue
        changed = _accept(comparison, kind, where)
        if changed is not None:
            comparison = changed
            used.append(entry)
    notes = [
        f"{path}:{e.line}: accept: {e.kind.value}: the base has this entry too, so it accepts "
        "nothing here (it accepted the change that merged it); remove it"
        for e in stale.values()
    ]
    notes += [
        f"{path}:{e.line}: accept: {e.kind.value}: nothing of that kind changed against the "
        "base, so it accepts nothing; remove it, or keep it for a change still to come"
        for e in applying.values()
        if e not in used
    ]
    return replace(comparison, accepted=tuple(used)), recompiles, tuple(notes)


def _accept(comparison: BaseComparison, kind: ChangeKind, where: str) -> BaseComparison | None:
    """``comparison`` with its ``kind`` change accepted at ``where``; None when nothing of that
    kind would fail (an entry accepts a failure, never a pass: a note says it is unused)."""
    if kind is ChangeKind.RESULTS:
        results = comparison.results
        if results is None or not results.failing:
            return None
        return replace(comparison, results=replace(results, accepted=where))
    if kind is ChangeKind.COST:
        cost = comparison.cost
        if cost is None or not cost.failing:
            return None
        return replace(comparison, cost=replace(cost, accepted=where))
    if kind is ChangeKind.TIMING:
        timings = (comparison.timing, *comparison.boundary_timing)
        if not any(t is not None and t.failing for t in timings):
            return None
        step, boundaries = comparison.timing, comparison.boundary_timing
        return replace(
            comparison,
            timing=None if step is None else _timing(step, where),
            boundary_timing=tuple(_timing(t, where) for t in boundaries),
        )
    comm = comparison.comm
    if comm is None:
        return None
    if kind is ChangeKind.COLLECTIVES:
        if not comm.collectives_failing:
            return None
        return replace(comparison, comm=_collectives(comm, where))
    donations = comm.donations
    if donations is None or not donations.failing:
        return None
    return replace(comparison, comm=replace(comm, donations=_donations(donations, where)))


def _timing(timing: TimingComparison, where: str) -> TimingComparison:
    return replace(timing, failing=False, accepted=where) if timing.failing else timing


def _collectives(comm: CommComparison, where: str) -> CommComparison:
    # Each new collective is a finding at its own line: accepted, it fails there no more.
    changes = tuple(replace(c, failing=False) for c in comm.changes)
    return replace(comm, changes=changes, accepted=where)


def _donations(donations: DonationComparison, where: str) -> DonationComparison:
    lost = tuple(replace(d, failing=False) for d in donations.lost)
    return replace(donations, lost=lost, accepted=where)
