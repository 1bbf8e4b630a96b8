"""Judging a region's donations: which unused ones fail, and when they could not be checked.

A donation is judged on the region alone (unlike a collective, which is judged against the
base): the step asked XLA to reuse a buffer and it did not. Under ``donation: fail`` an
inventory that could not be read is an error, never a pass: the pass would claim every
donation was used, which nobody saw (as `gate.region.verdict.unchecked` does for transfers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gate.policy.model import DonationRule
from gate.results.costs import StepCost
from gate.results.donations import UnusedDonation
from gate.results.errors import ErrorKind, RegionError


@dataclass(frozen=True)
class DonationVerdict:
    """The region's unused donations, judged, and what a reader must know."""

    donations: tuple[UnusedDonation, ...] = ()
    note: str | None = None  # `donation: warn` and unchecked: what the pass says nothing about
    error: RegionError | None = None  # `donation: fail` and unchecked


def judge_donations(rule: DonationRule, cost: StepCost | None, where: str) -> DonationVerdict:
    """Each unused donation, failing under ``donation: fail``; or why none could be checked.

    ``where`` names the platform, as the other "could not be checked" texts do.
    """
    if rule is DonationRule.ALLOW:
        return DonationVerdict()
    if cost is not None and cost.donations is not None:
        failing = rule is DonationRule.FAIL
        return DonationVerdict(tuple(replace(d, failing=failing) for d in cost.donations))
    why = _why_unread(cost)
    gap = f"unused donations could not be checked on {where} ({why})"
    if rule is DonationRule.WARN:
        return DonationVerdict(note=f"{gap}: this region's pass says nothing about them")
    message = (
        f"{gap}, and the policy fails on them (donation: fail); run where the compiled "
        "programs can be read (a JAX this transfer-gate reaches), or accept the gap with "
        "`donation: warn`"
    )
    return DonationVerdict(error=RegionError(ErrorKind.UNCHECKED, message, message))


def _why_unread(cost: StepCost | None) -> str:
    if cost is None:
        return "the cost run did not happen"
    if cost.comm is not None and cost.comm.note:
        return cost.comm.note
    return cost.note or "the compiled programs were not read"
