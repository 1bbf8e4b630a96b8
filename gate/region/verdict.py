"""Judging a region: which transfers fail under its levels, what judged each
direction, what a reader must be told, and when a pass would claim too much."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gate.machine.diagnosis import PlatformInfo, direction_coverage
from gate.policy.levels import Direction, GuardSpec
from gate.region.callables import RegionCode
from gate.region.sightings import Sighting
from gate.results.records import (
    CoverageJudge,
    ErrorKind,
    Phase,
    RegionError,
    Site,
    Transfer,
)

Coverage = tuple[tuple[str, CoverageJudge], ...]


def fails(guard: GuardSpec, direction: Direction, explicit: bool, boundary: str | None) -> bool:
    """Whether the region's levels refuse such a transfer (a boundary loosens explicit ones)."""
    level = guard.level(direction)
    if boundary is not None:
        level = level.inside_boundary
    return level.fails_explicit if explicit else level.fails_implicit


def site_transfer(
    code: RegionCode, key: Site, sighting: Sighting, phase: Phase, count: int
) -> Transfer:
    """The record of one site, judged by the region's levels."""
    return Transfer(
        direction=key.direction,
        explicit=key.explicit,
        dtype=key.dtype,
        shape=key.shape,
        location=key.location,
        phase=phase,
        failing=fails(code.region.guard, key.direction, key.explicit, key.boundary),
        message=sighting.seen_by,
        boundary=key.boundary,
        count=count,
        source=code.source_line(key.location),
        thread=key.thread,
        argument=sighting.argument,
        jitted_call=sighting.jitted_call,
        host_use=sighting.host_use,
        undescribed=sighting.undescribed,
        destination=key.destination,
        fetched_from=sighting.fetched_from,
    )


@dataclass
class Verdict:
    """The region's verdict as it forms: every transfer record, and what a reader must know."""

    transfers: list[Transfer] = field(default_factory=list)
    disagreements: set[str] = field(default_factory=set)  # between the guard and the detector
    warnings: dict[str, None] = field(default_factory=dict)  # ordered set of notes

    def warn(self, note: str) -> None:
        self.warnings[note] = None

    @property
    def any_failing(self) -> bool:
        return any(t.failing for t in self.transfers)

    def add_refusal(self, found: Transfer) -> None:
        """JAX's refusal of a transfer, unless one at its line in its phase is already failing.

        A refusal knows no thread: one raised in a pool's thread reaches the step through
        ``future.result()``, and the map's finding in that thread at that line is the same.
        """
        place = found.site.place

        def same(known: Transfer) -> bool:
            seen = known.site.place
            return seen == place or (found.thread is None and replace(seen, thread=None) == place)

        if not any(
            known.failing and known.phase is found.phase and same(known) for known in self.transfers
        ):
            self.transfers.append(found)


@dataclass(frozen=True)
class Witnessing:
    """What could watch this region, for the coverage and the notes."""

    platform: PlatformInfo | None
    can_map: bool  # the guard's log reached the gate: there is a transfer map
    detector_missing: str | None  # why the device-to-host detector could not run
    callbacks_missing: str | None  # why host callbacks were not counted

    @property
    def where(self) -> str:
        return self.platform.describe() if self.platform else "this platform"


def coverage(witnessing: Witnessing) -> Coverage:
    """Per direction, what judged it: JAX's guard, the gate's detector, or nothing."""
    assert witnessing.platform is not None
    # The detector watches the mapped runs only; without a map it did not run.
    active = witnessing.can_map and witnessing.detector_missing is None
    found = direction_coverage(witnessing.platform, detector_active=active)
    return tuple((direction.label, judge) for direction, judge in found.items())


def notes(verdict: Verdict, witnessing: Witnessing) -> tuple[str, ...]:
    """What a reader must know to trust the region's verdict."""
    found = []
    if not witnessing.can_map:
        found.append(
            "JAX's transfer-guard log did not reach the gate (TF_CPP_MIN_LOG_LEVEL read before "
            "the gate could set it, or jax_logging_level / JAX_LOGGING_LEVEL raised above "
            "WARNING and not resettable here), so there is no transfer map: the region "
            "was judged with the guard in disallow mode, which shows only the first transfer "
            "of each run."
        )
    if witnessing.detector_missing is not None:
        found.append(f"device-to-host detector unavailable: {witnessing.detector_missing}")
    if witnessing.callbacks_missing is not None:
        found.append(f"host callbacks not counted: {witnessing.callbacks_missing}")
    for direction, judge in coverage(witnessing):
        if judge is CoverageJudge.NOT_CHECKED:
            found.append(
                f"{direction} transfers were NOT checked on {witnessing.where}: "
                "this region's pass says nothing about them"
            )
    found.extend(sorted(verdict.disagreements))
    found.extend(verdict.warnings)
    return tuple(found)


def unchecked(guard: GuardSpec, witnessing: Witnessing, judged: Coverage) -> RegionError | None:
    """An error when the policy disallows a direction that nothing could check.

    A pass would claim what nobody saw. The fix is the user's choice: a
    platform where it can be checked, or a policy that says it may go unchecked.
    """
    blind = [
        label
        for label, judge in judged
        if judge is CoverageJudge.NOT_CHECKED
        and guard.level(Direction.from_label(label)).fails_implicit
    ]
    if not blind:
        return None
    why = witnessing.detector_missing or "the guard's log did not reach the gate (no transfer map)"
    keys = ", ".join(f"{label.replace('-', '_')}: allow" for label in blind)
    message = (
        f"{', '.join(blind)} transfers could not be checked on {witnessing.where} ({why}), and "
        f"the policy disallows them; run where they can be checked, or accept the gap with "
        f"`guard: {{{keys}}}`"
    )
    return RegionError(ErrorKind.UNCHECKED, message, message)
