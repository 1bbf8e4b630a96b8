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
survives out of its sight, as it froze JAX's modules after start-up. Every `RELEASE_EVERY`
regions it lets go of every program JAX holds (`release_programs`: setup's are traced again
once) and collects everything once, frozen objects included: the worker's memory then stays
within what that many regions leave, and a frozen object that became garbage in a reference
cycle is collected after all.
"""

from __future__ import annotations

import gc

from gate.jaxhooks.programs import release_programs

# Regions between two releases of every program and full collections.
RELEASE_EVERY = 50


class Leftovers:
    """What the regions run so far left in this worker, and when it is let go of."""

    def __init__(self) -> None:
        self._regions = 0

    def after_startup(self) -> None:
        """What is here now (JAX's modules, the backend) lives as long as the worker: out of
        the collector's sight."""
        gc.freeze()

    def between_regions(self) -> None:
        """Before a region, with nothing held from the last: collect what the last region
        left and freeze the rest; every `RELEASE_EVERY` regions, let go of it all."""
        self._regions += 1
        if self._regions % RELEASE_EVERY == 0:
            release_programs()
            gc.unfreeze()
        gc.collect()
        gc.freeze()
