"""The JSON report's transfers and recompiles: where each array moved, why, and its fix.

Documented in docs/reports.md ("JSON report"). Fields are only added, as the rest of the
report's version 1. Records of the report's schema (`gate.report.json_report`).
"""

from __future__ import annotations

from typing import Literal

from gate.documents import Record
from gate.results.cause import cause_of
from gate.results.findings import Finding
from gate.results.hints import hint_for
from gate.results.placement import Placement


class PlacementDoc(Record, frozen=True, kw_only=True):
    """Where an array went (or lay) over a mesh."""

    spec: str
    mesh: str | None
    devices: int | None
    ways: int
    replicated: bool
    words: str

    @classmethod
    def of(cls, placement: Placement | None) -> PlacementDoc | None:
        """None on one device."""
        if placement is None:
            return None
        return cls(
            spec=placement.spec,
            mesh=placement.mesh,
            devices=placement.devices,
            ways=placement.ways,
            replicated=placement.replicated,
            words=placement.words(),
        )


class FindingDoc(Record, frozen=True, kw_only=True):
    direction: Literal["host-to-device", "device-to-host", "device-to-device"]
    kind: Literal["implicit", "explicit"]
    failing: bool
    # A transfer the base also has is accepted too, but not by the baseline file.
    accepted_by_baseline: bool
    in_base: bool
    # ``run --base``: what the change did to its line ("changed line", "new line", "moved
    # from a.py:3", "unchanged line; the change at a.py:9 caused it"); "" without a base.
    line_change: str
    dtype: str | None
    shape: tuple[int, ...] | None
    # What reaches the devices per occurrence: on a mesh, a replicated destination
    # receives a copy per device; "array_bytes" is the array's own size.
    bytes: int | None
    array_bytes: int | None
    destination: PlacementDoc | None
    fetched_from: PlacementDoc | None
    undescribed: bool
    argument: str | None
    jitted_call: str | None
    host_use: str | None
    cause: str
    fix: str
    path: str | None
    line: int | None
    function: str | None
    source: str | None
    boundary: str | None
    thread: str | None
    first_call: int
    per_step: int
    # An uncommitted array's device-to-device copy happens every step, but JAX
    # checks it on the first call only: per_step is then 0 though it moves each step.
    every_step: bool
    seen_by: str
    fingerprint: str

    @classmethod
    def of(cls, finding: Finding, fingerprint: str) -> FindingDoc:
        where = finding.location
        sample = finding.sample_with_shape()
        return cls(
            direction=finding.direction.label,  # type: ignore[arg-type]  # a Direction's label
            kind="explicit" if finding.explicit else "implicit",
            failing=finding.failing,
            accepted_by_baseline=finding.sample.accepted and not finding.sample.in_base,
            in_base=finding.sample.in_base,
            line_change=finding.sample.line_change,
            dtype=finding.dtype,
            shape=finding.shape,
            bytes=sample.landed_bytes,
            array_bytes=sample.nbytes,
            destination=PlacementDoc.of(finding.destination),
            fetched_from=PlacementDoc.of(sample.fetched_from),
            undescribed=finding.undescribed,
            argument=finding.argument,
            jitted_call=sample.jitted_call,
            host_use=sample.host_use,
            cause=cause_of(sample).name.lower(),
            fix=hint_for(sample),
            path=where.path if where else None,
            line=where.line if where else None,
            function=where.function if where else None,
            source=finding.source,
            boundary=finding.boundary,
            thread=finding.thread,
            first_call=finding.first_call,
            per_step=finding.per_step,
            every_step=finding.every_step,
            seen_by=sample.message,
            fingerprint=fingerprint,
        )


class RecompileDoc(Record, frozen=True, kw_only=True):
    function: str
    failing: bool
    count: int
    runs: int
    change: str | None
    path: str | None
    line: int | None
    caller: str | None
    source: str | None
    # In the first call and warm-up: ``count`` programs where the base compiled
    # ``base_count`` (null without a counterpart in the base: it compiled again at the same
    # shapes). After warm-up, under ``run --base``: the base's compilations at its
    # counterpart (null: the base has none).
    startup: bool = False
    base_count: int | None = None
    # ``run --base``: the base compiles it again too, at least as often (after warm-up), so it
    # passes; and what the change did to its line ("" without a base), as a transfer's
    # ``line_change``.
    in_base: bool = False
    line_change: str = ""
