"""Head's unused donations against the base's (or the stored baseline's): lost, kept, regained.

Donations are matched by `UnusedDonation.identity` (program and argument path) and counted
per identity, as collectives are (`gate.results.collective_changes`). A donation the head
leaves unused where the other side reused it is **lost**: a parameter's output changed dtype
or sharding, XLA can no longer alias it, and the step holds both buffers. That is what the
default ``donation: fail_new`` fails. One unused on both sides is **kept**: most often a
library's idiom (equinox's ``filter_jit(donate="all")`` donates the batch too, which no
output can reuse), reported and never failing under ``fail_new``. One the other side left
unused that the head now reuses is **regained**. One the other side donated and reused
that the head does not donate at all is **dropped** (a ``donate_argnums`` lost in a
refactor): the step holds both buffers as surely as with a lost one, so ``fail_new`` fails it
too. Read from the compiled programs and JAX's lowering, never measured: every difference is
real.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gate.policy.model import DonationRule
from gate.results.donations import ReusedDonation, UnusedDonation
from gate.text import accepted_text


@dataclass(frozen=True)
class DonationComparison:
    """The head's unused donations against the other side's, judged by ``donation:``."""

    against: str  # "base" or "baseline"
    rule: DonationRule
    # The head's donations the other side reused: failing under ``fail_new``, warnings under
    # ``warn`` (under ``fail`` the region's own verdict already fails each unused donation).
    lost: tuple[UnusedDonation, ...] = ()
    kept: tuple[UnusedDonation, ...] = ()  # the head's, unused on the other side too
    regained: tuple[UnusedDonation, ...] = ()  # the other side's, which the head reuses now
    # The other side's reused donations the head no longer donates at all: judged as ``lost``.
    dropped: tuple[ReusedDonation, ...] = ()
    compared: bool = True  # False: a side's donations could not be read; ``note`` says why
    note: str = ""
    # Where the head's policy accepts the lost donations, and why (`gate.compare.acceptance`).
    accepted: str = ""

    @property
    def unchecked(self) -> str | None:
        """Why ``donation: fail_new`` could not be judged: a side without an inventory. A
        pass would claim that no donation was lost, which nobody saw, so it fails."""
        if self.compared or self.rule is not DonationRule.FAIL_NEW:
            return None
        return self.note

    @property
    def failing(self) -> bool:
        if self.accepted:
            return False
        return (
            self.unchecked is not None or any(d.failing for d in self.lost) or self.dropped_failing
        )

    @property
    def dropped_failing(self) -> bool:
        """A dropped donation fails under ``fail_new`` as a lost one does, and under ``fail``
        (a donation that stopped is worse than one unused), unless accepted."""
        failing = self.rule in (DonationRule.FAIL_NEW, DonationRule.FAIL)
        return bool(self.dropped) and failing and not self.accepted

    @property
    def shown(self) -> bool:
        """Worth a line under the region's row: something changed, or nothing could be compared."""
        return bool(self.lost or self.regained or self.dropped) or not self.compared

    def lost_as(self, donation: UnusedDonation) -> UnusedDonation | None:
        """``donation`` (one of the head's) as this comparison judged it, if it is lost here."""
        return next((d for d in self.lost if d.identity() == donation.identity()), None)

    def headline(self) -> str:
        """``1 lost: jit(step): 'params['w']' float32[64,128] (base: reused); 2 unused in both``,
        and where the head's policy accepts it."""
        return self._headline() + accepted_text(self.accepted)

    def _headline(self) -> str:
        if not self.compared:
            verb = "not checked" if self.unchecked is not None else "not compared"
            lead = f"donations {verb} against the {self.against}: {self.note}"
            return lead + (", so donation: fail_new cannot hold" if self.unchecked else "")
        parts = []
        if self.lost:
            named = ", ".join(_named(d) for d in self.lost[:3])
            more = f" and {len(self.lost) - 3} more" if len(self.lost) > 3 else ""
            parts.append(f"{len(self.lost)} lost: {named}{more} ({self.against}: reused)")
        if self.dropped:
            named = ", ".join(f"{d.function}: '{d.argument}' {d.aval}" for d in self.dropped[:3])
            more = f" and {len(self.dropped) - 3} more" if len(self.dropped) > 3 else ""
            parts.append(
                f"{len(self.dropped)} no longer donated: {named}{more} ({self.against}: reused)"
            )
        if self.regained:
            named = ", ".join(_named(d) for d in self.regained[:3])
            parts.append(f"{len(self.regained)} reused now: {named} ({self.against}: unused)")
        if self.kept:
            parts.append(f"{len(self.kept)} unused in both")
        return "; ".join(parts) or f"no donation lost against the {self.against}"


def _named(donation: UnusedDonation) -> str:
    what = f"'{donation.argument}' " if donation.argument else ""
    where = f"{donation.function}: " if donation.function else ""
    return f"{where}{what}{donation.aval}"


def compare_donations(
    base: Sequence[UnusedDonation] | None,
    head: Sequence[UnusedDonation] | None,
    rule: DonationRule,
    *,
    against: str = "base",
    missing: str = "",
    base_reused: Sequence[ReusedDonation] | None = None,
    head_reused: Sequence[ReusedDonation] | None = None,
) -> DonationComparison | None:
    """Each of the head's unused donations, lost or kept against ``base``, and the donations
    ``base`` reused that the head no longer makes (``base_reused`` against the head's unused
    and ``head_reused``); None under ``allow``.

    None for a side means its donations could not be read; ``missing`` says why when that
    side has no cost run at all. A head without unused donations needs no other side:
    nothing of it can be lost. A side whose reused donations were not read (a stored baseline
    from before the gate kept them) drops none.
    """
    if rule is DonationRule.ALLOW:
        return None
    dropped = _dropped(base_reused, head, head_reused)
    if head is not None and not head:
        return DonationComparison(against, rule, regained=tuple(base or ()), dropped=dropped)
    if base is None or head is None:
        side = against if base is None else "head"
        why = missing or "its compiled programs were not read"
        return DonationComparison(against, rule, compared=False, note=f"{side}: {why}")
    left = Counter(d.identity() for d in base)
    lost, kept = [], []
    for donation in head:
        if left[donation.identity()] > 0:
            left[donation.identity()] -= 1
            kept.append(donation)
            continue
        lost.append(
            replace(
                donation,
                failing=rule is DonationRule.FAIL_NEW,
                warning=rule is DonationRule.WARN,
            )
        )
    regained = []
    for donation in base:
        if left[donation.identity()] > 0:
            left[donation.identity()] -= 1
            regained.append(donation)
    return DonationComparison(
        against, rule, tuple(lost), tuple(kept), tuple(regained), dropped=dropped
    )


def _dropped(
    base_reused: Sequence[ReusedDonation] | None,
    head: Sequence[UnusedDonation] | None,
    head_reused: Sequence[ReusedDonation] | None,
) -> tuple[ReusedDonation, ...]:
    """The other side's reused donations that the head does not donate, reused or not.

    Matched by identity, counted (two reused of one identity, one donated now: one dropped);
    what is left of the other side then by aval against what is left of the head's, in any
    program: a jitted function or an argument renamed in the change is the same donation,
    and a donation swapped for another of the same size keeps the step's memory as it was.
    """
    if base_reused is None or head is None or head_reused is None:
        return ()
    donated: list[UnusedDonation | ReusedDonation] = [*head, *head_reused]
    unclaimed = Counter(d.identity() for d in donated)
    left = []
    for donation in base_reused:
        if unclaimed[donation.identity()] > 0:
            unclaimed[donation.identity()] -= 1
        else:
            left.append(donation)
    avals: Counter[str] = Counter()
    for other in donated:
        if unclaimed[other.identity()] > 0:
            unclaimed[other.identity()] -= 1
            avals[other.aval] += 1
    dropped = []
    for donation in left:
        if avals[donation.aval] > 0:
            avals[donation.aval] -= 1
        else:
            dropped.append(donation)
    return tuple(dropped)
