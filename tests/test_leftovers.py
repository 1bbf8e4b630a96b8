"""What finished regions leave in a worker (`gate.isolation.leftovers`): out of the collector's
sight between regions, and let go of once the worker's memory grew by ``RELEASE_AFTER_BYTES``
(every ``RELEASE_EVERY`` regions where its memory cannot be read).

In a process of its own: freezing the collector's objects is for the whole process, and the
suite's own must not be frozen.
"""

from __future__ import annotations

import json
import sys

import pytest
from cli_helpers import gate_env
from processes import run

from gate.isolation.leftovers import RELEASE_EVERY, resident_bytes

# Regions as a worker runs them: each a jitted function of its own (kept, as a user's module
# keeps it), called under the region's own programs; then what the worker does between two.
REGIONS = """
import gc, json, sys
import jax, jax.numpy as jnp
from gate.isolation.leftovers import RELEASE_AFTER_BYTES, RELEASE_EVERY, Leftovers
from gate.jaxhooks.programs import RegionPrograms, shared_programs

between = sys.argv[1] != "control"
# The worker's resident memory as this test has it: unread ("unread": the count decides), or
# grown by RELEASE_AFTER_BYTES only before the last region's turn (and, "first-grows", by twice
# that in the first region, which does not count).
memory = [0]
resident = (lambda: None) if sys.argv[1] == "unread" else (lambda: memory[0])
leftovers = Leftovers(resident=resident)
leftovers.after_startup()
steps, watched, traces = [], [], []


def region(i):
    @jax.jit
    def step(x):
        traces.append(i)
        return jnp.tanh(x * (i + 1)).sum() + jnp.mean(x)

    steps.append(step)
    with shared_programs():
        x = jnp.ones(8) * 2  # setup's program, shared by every region
    with RegionPrograms().entered():
        assert float(step(x)) > 0


for i in range(RELEASE_EVERY - 1):
    region(i)
    if i == 0 and sys.argv[1] == "first-grows":
        # What a process starts once, in its first region (a TPU runtime: ~275 MB).
        memory[0] = 2 * RELEASE_AFTER_BYTES
    if between:
        leftovers.between_regions()
    watched.append(len(gc.get_objects()))
cached = steps[0]._cache_size()
memory[0] += RELEASE_AFTER_BYTES
if between:
    leftovers.between_regions()  # grown by that much (or the RELEASE_EVERY-th): all let go of
released = steps[0]._cache_size()
region(RELEASE_EVERY)  # a region after the release runs, traced afresh
print(json.dumps({"watched": watched, "cached": cached, "released": released,
                  "traced_last": traces[-1]}))
"""


# More objects watched at the 49th region than at the 5th: what the regions between left.
PILED_UP = 500


def _regions(mode: str) -> dict[str, object]:
    done = run([sys.executable, "-c", REGIONS, mode], timeout=240, env=gate_env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["leftovers", "unread", "first-grows"])
def test_the_collector_watches_only_the_last_regions_objects_and_programs_are_let_go(
    mode: str,
) -> None:
    """Let go of once the memory grew by RELEASE_AFTER_BYTES since the first region, not before
    (what the first region grows it by is the process starting, not leftovers); where the
    memory cannot be read, after RELEASE_EVERY regions."""
    found = _regions(mode)
    watched = found["watched"]
    assert isinstance(watched, list)
    # Frozen after each region: the collector watches the same few objects at the 49th
    # region as at the 5th, not what every region before left.
    assert max(watched[4:]) - watched[4] <= PILED_UP, watched
    assert found["cached"] == 1  # a finished region's program, held by JAX until the release
    assert found["released"] == 0
    assert found["traced_last"] == RELEASE_EVERY


def test_without_it_what_each_region_leaves_piles_up() -> None:
    """The check above can fail: the same regions with nothing done between them."""
    found = _regions("control")
    watched = found["watched"]
    assert isinstance(watched, list)
    assert watched[-1] - watched[4] > 4 * PILED_UP, watched  # ~180 objects a region
    assert found["released"] == 1


def test_the_resident_memory_is_read_where_there_is_a_proc() -> None:
    found = resident_bytes()
    assert found is not None
    assert 10 * 2**20 < found < 64 * 2**30  # this test process: tens of MB to a few GB


# A worker's start-up as `gate.isolation.worker` runs it, and one that fails (no backend).
START_UP = """
import gc, json
from gate.isolation.leftovers import Leftovers

seen = {}
with Leftovers().starting_up():
    kept = [[i] for i in range(20_000)]  # what importing jax allocates, and keeps
    seen["inside"] = gc.isenabled()
seen["after"], seen["frozen"] = gc.isenabled(), gc.get_freeze_count()
try:
    with Leftovers().starting_up():
        raise RuntimeError("no backend")
except RuntimeError:
    seen["after_failure"] = gc.isenabled()
print(json.dumps(seen))
"""


def test_a_workers_start_up_runs_without_the_collector_and_ends_with_it_on_and_frozen() -> None:
    """What start-up allocates lives as long as the worker: no collection walks it then, and
    it is out of the collector's sight after; the collector is on again whatever happened."""
    done = run([sys.executable, "-c", START_UP], timeout=60, env=gate_env())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["inside"] is False, seen
    assert seen["after"] is True, seen
    assert seen["after_failure"] is True, seen
    assert seen["frozen"] >= 20_000, seen
