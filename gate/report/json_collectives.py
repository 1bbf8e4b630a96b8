"""The JSON report's collectives, their comparisons and the unused donations: every figure.

Documented in docs/reports.md ("Collectives and donations"). Fields are only added, as the
rest of the report's version 1. Records of the report's schema (`gate.report.json_report`).
"""

from __future__ import annotations

from gate.documents import Count, Record
from gate.policy.model import CollectiveRule, DonationRule
from gate.results.collective_changes import CollectiveChange, CommComparison
from gate.results.collectives import Collective, CollectiveGroup, Communication
from gate.results.donation_changes import DonationComparison
from gate.results.donations import ReusedDonation, UnusedDonation


class CollectiveDoc(Record, frozen=True, kw_only=True):
    """One collective: the baseline's fields, with names that say per what each figure counts."""

    kind: str
    function: str
    buffer: str
    axes: tuple[str, ...] | None
    groups: str
    path: str | None
    line: int | None
    caller: str | None
    source: str | None
    op_name: str
    uncounted: str | None
    bytes_per_device: Count
    runs_per_step: Count
    bytes_per_step_per_device: Count

    @classmethod
    def of(cls, c: Collective) -> CollectiveDoc:
        where = c.location
        return cls(
            kind=c.kind,
            function=c.function,
            buffer=c.buffer,
            axes=c.axes,
            groups=c.groups,
            path=where.path if where else None,
            line=where.line if where else None,
            caller=where.function if where else None,
            source=c.source,
            op_name=c.op_name,
            uncounted=c.uncounted or None,
            bytes_per_device=c.bytes,
            runs_per_step=c.runs,
            bytes_per_step_per_device=c.bytes_per_step,
        )


class KindTotal(Record, frozen=True, kw_only=True):
    kind: str
    runs_per_step: Count
    bytes_per_step_per_device: Count


class CommunicationDoc(Record, frozen=True, kw_only=True):
    """The step's collectives and their totals per step."""

    measured: bool
    note: str
    bytes_per_step_per_device: Count | None
    by_kind: tuple[KindTotal, ...]
    collectives: tuple[CollectiveDoc, ...]

    @classmethod
    def of(cls, comm: Communication | None) -> CommunicationDoc | None:
        """None where the cost run did not read them."""
        if comm is None:
            return None
        return cls(
            measured=comm.measured,
            note=comm.note,
            bytes_per_step_per_device=comm.bytes_per_step if comm.measured else None,
            by_kind=tuple(
                KindTotal(kind=k, runs_per_step=runs, bytes_per_step_per_device=size)
                for k, runs, size in comm.by_kind()
            ),
            collectives=tuple(CollectiveDoc.of(c) for c in comm.collectives),
        )


class GroupDoc(Record, frozen=True, kw_only=True):
    count: Count
    runs_per_step: Count
    bytes_per_step_per_device: Count
    buffers: tuple[str, ...]
    collective: CollectiveDoc

    @classmethod
    def of(cls, group: CollectiveGroup | None) -> GroupDoc | None:
        if group is None:
            return None
        return cls(
            count=group.count,
            runs_per_step=group.runs,
            bytes_per_step_per_device=group.bytes_per_step,
            buffers=group.buffers,
            collective=CollectiveDoc.of(group.sample),
        )


class ChangeDoc(Record, frozen=True, kw_only=True):
    change: str
    failing: bool
    warning: bool
    text: str
    path: str | None
    line: int | None
    base: GroupDoc | None
    head: GroupDoc | None

    @classmethod
    def of(cls, change: CollectiveChange) -> ChangeDoc:
        where = change.location
        return cls(
            change=change.change,
            failing=change.failing,
            warning=change.warning,
            text=change.text(),
            path=where.path if where else None,
            line=where.line if where else None,
            base=GroupDoc.of(change.base),
            head=GroupDoc.of(change.head),
        )


class CommComparisonDoc(Record, frozen=True, kw_only=True):
    """Every collective that is new, grew, shrank or went away, and the bytes per step."""

    against: str
    rule: CollectiveRule
    compared: bool
    note: str
    unchecked: str | None
    failing: bool
    max_increase: float | None
    base_bytes_per_step_per_device: int | None
    head_bytes_per_step_per_device: int | None
    bytes_failing: bool
    headline: str
    changes: tuple[ChangeDoc, ...]
    # The unused donations of the same programs, compared (None under `donation: allow`).
    donations: DonationComparisonDoc | None

    @classmethod
    def of(cls, comm: CommComparison | None) -> CommComparisonDoc | None:
        if comm is None:
            return None
        return cls(
            against=comm.against,
            rule=comm.rule,
            compared=comm.compared,
            note=comm.note,
            unchecked=comm.unchecked,
            failing=comm.failing,
            max_increase=comm.max_increase,
            base_bytes_per_step_per_device=comm.base_bytes,
            head_bytes_per_step_per_device=comm.head_bytes,
            bytes_failing=comm.bytes_failing,
            headline=comm.headline(),
            changes=tuple(ChangeDoc.of(c) for c in comm.changes),
            donations=DonationComparisonDoc.of(comm.donations),
        )


class DonationDoc(Record, frozen=True, kw_only=True):
    function: str | None
    argument: str | None
    aval: str
    per_device: bool
    seen_by: str
    failing: bool
    warning: bool
    text: str

    @classmethod
    def of(cls, d: UnusedDonation) -> DonationDoc:
        return cls(
            function=d.function or None,
            argument=d.argument,
            aval=d.aval,
            per_device=d.per_device,
            seen_by=d.seen_by,
            failing=d.failing,
            warning=d.warning,
            text=d.text(),
        )


class DroppedDonationDoc(Record, frozen=True, kw_only=True):
    """A donation the other side's program reused that the head no longer makes."""

    function: str
    argument: str
    aval: str
    per_device: bool
    text: str

    @classmethod
    def of(cls, d: ReusedDonation, against: str) -> DroppedDonationDoc:
        return cls(
            function=d.function,
            argument=d.argument,
            aval=d.aval,
            per_device=d.per_device,
            text=d.dropped_text(against),
        )


class DonationComparisonDoc(Record, frozen=True, kw_only=True):
    """The head's unused donations against the other side's: lost, kept, reused now."""

    against: str
    rule: DonationRule
    compared: bool
    note: str
    unchecked: str | None
    failing: bool
    headline: str
    lost: tuple[DonationDoc, ...]  # the other side reused them
    kept: tuple[DonationDoc, ...]  # unused on both sides
    regained: tuple[DonationDoc, ...]  # the other side's, which the head reuses now
    # The other side's reused donations the head no longer donates at all (each fails under
    # ``fail_new``, as a lost one does).
    dropped: tuple[DroppedDonationDoc, ...] = ()

    @classmethod
    def of(cls, donations: DonationComparison | None) -> DonationComparisonDoc | None:
        if donations is None:
            return None
        return cls(
            against=donations.against,
            rule=donations.rule,
            compared=donations.compared,
            note=donations.note,
            unchecked=donations.unchecked,
            failing=donations.failing,
            headline=donations.headline(),
            lost=tuple(DonationDoc.of(d) for d in donations.lost),
            kept=tuple(DonationDoc.of(d) for d in donations.kept),
            regained=tuple(DonationDoc.of(d) for d in donations.regained),
            dropped=tuple(DroppedDonationDoc.of(d, donations.against) for d in donations.dropped),
        )
