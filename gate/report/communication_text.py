"""How a region's collectives and donations read, in every report.

The terminal, the JUnit report and GitHub take their words from here, so
``model.py:42: new all-gather f32[64,128] over 'data', 32.8 kB/step/device (base: none)``
is the same line in each. A new collective is reported at its own source line (that is
where the spec that made it is); what belongs to no line (the step's bytes beyond
``cost.max_increase``, a check that could not be made, an unused donation) at the
region's policy line. An unused donation is always listed: failing (``donation: fail``, or
lost against the base under ``fail_new``), a warning (``warn``), or a note (``fail_new``,
where nothing says it ever worked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gate.policy.model import ChangeKind, DonationRule
from gate.results.collective_changes import NEW, CollectiveChange, CommComparison
from gate.results.constants import EmbeddedConstant
from gate.results.donation_changes import DonationComparison
from gate.results.donations import DONATION_FIX, DROPPED_FIX, UnusedDonation
from gate.results.records import RegionResult
from gate.user_code import SourceLocation

COLLECTIVE_FIX = (
    "a collective the base does not run comes from a sharding that changed: check the "
    "PartitionSpecs (in_shardings, out_shardings, with_sharding_constraint, the arrays' "
    "own) of the arrays at that line; if it is meant, accept it with `collectives: warn` "
    "or record it with `transfer-gate baseline`"
)


EXPLICIT_COLLECTIVE_FIX = (
    "this collective is written in the code at that line (lax.psum, pmean, all_gather, "
    "ppermute, ...), not made by a sharding: if the step is meant to run it (gradients or "
    "batch statistics averaged over devices), accept it with `collectives: warn` or record "
    "it with `transfer-gate baseline`; otherwise remove it, or run it once per step rather "
    "than per call or per loop iteration"
)
# The primitives a user writes (pmean lowers to psum), as the last part of JAX's op name or
# as a call in the line's text.
_EXPLICIT = re.compile(
    r"(?:^|[/.\s(])(psum|pmean|pmax|pmin|all_gather|ppermute|psum_scatter|reduce_scatter|"
    r"all_to_all|pshuffle|pswapaxes)(?:\s*\(|$|\[)"
)


def collective_fix(change: CollectiveChange) -> str:
    """The fix for a new collective: the explicit one's (written at its line), else the
    sharding's (`COLLECTIVE_FIX`)."""
    side = change.head if change.head is not None else change.base
    if side is not None:
        sample = side.sample
        texts = (sample.op_name.rsplit("/", 1)[-1], sample.source or "")
        if any(_EXPLICIT.search(text) for text in texts):
            return EXPLICIT_COLLECTIVE_FIX
    return COLLECTIVE_FIX


def accept_edit(region: RegionResult, kind: ChangeKind, against: str) -> str:
    """``; to accept it, add `accept: {cost: …}` to region …``: what a failing comparison with
    the base ends with (`BaseComparison.accept_edit`); "" against a stored baseline, which
    `transfer-gate baseline` re-records instead."""
    if against != "base" or region.base is None:
        return ""
    return region.base.accept_edit(kind)


def comm_comparisons(region: RegionResult) -> list[CommComparison]:
    """The region's collective comparisons: against the base, then the stored baseline."""
    found = [region.base.comm] if region.base is not None and region.base.comm else []
    return found + ([region.comm_vs_baseline] if region.comm_vs_baseline is not None else [])


def donation_comparisons(region: RegionResult) -> list[DonationComparison]:
    """The region's donation comparisons, in the same order (none under ``donation: allow``)."""
    return [c.donations for c in comm_comparisons(region) if c.donations is not None]


def comm_label(comm: CommComparison) -> str:
    return f"collectives vs {comm.against}"


def donation_label(donations: DonationComparison) -> str:
    return f"donations vs {donations.against}"


def shown(comm: CommComparison) -> bool:
    """Listed under the region's row: something changed, or could not be compared."""
    return bool(comm.changes) or not comm.compared or comm.bytes_line() != ""


@dataclass(frozen=True)
class CommFinding:
    """One line a reader acts on: a new collective, bytes beyond the bound, an unused donation."""

    # "new collective", "collectives" (a comparison's bytes or gap), "unused donation",
    # "donations" (a donation comparison that could not be made)
    what: str
    location: SourceLocation | None  # the collective's line; None: the region's policy line
    text: str  # without the place
    failing: bool
    source: str | None = None  # the line's text
    fix: str = ""  # failing ones and warnings; a note has none

    def line(self, policy: str) -> str:
        where = str(self.location) if self.location is not None else policy
        return f"{where}: {self.text}"


def comm_findings(region: RegionResult) -> list[CommFinding]:
    """What to act on in the region's collectives and donations, failing ones first."""
    found = []
    for comm in comm_comparisons(region):
        if comm.unchecked is not None or comm.bytes_failing:
            text = f"{comm_label(comm)}: {comm.headline()}"
            found.append(CommFinding("collectives", None, text, True))
        edit = accept_edit(region, ChangeKind.COLLECTIVES, comm.against)
        found.extend(_change(change, edit) for change in comm.changes if change.change == NEW)
    compared = donation_comparisons(region)
    for donations in compared:
        if donations.unchecked is not None:
            text = f"{donation_label(donations)}: {donations.headline()}"
            found.append(CommFinding("donations", None, text, True))
    edit = accept_edit(region, ChangeKind.DONATIONS, "base")
    found.extend(_donation(d, compared, edit) for d in region.donations)
    found.extend(_dropped(c, edit) for c in compared for _ in c.dropped[:1])
    constants = region.cost.constants if region.cost is not None else None
    found.extend(_constant(c) for c in constants or ())
    return sorted(found, key=lambda f: not f.failing)


def _constant(constant: EmbeddedConstant) -> CommFinding:
    """An array compiled into a program: said with its fix; a new one fails in the cost
    comparison (`gate.results.costs.CostComparison.new_constants`), not here."""
    location = SourceLocation(constant.path, constant.line, "") if constant.path else None
    text = f"note: {constant.text().rsplit(' at ', 1)[0]}"  # the place is the line's own
    return CommFinding("embedded constant", location, text, False, constant.source, constant.fix)


def _change(change: CollectiveChange, edit: str) -> CommFinding:
    prefix = "" if change.failing else "warning (collectives: warn): " if change.warning else ""
    return CommFinding(
        "new collective",
        change.location,
        prefix + change.text(),
        change.failing,
        change.source,
        collective_fix(change) + edit if change.failing or change.warning else "",
    )


def _donation(
    donation: UnusedDonation, compared: list[DonationComparison], edit: str
) -> CommFinding:
    """One of the head's unused donations, as its rule and the comparisons judged it."""
    lost = [(c.against, c.lost_as(donation)) for c in compared if c.lost_as(donation)]
    failing = donation.failing or any(d is not None and d.failing for _, d in lost)
    warning = donation.warning or any(d is not None and d.warning for _, d in lost)
    if lost:
        text = donation.text(", ".join(f"{against}: reused" for against, _ in lost))
    elif compared and all(c.compared for c in compared):
        text = donation.text(", ".join(f"{c.against}: unused too" for c in compared))
    else:
        text = donation.text()
    if failing:
        # Lost against the base (not `donation: fail`'s own verdict): the base's edit accepts it.
        fix = DONATION_FIX + (edit if any(against == "base" for against, _ in lost) else "")
        return CommFinding("unused donation", None, text, True, fix=fix)
    if warning:
        text = f"warning (donation: warn): {text}"
        return CommFinding("unused donation", None, text, False, fix=DONATION_FIX)
    # ``fail_new``: nothing says it ever worked (a library donating a batch no output can
    # reuse), so it is said, not failed.
    return CommFinding("unused donation", None, f"note (donation: fail_new): {text}", False)


def _dropped(compared: DonationComparison, edit: str) -> CommFinding:
    """The donations the other side reused that the head no longer makes, as one finding:
    failing under ``fail_new`` (unless accepted), a warning under ``warn``."""
    texts = [d.dropped_text(compared.against) for d in compared.dropped]
    text = texts[0] + (f" (+{len(texts) - 1} more: {'; '.join(texts[1:])})" if texts[1:] else "")
    if compared.dropped_failing:
        fix = DROPPED_FIX + (edit if compared.against == "base" else "")
        return CommFinding("dropped donation", None, text, True, fix=fix)
    if compared.rule is DonationRule.WARN:
        text = f"warning (donation: warn): {text}"
        return CommFinding("dropped donation", None, text, False, fix=DROPPED_FIX)
    return CommFinding("dropped donation", None, f"note: {text}", False)


def acted_on(region: RegionResult) -> list[CommFinding]:
    """The findings a reader must see: failing ones, warnings (new under ``warn``) and the
    unused donations ``fail_new`` notes."""
    return [
        f
        for f in comm_findings(region)
        if f.failing or f.fix or f.what in ("unused donation", "dropped donation")
    ]


def failure_reasons(region: RegionResult) -> list[str]:
    """``new collective``, ``collectives``, ``unused donation``: why the region failed."""
    return list(dict.fromkeys(f.what for f in acted_on(region) if f.failing))


def cost_columns(region: RegionResult) -> list[str]:
    """``603 kFLOP/step``, ``comm 41.5 kB/step``: the step's cost as a row shows it."""
    cost = region.cost
    if cost is None:
        return []
    found = [cost.headline()] if cost.headline() else []
    return found + ([cost.comm.headline()] if cost.comm and cost.comm.headline() else [])


def inventory_lines(region: RegionResult) -> list[str]:
    """Every collective the head's step runs, per step: for a report body."""
    comm = region.cost.comm if region.cost is not None else None
    if comm is None:
        return []
    if not comm.measured:
        return [f"Collectives: not read ({comm.note})"]
    if not comm.collectives:
        return ["Collectives: none"]
    kinds = ", ".join(f"{kind} {runs}x" for kind, runs, _ in comm.by_kind())
    lines = [f"Collectives per step: {kinds}; {comm.headline()} per device"]
    for c in comm.collectives:
        where = f"{c.location}: " if c.location is not None else ""
        runs = f", {c.runs}x per step" if c.runs != 1 else ""
        lines.append(f"- {where}{c.function}: {c.describe()}, {c.bytes} B/device{runs}")
    if comm.note:
        lines.append(f"  ({comm.note})")
    return lines
