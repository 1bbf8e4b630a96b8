"""Transfers grouped by the array and line that moved it: what a person fixing a region reads.

The runner records transfers per phase (first call, steady state); a reader
asks per array moved at a line: which line moved which array, which way, how
often per step. One call that moves three arrays is three findings, each with
its own dtype, shape, count and bytes. Every reporter shows findings in the
same order (`group`): failing first, then host syncs (device-to-host reads), then
what moves every step (most per step first), then what moves on the first call only, each
by file and line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gate.levels import Direction
from gate.results.cause import NAMED_IN_THE_FINDING, cause_of
from gate.results.placement import Placement
from gate.results.records import Phase, Site, Transfer, array_text
from gate.user_code import SourceLocation

# What a finding says for an array JAX's fast path logged without a description.
UNDESCRIBED = "an array JAX's fast path did not describe"


@dataclass(frozen=True)
class Finding:
    """One array moved one way by one line of the user's code, over all phases."""

    site: Site
    source: str | None
    first_call: int  # times during the first call
    per_step: int  # times per steady-state step
    failing: bool
    sample: Transfer  # one of the grouped transfers (for hints and JAX's text)
    members: tuple[Transfer, ...] = ()  # every transfer grouped here

    @property
    def direction(self) -> Direction:
        return self.site.direction

    @property
    def explicit(self) -> bool:
        return self.site.explicit

    @property
    def location(self) -> SourceLocation | None:
        return self.site.location

    @property
    def boundary(self) -> str | None:
        return self.site.boundary

    @property
    def thread(self) -> str | None:
        return self.site.thread

    @property
    def dtype(self) -> str | None:
        return self.site.dtype

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self.site.shape

    @property
    def argument(self) -> str | None:
        return self.sample.argument

    @property
    def destination(self) -> Placement | None:
        return self.site.destination

    def placement(self) -> str:
        """Where it went over a mesh, in words: ``replicated to 8 devices, P()``; or, for a
        read, where the array lay: ``from an array split 8 ways over 8 devices, P('data')``."""
        if self.destination is not None:
            return self.destination.words()
        if self.sample.fetched_from is not None:
            return f"from an array {self.sample.fetched_from.words()}"
        return ""

    @property
    def undescribed(self) -> bool:
        return self.dtype is None and any(t.undescribed for t in self.members)

    @property
    def kind(self) -> str:
        return "explicit" if self.explicit else "implicit"

    @property
    def checked_once(self) -> bool:
        """An implicit device-to-device move JAX checks on the first call only.

        An uncommitted array sent to another device is copied every step, but
        JAX looks at that move only on a call's slow path (the first call);
        warm calls pass it silently, so "0x per step" would be a lie.
        """
        return (
            self.direction is Direction.DEVICE_TO_DEVICE
            and not self.explicit
            and self.first_call > 0
            and self.per_step == 0
        )

    @property
    def every_step(self) -> bool:
        """Whether this moves data on every step (not only on the first call)."""
        return self.per_step > 0 or self.checked_once

    def array(self) -> str:
        """``argument 'y' int32[32]``, ``float32[8]``, or the words for an undescribed array;
        on a mesh with where it went: ``float32[64,16] (replicated to 8 devices, P())``."""
        if self.dtype is not None:
            shaped = array_text(self.dtype, self.shape)
        elif self.undescribed:
            shaped = UNDESCRIBED
        else:
            shaped = ""
        if self.argument is not None:
            shaped = f"argument '{self.argument}' {shaped}".rstrip()
        placement = self.placement()
        return f"{shaped} ({placement})".lstrip() if placement else shaped

    def what(self) -> str:
        """``host-to-device float32[8,4]`` (or ``host-to-device argument 'x' float32[8,4]``);
        ``... by jax.sharding.reshard of a host array`` for an idiom that hides its transfer."""
        array = self.array()
        what = f"{self.direction.label} {array}" if array else self.direction.label
        return f"{what}{self._idiom()}"

    def _idiom(self) -> str:
        cause = cause_of(self.sample_with_shape())
        return f" by {cause.value}" if cause in NAMED_IN_THE_FINDING else ""

    def sample_with_shape(self) -> Transfer:
        return replace(
            self.sample, dtype=self.dtype, shape=self.shape, destination=self.destination
        )

    def counts(self) -> str:
        """``3x per step, 1x on the first call`` (only the parts that are not zero)."""
        if self.checked_once:
            return "every step; JAX checks it on the first call only"
        parts = []
        if self.per_step:
            parts.append(f"{self.per_step}x per step")
        if self.first_call:
            parts.append(f"{self.first_call}x on the first call")
        return ", ".join(parts) or "seen once"

    def where(self) -> str:
        return str(self.location) if self.location is not None else "an unknown line"

    def line_change(self) -> str:
        """``run --base``: what the change did to its line, `` (changed line)``, `` (unchanged
        line; the change at a.py:9 caused it)``; "" without a base."""
        said = self.sample.line_change
        return f" ({said})" if said else ""

    def scope(self) -> str:
        """Where it happened, when that matters: a boundary, outside one, a thread."""
        parts = []
        if self.boundary is not None:
            parts.append(f"in boundary {self.boundary}")
        elif self.explicit:
            parts.append("outside a declared boundary")
        if self.thread is not None:
            parts.append(f"in thread {self.thread}")
        return " ".join(parts)

    def headline(self) -> str:
        """``implicit host-to-device transfer float32[8] at a.py:3, 3x per step``."""
        scope = f" {self.scope()}" if self.scope() else ""
        array = self.array()
        if array:
            of = "of " if self.argument is not None or self.dtype is None else ""
            array = f" {of}{array}"
        return (
            f"{self.kind} {self.direction.label} transfer{array}{self._idiom()}{scope} at "
            f"{self.where()}, {self.counts()}"
        )


def _buckets(transfers: Iterable[Transfer]) -> dict[Site, list[Transfer]]:
    """Transfers per site; a sighting that names no array joins the only array of its place.

    JAX's own guarded run and some witnesses say where and which way but not
    which array. Where one array is known at that place it is that one; where
    several are (or none), it stays apart: never merged into a described
    finding it may not belong to. An array the runner knows to be undescribed
    (JAX's fast path) always stays apart.
    """
    buckets: dict[Site, list[Transfer]] = {}
    for transfer in transfers:
        buckets.setdefault(transfer.site, []).append(transfer)
    described: dict[Site, list[Site]] = {}
    for site in buckets:
        if site.described:
            described.setdefault(site.place, []).append(site)
    for site in [s for s in buckets if not s.described]:
        members = buckets[site]
        arrays = described.get(site.place, [])
        if len(arrays) == 1 and not any(t.undescribed for t in members):
            buckets[arrays[0]].extend(buckets.pop(site))
    return buckets


def group(transfers: Iterable[Transfer]) -> tuple[Finding, ...]:
    """The transfers as findings, in the order a reviewer reads them (see `_order`)."""
    found = []
    for site, members in _buckets(transfers).items():
        shaped = next((t for t in members if t.dtype is not None), members[0])
        named = next((t for t in members if t.argument is not None), None)
        sample = shaped
        if named is not None and all(t.argument in (None, named.argument) for t in members):
            sample = replace(
                shaped,
                argument=named.argument,
                jitted_call=shaped.jitted_call or named.jitted_call,
            )
        elif shaped.argument is not None:
            sample = replace(shaped, argument=None)  # two arguments share this array's site
        if sample.host_use is None:
            use = next((t.host_use for t in members if t.host_use), None)
            sample = replace(sample, host_use=use)
        if sample.fetched_from is None:
            fetched = next((t.fetched_from for t in members if t.fetched_from), None)
            sample = replace(sample, fetched_from=fetched)
        found.append(
            Finding(
                site=site,
                source=next((t.source for t in members if t.source), None),
                first_call=sum(t.count for t in members if t.phase is Phase.FIRST_CALL),
                per_step=max(
                    (t.count for t in members if t.phase is Phase.STEADY_STATE), default=0
                ),
                failing=any(t.failing for t in members),
                sample=sample,
                members=tuple(members),
            )
        )
    return tuple(sorted(found, key=_order))


def _order(f: Finding) -> tuple[object, ...]:
    """The most severe first, as a PR annotation needs it (the first finding is the line the
    JUnit testcase points at): failing first (what the base or the baseline already has does
    not fail, so new comes before old); then a device-to-host read (the host waits for the
    device: a sync) before an upload or a move between devices; then what moves every step,
    most per step first, before first-call-only lines (initialisers); ties by file and line,
    then direction, then thread (a thread's finding after the step's own), then the order JAX
    moved the arrays in."""
    where = f.location
    return (
        not f.failing,
        f.direction is not Direction.DEVICE_TO_HOST,
        not f.every_step,
        -f.per_step,
        where.path if where else "~",
        where.line if where else 0,
        f.direction.value,
        f.thread or "",  # by name, not by which thread happened to run first
    )
