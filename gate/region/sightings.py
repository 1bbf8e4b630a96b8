"""Three witnesses merged into one count per site: JAX's guard log, the gate's
device-to-host detector and the host-callback counter.

Each mapped run yields what every witness saw; `PhaseTally` charges it to
sites (a line, a direction, an array) and keeps, per site, the most any one
run made: a step that moves a value once per run moves it once, however many
runs were watched. What the slow path described (which array a guard line
moved) is kept across runs in `SightingMemory`, since warm runs log moves
without it.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from gate.levels import Direction
from gate.region.descriptions import SightingMemory, line_runs
from gate.region.thread_names import thread_label
from gate.results.cause import CLOSED_OVER_USE, HOST_CALLBACK_USE
from gate.results.placement import Placement
from gate.results.records import Site
from gate.user_code import SourceLocation
from gate.witness.callbacks import CallbackSite
from gate.witness.fetches import Fetch, FetchLog
from gate.witness.observed import Observed


class Sighting(NamedTuple):
    """What the witnesses said about one site, besides counting it."""

    seen_by: str
    argument: str | None = None
    jitted_call: str | None = None
    host_use: str | None = None
    undescribed: bool = False
    # A device-to-host read of an array over several devices: where it lay (the detector's).
    fetched_from: Placement | None = None


# Who saw a transfer, as the report's "seen by" begins.
GUARD_LOG = "JAX's transfer-guard log"
DETECTOR = "the gate's detector"


def _witness(sighting: Sighting) -> str:
    return DETECTOR if sighting.seen_by.startswith(DETECTOR) else GUARD_LOG


def merge_witnesses(
    guard: Counter[Site], detector: Counter[Site], platform: str | None
) -> tuple[Counter[Site], set[str]]:
    """One count per site; and, where the guard and the detector disagree, a note saying so.

    The guard sees device-to-host only on GPU and TPU; there both watch
    the same fetches and should agree, so a site only one of them saw
    is worth a note (and still counts). A guard line JAX left undescribed
    at a line where the detector saw exactly one array is that array's.
    """
    guard = Counter(guard)
    arrays: dict[Site, list[Site]] = {}
    for key in detector:
        arrays.setdefault(key.place, []).append(key)
    for key in [k for k in guard if not k.described]:
        seen = arrays.get(key.place, [])
        if key.direction is Direction.DEVICE_TO_HOST and len(seen) == 1:
            guard[seen[0]] += guard.pop(key)
    merged = Counter(guard)
    for key, count in detector.items():
        merged[key] = max(merged[key], count)
    disagreements = set()
    if platform in ("gpu", "tpu"):
        fetch_sites = {k for k in merged if k.direction is Direction.DEVICE_TO_HOST}
        for key in sorted(fetch_sites, key=site_order):
            if guard[key] != detector[key]:
                where = str(key.location) if key.location else "an unknown line"
                disagreements.add(
                    f"device-to-host at {where}: JAX's guard saw {guard[key]}, "
                    f"the gate's detector saw {detector[key]}"
                )
    return merged, disagreements


@dataclass
class PhaseTally:
    """The sites of one phase's mapped runs, and what the witnesses said about each."""

    main_thread: str
    # Where the step is defined: a jitted step's argument moves are charged there.
    step_location: SourceLocation | None
    platform: str | None  # jax.default_backend(), for `merge_witnesses`
    memory: SightingMemory
    disagreements: set[str]  # notes of the whole region, added to as runs disagree
    per_run: list[Counter[Site]] = field(default_factory=list)
    details: dict[Site, Sighting] = field(default_factory=dict)
    first_seen: dict[Site, int] = field(default_factory=dict)
    unnamed: set[Site] = field(default_factory=set)

    def _key_of(
        self,
        direction: Direction,
        is_explicit: bool,
        location: SourceLocation | None,
        boundary: str | None,
        thread: str,
    ) -> Site:
        """The site without its array (that comes from the witness)."""
        label = None if thread == self.main_thread else thread_label(thread)
        return Site(direction, is_explicit, location, boundary, label, None, None)

    def _note(self, key: Site, sighting: Sighting) -> None:
        self.first_seen.setdefault(key, len(self.first_seen))
        known = self.details.get(key)
        if known is None:
            self.details[key] = sighting
        else:  # what one witness knows and the other doesn't
            if known.argument and sighting.argument and known.argument != sighting.argument:
                self.unnamed.add(key)  # two arguments of one dtype and shape: name neither
            # Both witnesses saw it (JAX 0.12's guard and the detector reading an array
            # split over CPU devices, or any read on a GPU): the report says both.
            seen_by = known.seen_by
            if sighting.seen_by not in seen_by and _witness(sighting) != _witness(known):
                seen_by = f"{seen_by}; {sighting.seen_by}"
            self.details[key] = known._replace(
                seen_by=seen_by,
                argument=None if key in self.unnamed else known.argument or sighting.argument,
                jitted_call=known.jitted_call or sighting.jitted_call,
                host_use=known.host_use or sighting.host_use,
                fetched_from=known.fetched_from or sighting.fetched_from,
            )

    def add_run(
        self,
        observed: list[Observed],
        fetches: FetchLog | None,
        callbacks_ran: dict[CallbackSite, int],
    ) -> None:
        """One mapped run: the guard's lines, the detector's fetches, the callbacks that ran."""
        guard_counts = self._guard_counts(observed, callbacks_ran)
        detector_counts: Counter[Site] = Counter()
        for fetch in fetches.fetches if fetches is not None else ():
            if fetch.in_callback:
                continue  # charged to the callback's own site below
            place = self._key_of(
                fetch.direction, fetch.explicit, fetch.location, fetch.boundary, fetch.thread
            )
            key = replace(place, dtype=fetch.dtype, shape=fetch.shape)
            detector_counts[key] += 1
            self.memory.detector_seen[key] += 1
            self._note(
                key,
                Sighting(
                    f"{DETECTOR}: {host_use(fetch.what)}",
                    host_use=fetch.what,
                    fetched_from=fetch.fetched_from,
                ),
            )
        counts, disagreements = merge_witnesses(guard_counts, detector_counts, self.platform)
        self.disagreements |= disagreements
        for site, times in callbacks_ran.items():
            key = Site(Direction.DEVICE_TO_HOST, False, site.location, None, None, None, None)
            counts[key] += times
            self.first_seen.setdefault(key, len(self.first_seen))
            self.details[key] = Sighting(
                f"host callback {site.describe()}", host_use=HOST_CALLBACK_USE
            )
        self.per_run.append(counts)

    def _guard_counts(
        self, observed: list[Observed], callbacks_ran: dict[CallbackSite, int]
    ) -> Counter[Site]:
        # A host callback runs inside compiled code, where no line of the
        # user's is executing; the explicit moves the guard logs then (the
        # callback's operands and result) belong to the callback's site.
        only_site = next(iter(callbacks_ran)) if len(callbacks_ran) == 1 else None

        def place_of(seen: Observed) -> tuple[Site, str, str | None]:
            """The site (without its array) a guard line is charged to, who saw it, and
            whether a host callback made it."""
            location, seen_by, use = seen.location, GUARD_LOG, None
            # The callback machinery moves operands with jax.device_put (explicit);
            # an implicit line without a location is the step's own argument move.
            if location is None and only_site is not None and seen.explicit:
                location = only_site.location
                seen_by += f", during host callback {only_site.describe()}"
                use = HOST_CALLBACK_USE
            elif location is None and seen.thread == self.main_thread:
                # No line of the user's ran: the step is itself a jitted
                # function, and JAX moved its arguments (setup's outputs).
                location = self.step_location
                seen_by += ", while calling the step with setup's outputs"
            place = self._key_of(
                seen.direction, seen.explicit, location, seen.boundary, seen.thread
            )
            return place, seen_by, use

        places = [place_of(seen) for seen in observed]
        runs = line_runs(
            [(place, seen.segment) for (place, _, _), seen in zip(places, observed, strict=True)]
        )
        lines: Counter[Site] = Counter()
        lines_per_transfer: dict[Site, int] = {}
        for seen, (place, seen_by, use), line_run in zip(observed, places, runs, strict=True):
            described = self.memory.described_as(place, line_run, seen)
            key = replace(
                place,
                dtype=described.dtype,
                shape=described.shape,
                destination=described.destination,
            )
            lines[key] += 1
            lines_per_transfer[key] = described.lines_per_transfer
            self._note(
                key,
                Sighting(
                    seen_by,
                    argument=described.argument,
                    jitted_call=described.jitted_call,
                    undescribed=described.dtype is None,
                    host_use=use,
                ),
            )
        # Transfers, not log lines: a value sent to N devices is logged N times (each line
        # naming the whole array), and is one transfer. An undescribed line that borrowed
        # no description counts as one: nothing says how many devices it went to.
        return Counter({key: math.ceil(n / lines_per_transfer[key]) for key, n in lines.items()})

    def sites(self) -> Iterator[tuple[Site, Sighting, int]]:
        """Every site in file and line order, with the most moves any one run made there."""
        for key in sorted(self.details, key=lambda k: (*site_order(k), self.first_seen[k])):
            count = max(counts[key] for counts in self.per_run)
            if count == 0:
                continue  # an undescribed sighting the detector's array took over every run
            yield key, self.details[key], count


def between_runs(
    log: FetchLog, threads_before: set[str], detector_seen: Counter[Site]
) -> Iterator[tuple[Site, Sighting]]:
    """Fetches by other threads that no mapped run saw: they happened between runs.

    The main thread's fetches between runs are the warm-up's, seen again
    in the mapped runs; another thread's are work the step handed on.
    """
    main_thread = threading.current_thread().name
    extra: Counter[Site] = Counter()
    found: dict[Site, Fetch] = {}
    for fetch in log.fetches:
        if fetch.thread == main_thread or fetch.in_callback:
            continue
        key = Site(
            fetch.direction,
            fetch.explicit,
            fetch.location,
            fetch.boundary,
            thread_label(fetch.thread),
            fetch.dtype,
            fetch.shape,
        )
        extra[key] += 1
        found[key] = fetch
    for key in sorted(extra, key=site_order):
        unseen = extra[key] - detector_seen[key]
        if unseen <= 0:
            continue
        fetch = found[key]
        older = fetch.thread in threads_before
        origin = (
            "a thread that was already running when this region started (work handed to "
            "it by this region, or left by an earlier one)"
            if older
            else "a thread the step started"
        )
        seen_by = (
            f"the gate's detector: {host_use(fetch.what)}, {unseen}x between the "
            f"watched runs, in {origin}"
        )
        yield key, Sighting(seen_by, host_use=fetch.what)


# What the host did with a fetched value, by the array method it went through.
_HOST_USES = {
    "__str__": "printed or turned into a string (print, str)",
    "__repr__": "repr'd (repr, or print of a container)",
    "__format__": "formatted (an f-string or format())",
    "__float__": "converted with float()",
    "__int__": "converted with int()",
    "__index__": "used as an index",
    "__bool__": "tested for truth (if x, bool(x), and/or)",
    "__array__": "read by NumPy (np.asarray, np.array, a NumPy function)",
    "__iter__": "iterated over",
    "tolist": "converted with .tolist()",
    "item": "converted with .item()",
    "device_get": "fetched with jax.device_get",
    "copy_to_host_async": "copied to the host with copy_to_host_async()",
    CLOSED_OVER_USE: "read by JAX to compile it into a jitted function",
}


def host_use(what: str) -> str:
    return _HOST_USES.get(what, f"read through {what}")


def site_order(key: Site) -> tuple[str, int, str, bool]:
    where = key.location
    return (
        where.path if where else "~",
        where.line if where else 0,
        key.direction.value,
        key.explicit,
    )
