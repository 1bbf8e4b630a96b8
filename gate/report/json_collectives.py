"""The JSON report's collectives, their comparisons and the unused donations: every figure.

Documented in docs/reports.md ("Collectives and donations"). Fields are only added, as the
rest of the report's version 1.
"""

from __future__ import annotations

from typing import Any

from gate.results.collective_changes import CollectiveChange, CommComparison
from gate.results.collectives import (
    Collective,
    CollectiveGroup,
    Communication,
    collective_fields,
)
from gate.results.donation_changes import DonationComparison
from gate.results.donations import UnusedDonation


def collective_document(c: Collective) -> dict[str, Any]:
    # The baseline's fields, with the report's names that say per what each figure counts.
    fields = collective_fields(c)
    del fields["bytes"], fields["runs"]
    return {
        **fields,
        "bytes_per_device": c.bytes,
        "runs_per_step": c.runs,
        "bytes_per_step_per_device": c.bytes_per_step,
        "uncounted": c.uncounted or None,
    }


def communication_document(comm: Communication | None) -> dict[str, Any] | None:
    """The step's collectives and their totals per step; None where the cost run did not read."""
    if comm is None:
        return None
    return {
        "measured": comm.measured,
        "note": comm.note,
        "bytes_per_step_per_device": comm.bytes_per_step if comm.measured else None,
        "by_kind": [
            {"kind": kind, "runs_per_step": runs, "bytes_per_step_per_device": size}
            for kind, runs, size in comm.by_kind()
        ],
        "collectives": [collective_document(c) for c in comm.collectives],
    }


def _group(group: CollectiveGroup | None) -> dict[str, Any] | None:
    if group is None:
        return None
    return {
        "count": group.count,
        "runs_per_step": group.runs,
        "bytes_per_step_per_device": group.bytes_per_step,
        "buffers": list(group.buffers),
        "collective": collective_document(group.sample),
    }


def _change(change: CollectiveChange) -> dict[str, Any]:
    return {
        "change": change.change,
        "failing": change.failing,
        "warning": change.warning,
        "text": change.text(),
        "path": change.location.path if change.location else None,
        "line": change.location.line if change.location else None,
        "base": _group(change.base),
        "head": _group(change.head),
    }


def comm_comparison_document(comm: CommComparison | None) -> dict[str, Any] | None:
    """Every collective that is new, grew, shrank or went away, and the bytes per step."""
    if comm is None:
        return None
    return {
        "against": comm.against,
        "rule": comm.rule.value,
        "compared": comm.compared,
        "note": comm.note,
        "unchecked": comm.unchecked,
        "failing": comm.failing,
        "max_increase": comm.max_increase,
        "base_bytes_per_step_per_device": comm.base_bytes,
        "head_bytes_per_step_per_device": comm.head_bytes,
        "bytes_failing": comm.bytes_failing,
        "headline": comm.headline(),
        "changes": [_change(c) for c in comm.changes],
        "donations": donation_comparison_document(comm.donations),
    }


def donation_comparison_document(donations: DonationComparison | None) -> dict[str, Any] | None:
    """The head's unused donations against the other side's: lost, kept, reused now."""
    if donations is None:
        return None
    return {
        "against": donations.against,
        "rule": donations.rule.value,
        "compared": donations.compared,
        "note": donations.note,
        "unchecked": donations.unchecked,
        "failing": donations.failing,
        "headline": donations.headline(),
        "lost": donations_document(donations.lost),
        "kept": donations_document(donations.kept),
        "regained": donations_document(donations.regained),
    }


def donations_document(donations: tuple[UnusedDonation, ...]) -> list[dict[str, Any]]:
    return [
        {
            "function": d.function or None,
            "argument": d.argument,
            "aval": d.aval,
            "per_device": d.per_device,
            "seen_by": d.seen_by,
            "failing": d.failing,
            "warning": d.warning,
            "text": d.text(),
        }
        for d in donations
    ]
