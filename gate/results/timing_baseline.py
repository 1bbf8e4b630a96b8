"""The stored timing baseline: each region's step times as ``transfer-gate baseline`` measured them.

Kept in the baseline file beside the accepted transfers (its ``timing``
mapping, from version 3 on), one entry per region: the median, the quartiles
and every raw sample, and the device they were measured on. A later ``run``
compares its samples with them (`gate.compare.stored_baseline`), but only on
the same device: the fingerprint is the region's `RegionResult.platform`
(backend, device kind and count, jax and jaxlib versions, CUDA where there is
one) and the gate's version, e.g. ``cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2,
transfer-gate 0.1.0``. One string, so a reader sees in the file and in the
note what differed; a timing from another machine, another JAX or another gate
(whose timed loop may have changed) says nothing about this code's speed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.package import __version__
from gate.results.costs import StepCost, cost_from_json, cost_to_json
from gate.results.records import RegionResult, RunResult

NO_TIMING = (
    "timing not compared: the baseline has no timing; run `transfer-gate baseline` to record it"
)
NO_REGION_TIMING = (
    "timing not compared: the baseline has no timing for this region; "
    "run `transfer-gate baseline` to record it"
)


@dataclass(frozen=True)
class StoredTiming:
    """One region's step times in the baseline file."""

    device: str  # `device_fingerprint` of the run that measured them
    median_s: float
    p25_s: float
    p75_s: float
    samples: tuple[float, ...]  # every timed run's step time, in seconds
    # XLA's figures for the step (`gate.results.costs`), compared exactly on the same device.
    cost: StepCost | None = None


def device_fingerprint(region: RegionResult) -> str | None:
    """What the region's times were measured on; None when the region never reached JAX."""
    if not region.platform:
        return None
    return f"{region.platform}, transfer-gate {__version__}"


def mismatch_note(stored: StoredTiming, current: str, what: str = "timing") -> str:
    return f"{what} not compared: baseline from {stored.device} (this run: {current})"


def timing_of(region: RegionResult) -> StoredTiming | None:
    """The entry ``region`` gives the baseline: None without samples or a device."""
    device = device_fingerprint(region)
    if device is None or not region.timing_samples or region.error is not None:
        return None
    samples = tuple(float(s) for s in region.timing_samples)
    p25, median, p75 = (float(q) for q in np.percentile(samples, [25, 50, 75]))
    cost = region.cost if region.cost is not None and region.cost.measured else None
    return StoredTiming(device, median, p25, p75, samples, cost)


def retimed(run: RunResult, existing: Mapping[str, StoredTiming] | None) -> dict[str, StoredTiming]:
    """``run``'s timing for the regions it ran, ``existing``'s for others (like `rebaselined`)."""
    ran = {region.classname for region in run.regions}
    kept = {name: entry for name, entry in (existing or {}).items() if name not in ran}
    for region in run.regions:
        entry = timing_of(region)
        if entry is not None:
            kept[region.classname] = entry
    return dict(sorted(kept.items()))


def timing_document(timing: Mapping[str, StoredTiming]) -> dict[str, dict[str, Any]]:
    """The file's ``timing`` mapping, by region, sorted for stable diffs."""
    return {
        name: {
            "device": entry.device,
            "median_s": entry.median_s,
            "p25_s": entry.p25_s,
            "p75_s": entry.p75_s,
            "samples": list(entry.samples),
            **({"cost": cost_to_json(entry.cost)} if entry.cost is not None else {}),
        }
        for name, entry in sorted(timing.items())
    }


def read_timing(node: object) -> dict[str, StoredTiming]:
    """The file's ``timing`` mapping read back; ValueError (one line, the key) when malformed."""
    if not isinstance(node, dict):
        raise ValueError("'timing' must be a mapping of region to its step times")
    found = {}
    for name, entry in node.items():
        try:
            samples = tuple(float(s) for s in entry["samples"])
            stored = StoredTiming(
                device=str(entry["device"]),
                median_s=float(entry["median_s"]),
                p25_s=float(entry["p25_s"]),
                p75_s=float(entry["p75_s"]),
                samples=samples,
                cost=cost_from_json(entry["cost"]) if "cost" in entry else None,
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"timing of {name!r} is malformed ({exc!r})") from exc
        if not samples or not all(math.isfinite(s) and s >= 0 for s in samples):
            raise ValueError(f"timing of {name!r} needs at least one finite, non-negative sample")
        found[str(name)] = stored
    return found
