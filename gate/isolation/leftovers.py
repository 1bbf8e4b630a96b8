"""What finished regions leave in a worker: kept out of its collector's way, and let go of.

Every region leaves objects behind that the worker keeps: JAX's caches hold each region's
traces (its jaxprs, under the region's own jit context, `gate.jaxhooks.programs`), its
lowered and compiled programs, and the cost run's records of them. The collector's full
collections walked all of it, again and again: in a 100-region run the objects it watched
grew from 24 thousand to 117 thousand, its collections from 2 ms of a region at the start to
22 ms at the end, and the worker's memory by 2 MB a region; a cost that grows with the
regions before makes a run's total grow as their square.

So between two regions (with nothing held from the last: ``run --base`` times a held region
again, under its own programs) the worker collects what the last region left, the only
objects its collector still watches (a walk of one region's objects), and freezes what
survives out of its sight, as it froze JAX's modules after start-up. Once its resident memory
has grown by `RELEASE_AFTER_BYTES` since its first region or the last release, it lets go of every
program JAX holds (`release_programs`) and collects everything once, frozen objects included:
the worker's memory stays bounded (279 MB at the 500th small region, against 1.2 GB without
this, `benchmarks/leftovers.py`), and a frozen object that became garbage in a reference cycle
is collected after all.

A release costs the region it lands on: setup's programs are traced and compiled again and
the full collection walks everything, ~0.7 s on the 2-core CPU machine and ~2.6 s on a TPU
v5e (setup's programs compile slowly there). Releasing every 50 regions, as this module first
did, always landed on a run's 50th, 100th and 500th region. A jitted step now lets go of its
own programs as its region ends (`RegionPrograms.let_go`; the worker does both once the
region's reply is sent, while the parent reads it and sends the next job, the ~2 ms it
otherwise waited idle): a small region leaves ~0.05 MB
instead of ~1.8 MB, so a release comes only for what that cannot reach (a step that is no
jitted function, whose helpers keep their programs; JAX's bounded caches of traces), as
often as those regions' memory needs it. Where the resident memory cannot be read (no
``/proc``), every `RELEASE_EVERY` regions.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator

from gate.jaxhooks.programs import release_programs

# Growth of the worker's resident memory, since start-up or the last release, that lets go of
# every program JAX holds.
RELEASE_AFTER_BYTES = 256 * 2**20
# Regions between two releases where the resident memory cannot be read.
RELEASE_EVERY = 50


def resident_bytes() -> int | None:
    """This process's resident memory (``/proc/self/statm``), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Leftovers:
    """What the regions run so far left in this worker, and when it is let go of."""

    def __init__(
        self,
        release_after_bytes: int = RELEASE_AFTER_BYTES,
        resident: Callable[[], int | None] = resident_bytes,
    ) -> None:
        self._release_after = release_after_bytes
        self._resident = resident
        self._regions = 0  # since the last release
        self._since: int | None = None  # the resident memory then

    @contextlib.contextmanager
    def starting_up(self) -> Iterator[None]:
        """The worker's start-up (jax imported, its backend started) with the collector off,
        then `after_startup`. What start-up allocates lives as long as the worker, so a
        collection during it frees next to nothing and only walks a heap that grows to JAX's
        size: ~0.09 CPU-s of each worker's start on the CPU, paid by every run."""
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
        self.after_startup()

    def after_startup(self) -> None:
        """What is here now (JAX's modules, the backend) lives as long as the worker: out of
        the collector's sight."""
        gc.freeze()

    def between_regions(self) -> None:
        """After a region, with nothing held from it: collect what it left and freeze the
        rest; once the regions since the first have grown the worker's memory by
        `RELEASE_AFTER_BYTES`, let go of it all."""
        self._regions += 1
        now = self._resident()
        if now is None:
            due = self._regions >= RELEASE_EVERY
        elif self._since is None:
            # The first region started what a process starts once: XLA's compiler threads, a
            # TPU runtime's buffers (~275 MB on a v5e, so a release came right after it and
            # setup's programs were compiled again, ~2.6 s). What regions leave counts from here.
            self._since, due = now, False
        else:
            due = now - self._since >= self._release_after
        if due:
            release_programs()
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        if due:
            self._regions = 0
            self._since = self._resident()
