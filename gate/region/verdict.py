"""Judging a region: which transfers fail under its levels, what judged each
direction, what a reader must be told, and when a pass would claim too much."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gate.levels import Direction, GuardSpec
from gate.machine.diagnosis import PlatformInfo, direction_coverage
from gate.policy.model import RecompileRule, Region
from gate.region.callables import RegionCode
from gate.region.sightings import Sighting
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import CoverageJudge, Phase, Site, Transfer

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
    """What could watch this region, and what each witness could not see, for the verdict."""

    platform: PlatformInfo | None
    can_map: bool  # the guard's log reached the gate: there is a transfer map
    detector_missing: str | None  # why the device-to-host detector could not run
    callbacks_missing: str | None  # why host callbacks were not counted
    # What the detector cannot see on this interpreter (`FetchLog.blind_spots`).
    detector_blind: tuple[str, ...] = ()
    # Ways to set the guard this JAX put out of the gate's reach (`guard_kept_by_the_gate`):
    # a step loosening the guard that way would turn the map off for its own code, unseen.
    guard_unkept: tuple[str, ...] = ()
    # Why JAX's compile events do not reach the gate (`compile_events_arrive`); None when
    # they do, or when the region does not watch for recompiles.
    compiles_unseen: str | None = None

    @property
    def where(self) -> str:
        return self.platform.describe() if self.platform else "this platform"


@dataclass(frozen=True)
class Gap:
    """One way this region's transfers, or its compilations, could have gone unseen.

    A gap that hides what the region's levels (or ``recompiles: fail``) would fail makes
    the region an error, never a pass (`unchecked`); any other is a note (`notes`).
    """

    unseen: str  # what went unseen: "device-to-host transfers", "host callbacks (...)"
    why: str
    directions: frozenset[Direction] = frozenset()  # transfers it may hide
    recompiles: bool = False  # hides compilations after warm-up instead

    def hides_failing(self, region: Region) -> bool:
        """Whether something the region would fail may have gone unseen here."""
        return (self.recompiles and region.recompiles is RecompileRule.FAIL) or any(
            region.guard.level(d).fails_implicit for d in self.directions
        )

    def text(self, where: str) -> str:
        return f"{self.unseen} could not be checked on {where} ({self.why})"


def coverage(witnessing: Witnessing) -> Coverage:
    """Per direction, what judged it: JAX's guard, the gate's detector, or nothing."""
    assert witnessing.platform is not None
    # The detector watches the mapped runs only; without a map it did not run.
    active = witnessing.can_map and witnessing.detector_missing is None
    found = direction_coverage(witnessing.platform, detector_active=active)
    return tuple((direction.label, judge) for direction, judge in found.items())


def gaps(witnessing: Witnessing, judged: Coverage) -> tuple[Gap, ...]:
    """Every way this region's witnesses were blind, with what each may have hidden."""
    judge = {Direction.from_label(label): j for label, j in judged}
    no_map = "the guard's log did not reach the gate (no transfer map)"
    found = [
        Gap(
            f"{direction.label} transfers",
            witnessing.detector_missing or no_map,
            frozenset({direction}),
        )
        for direction, j in judge.items()
        if j is CoverageJudge.NOT_CHECKED
    ]
    fetches = Direction.DEVICE_TO_HOST
    if judge[fetches] is CoverageJudge.DETECTOR:  # the detector alone judged reads: its blind
        # spots are the region's (where the guard judges them too, it sees what the detector
        # cannot, and on CPU only the buffer protocol hides a read from the detector).
        found.extend(
            Gap(
                f"{fetches.label} reads: {spot}",
                "the detector cannot watch them here",
                frozenset({fetches}),
            )
            for spot in witnessing.detector_blind
        )
    if witnessing.callbacks_missing is not None:
        # No guard ever sees a host callback's operands leave the device: the counter is all.
        found.append(
            Gap(
                "host callbacks (jax.debug.print, pure_callback, io_callback)",
                witnessing.callbacks_missing,
                frozenset({fetches}),
            )
        )
    guard_only = frozenset(d for d, j in judge.items() if j is CoverageJudge.GUARD)
    found.extend(
        Gap("transfers in code that loosens the guard itself", unkept, guard_only)
        for unkept in witnessing.guard_unkept
    )
    if witnessing.compiles_unseen is not None:
        found.append(Gap("compilations after warm-up", witnessing.compiles_unseen, recompiles=True))
    return tuple(found)


def notes(verdict: Verdict, witnessing: Witnessing, region: Region) -> tuple[str, ...]:
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
    found.extend(
        f"{gap.text(witnessing.where)}: this region's pass says nothing about them"
        for gap in gaps(witnessing, coverage(witnessing))
        if not gap.hides_failing(region)
    )
    found.extend(sorted(verdict.disagreements))
    found.extend(verdict.warnings)
    return tuple(found)


def unchecked(region: Region, witnessing: Witnessing, judged: Coverage) -> RegionError | None:
    """An error when something the region would fail could have gone unseen.

    A pass would claim what nobody saw. The fix is the user's choice: a platform (or a
    JAX) where it can be seen, or a policy that says it may go unchecked.
    """
    blind = [gap for gap in gaps(witnessing, judged) if gap.hides_failing(region)]
    if not blind:
        return None
    directions = sorted(
        {d for gap in blind for d in gap.directions if region.guard.level(d).fails_implicit},
        key=lambda d: d.label,
    )
    accept = []
    if directions:
        keys = ", ".join(f"{d.label.replace('-', '_')}: allow" for d in directions)
        accept.append(f"`guard: {{{keys}}}`")
    if any(gap.recompiles for gap in blind):
        accept.append("`recompiles: warn`")
    recompiles = any(gap.recompiles for gap in blind)
    if directions and recompiles:
        what = (
            f"disallows {', '.join(d.label for d in directions)} transfers and fails on recompiles"
        )
    else:
        what = "disallows them" if directions else "fails on recompiles"
    message = (
        f"{'; '.join(gap.text(witnessing.where) for gap in blind)}, and the policy {what}; "
        f"run where they can be checked (another platform, or a JAX this transfer-gate reaches), "
        f"or accept the gap with {' and '.join(accept)}"
    )
    return RegionError(ErrorKind.UNCHECKED, message, message)
