"""Judging a region's donations on its own: which unused ones fail, and when none could be checked.

Under ``donation: fail`` every unused donation fails here: the step asked XLA to reuse a
buffer and it did not. Under the default ``fail_new`` none fails here: each is reported, and
the comparison with the base or the stored baseline fails the ones that stopped working
(`gate.results.donation_changes`), as collectives are judged. Under ``fail`` an inventory that
could not be read is an error, never a pass: the pass would claim every donation was used,
which nobody saw (as `gate.region.verdict.unchecked` does for transfers); under ``fail_new``
the comparison makes that check.
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
    note: str | None = None  # `warn` or `fail_new`, unchecked: what the pass says nothing about
    error: RegionError | None = None  # `donation: fail` and unchecked


def judge_donations(rule: DonationRule, cost: StepCost | None, where: str) -> DonationVerdict:
    """Each unused donation, failing under ``donation: fail``, a warning under ``warn``; or
    why none could be checked.

    ``where`` names the platform, as the other "could not be checked" texts do.
    """
    if rule is DonationRule.ALLOW:
        return DonationVerdict()
    if cost is not None and cost.donations is not None:
        failing, warning = rule is DonationRule.FAIL, rule is DonationRule.WARN
        return DonationVerdict(
            tuple(replace(d, failing=failing, warning=warning) for d in cost.donations)
        )
    why = _why_unread(cost)
    gap = f"unused donations could not be checked on {where} ({why})"
    if rule is not DonationRule.FAIL:
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
