"""The JSON report: the full transfer map per region, for tools (and people with jq).

Format ``jax-transfer-gate.report``, version 1, documented in docs/reports.md
("JSON report"). Fields are only ever added within a version; renaming or
removing one bumps the version. One entry per finding: per array moved at a
line (`gate.results.findings`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.files import write_text_atomically
from gate.package import __version__
from gate.report.json_collectives import (
    comm_comparison_document,
    communication_document,
    donations_document,
)
from gate.results.cause import cause_of
from gate.results.comparison import BaseComparison, ResultStatus, TimingComparison
from gate.results.costs import CostComparison, StepCost
from gate.results.findings import Finding, group
from gate.results.hints import hint_for
from gate.results.placement import Placement
from gate.results.records import RegionResult, RunResult

FORMAT = "jax-transfer-gate.report"
VERSION = 1


def _status(region: RegionResult) -> str:
    if region.error is not None:
        return "error"
    return "passed" if region.passed else "failed"


def _finding(finding: Finding, fingerprint: str) -> dict[str, Any]:
    where = finding.location
    sample = finding.sample_with_shape()
    return {
        "direction": finding.direction.label,
        "kind": finding.kind,
        "failing": finding.failing,
        # A transfer the base also has is accepted too, but not by the baseline file.
        "accepted_by_baseline": finding.sample.accepted and not finding.sample.in_base,
        "in_base": finding.sample.in_base,
        "dtype": finding.dtype,
        "shape": list(finding.shape) if finding.shape is not None else None,
        # What reaches the devices per occurrence: on a mesh, a replicated destination
        # receives a copy per device; "array_bytes" is the array's own size.
        "bytes": sample.landed_bytes,
        "array_bytes": sample.nbytes,
        "destination": _placement(finding.destination),
        "fetched_from": _placement(sample.fetched_from),
        "undescribed": finding.undescribed,
        "argument": finding.argument,
        "jitted_call": sample.jitted_call,
        "host_use": sample.host_use,
        "cause": cause_of(sample).name.lower(),
        "fix": hint_for(sample),
        "path": where.path if where else None,
        "line": where.line if where else None,
        "function": where.function if where else None,
        "source": finding.source,
        "boundary": finding.boundary,
        "thread": finding.thread,
        "first_call": finding.first_call,
        "per_step": finding.per_step,
        # An uncommitted array's device-to-device copy happens every step, but JAX
        # checks it on the first call only: per_step is then 0 though it moves each step.
        "every_step": finding.every_step,
        "seen_by": sample.message,
        "fingerprint": fingerprint,
    }


def _placement(placement: Placement | None) -> dict[str, Any] | None:
    """Where an array went (or lay) over a mesh; None on one device."""
    if placement is None:
        return None
    return {
        "spec": placement.spec,
        "mesh": placement.mesh,
        "devices": placement.devices,
        "ways": placement.ways,
        "replicated": placement.replicated,
        "words": placement.words(),
    }


# Each region's findings with their baseline fingerprints, by the region's classname
# (`gate.results.baseline.fingerprints_of`): the caller computes them, the report prints them.
Fingerprints = Mapping[str, Mapping[Finding, str]]


def _recompiles(region: RegionResult) -> dict[str, Any]:
    """Only for a region that compiled after warm-up: clean regions' documents stay as they were."""
    if not region.recompiles:
        return {}
    return {
        "recompiles": [
            {
                "function": r.function,
                "failing": r.failing,
                "count": r.count,
                "runs": r.runs,
                "change": r.change,
                "path": r.location.path if r.location else None,
                "line": r.location.line if r.location else None,
                "caller": r.location.function if r.location else None,
                "source": r.source,
            }
            for r in region.recompiles
        ]
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def timing_document(timing: TimingComparison | None) -> dict[str, Any] | None:
    """Every raw sample of both sides, and what the gate concluded from them."""
    if timing is None:
        return None
    return {
        "against": timing.against,
        "what": timing.what,
        "verdict": timing.verdict.value,
        "failing": timing.failing,
        "headline": timing.headline(),
        "base_median_s": timing.base_median_s,
        "head_median_s": timing.head_median_s,
        "ratio": timing.ratio,
        # Small samples give an unbounded interval (0, inf): null, since JSON has no infinity.
        "ratio_low": _finite(timing.ratio_low),
        "ratio_high": _finite(timing.ratio_high),
        "p_value": timing.p_value,
        "max_slowdown": timing.max_slowdown,
        # True: paired rounds in one worker (their ratios judged); false: two samples measured
        # apart (the stored baseline, or trees that ran apart), compared unpaired.
        "paired": timing.paired,
        "rounds": timing.rounds,
        "base_samples": list(timing.base_samples),
        "head_samples": list(timing.head_samples),
    }


def base_document(base: BaseComparison | None) -> dict[str, Any] | None:
    """The region against ``run --base``'s tree; None without --base."""
    if base is None:
        return None
    results = base.results
    error = base.base_error
    return {
        "ref": base.base,
        "status": base.status.name.lower(),
        "failing": base.failing,
        "timing": timing_document(base.timing),
        "results": None
        if results is None
        else {
            "status": str(results.status),
            # Derived from "status", kept for the tools that read version 1 before it.
            "compared": results.status is not ResultStatus.NOT_COMPARED,
            "passed": not results.failing,
            "detail": results.detail,
            "differences": [{"path": d.path, "detail": d.detail} for d in results.differences],
        },
        "boundaries": [
            {
                "name": b.name,
                "base_per_step_s": b.base_per_step_s,
                "head_per_step_s": b.head_per_step_s,
            }
            for b in base.boundaries
        ],
        "boundary_timing": [timing_document(t) for t in base.boundary_timing],
        "error": None
        if error is None
        else {
            "kind": error.kind.name.lower(),
            "message": error.message,
            "path": error.location.path if error.location else None,
            "line": error.location.line if error.location else None,
            "details": error.details,
        },
        "already_in_base": base.already_in_base,
        # The callables the base ran from its own policy, the head's having been renamed.
        "renamed": [{"role": r.role, "base": r.base, "head": r.head} for r in base.renamed],
        # Why the trees ran in workers of their own, timed unpaired; "" when one held both.
        "apart": base.apart,
        "cost": cost_comparison_document(base.cost),
        "collectives": comm_comparison_document(base.comm),
        "first_call_s": {"base": base.base_first_call_s, "head": base.head_first_call_s},
    }


def cost_document(cost: StepCost | None) -> dict[str, Any] | None:
    """XLA's figures for the step (`gate.results.costs`); None for a region that never got there."""
    if cost is None:
        return None
    return {
        "measured": cost.measured,
        "note": cost.note,
        "totals": dict(cost.totals),
        "functions": [
            {"name": f.name, "runs": f.runs, "programs": f.programs, **dict(f.figures)}
            | ({"unknown": f.unknown} if f.unknown else {})
            for f in cost.functions
        ],
        "peak_memory": None
        if cost.peak_memory is None
        else [
            {
                "device": p.device,
                "peak_bytes": p.peak_bytes,
                "peak_before_bytes": p.peak_before_bytes,
                "in_use_before_bytes": p.in_use_before_bytes,
                "set_by_step": p.set_by_step,
            }
            for p in cost.peak_memory
        ],
        # The programs' collectives (`gate.report.json_collectives`); null when not read.
        "communication": communication_document(cost.comm),
    }


def cost_comparison_document(cost: CostComparison | None) -> dict[str, Any] | None:
    """Every figure that changed against the base (``function: null``: the step's total)."""
    if cost is None:
        return None
    return {
        "against": cost.against,
        "compared": cost.compared,
        "note": cost.note,
        # Why cost.max_increase could not bound the totals (then "failing" is true); else null.
        "unchecked": cost.unchecked,
        "failing": cost.failing,
        "max_increase": cost.max_increase,
        "headline": cost.headline(),
        "changes": [
            {
                "function": c.function,
                "metric": c.metric,
                "base": c.base,
                "head": c.head,
                "ratio": c.ratio,
                "failing": c.failing,
            }
            for c in cost.changes
        ],
    }


def region_document(region: RegionResult, prints: Mapping[Finding, str]) -> dict[str, Any]:
    findings = group(region.transfers)
    timing = region.timing
    return {
        "name": region.name,
        "classname": region.classname,
        "policy": region.policy_path,
        "policy_line": region.policy_line,
        "status": _status(region),
        "guard": {
            "host_to_device": region.guard.host_to_device.value,
            "device_to_host": region.guard.device_to_host.value,
            "device_to_device": region.guard.device_to_device.value,
        },
        "transfers": [_finding(f, prints[f]) for f in findings],
        **_recompiles(region),
        "timing": None
        if timing is None
        else {
            "repeats": timing.repeats,
            "min_s": timing.min_s,
            "p25_s": timing.p25_s,
            "median_s": timing.median_s,
            "p75_s": timing.p75_s,
            "max_s": timing.max_s,
        },
        "timing_samples": list(region.timing_samples),
        "first_call_s": region.first_call_s,
        "boundaries": [
            {"name": b.name, "calls": b.calls, "total_s": b.total_s, "per_step_s": b.per_step_s}
            for b in region.boundaries
        ],
        "cost": cost_document(region.cost),
        "base": base_document(region.base),
        "timing_vs_baseline": timing_document(region.timing_vs_baseline),
        "cost_vs_baseline": cost_comparison_document(region.cost_vs_baseline),
        "collectives_vs_baseline": comm_comparison_document(region.comm_vs_baseline),
        "donations": donations_document(region.donations),
        "checks": [
            {"name": c.name.value, "passed": c.passed, "detail": c.detail} for c in region.checks
        ],
        "error": None
        if region.error is None
        else {
            "kind": region.error.kind.name.lower(),
            "message": region.error.message,
            "path": region.error.location.path if region.error.location else None,
            "line": region.error.location.line if region.error.location else None,
            "details": region.error.details,
        },
        "notes": list(region.notes),
        "fixed_since_baseline": list(region.fixed),
        "wall_s": region.wall_s,
    }


def render_json(run: RunResult, fingerprints: Fingerprints) -> str:
    document = {
        "format": FORMAT,
        "version": VERSION,
        "gate_version": __version__,
        "passed": run.passed,
        "suites": [
            {
                "name": suite.name,
                "policy": suite.policy_path,
                "regions": [region_document(r, fingerprints[r.classname]) for r in suite.regions],
            }
            for suite in run.suites
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_json(run: RunResult, path: Path, fingerprints: Fingerprints) -> None:
    """Write the JSON report atomically (a half-written report must never be read)."""
    text = render_json(run, fingerprints)
    write_text_atomically(path, text)
