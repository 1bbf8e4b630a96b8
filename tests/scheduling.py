"""How pytest-xdist spreads the suite over its workers: which modules they are dealt first.
conftest.py wires it into pytest's hooks. ``-n auto`` keeps a worker per core: the suite is
mostly CPU-bound (`.ci/run` spent 2,060 s of CPU on a fresh clone, 2026-12-07), and a third
worker on CI's 2 cores, unmeasured against two, would load the tests that time things.

The suite runs as ``pytest -n auto --dist loadscope`` (README.md, .ci/run): each module goes
whole to one worker, so its module fixtures run once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

# Seconds of one worker's time on CI's 2 cores for each module whose tests take far longer than
# their count says. Read with `pytest -n 2 --durations=0 FILES`, summed by module, on the shared
# 2-core machine (2026-12-07, under a load of 3 to 9), and scaled to CI by what CI's own
# `--durations=20` gave for the same tests (0.2 to 0.8 of it): an order, not a measurement.
# xdist's loadscope deals modules by their count of tests, most first; these hold 1 to 13 tests
# each, so they came in the last third, and a worker given one of them near the end ran on alone
# while the others stood idle. Dealt first, longest first, they leave the end of the run to the
# many quick modules. A module missing here only keeps xdist's place for it.
HEAVY_MODULES: dict[str, float] = {
    "test_two_trees_verdicts.py": 100,
    "test_library_fixes.py": 75,
    "test_base_compare.py": 55,
    "test_walkthrough.py": 31,
    "test_base_rename.py": 26,
    "test_acceptance.py": 25,
    "test_timing_baseline.py": 25,
    "test_donations_cli.py": 22,
    "test_base_timeout.py": 17,
    "test_install.py": 17,
    "test_lint.py": 16,
    "test_device_pool.py": 16,
    "test_line_identity.py": 16,
    "test_baseline_noise.py": 15,
    "test_progress.py": 14,
    "test_leftovers.py": 14,
    "test_two_trees.py": 13,
    "test_imports_in_worker.py": 12,
    "test_quick_start.py": 12,
    "test_constants.py": 11,
}


class _Item(Protocol):
    @property
    def path(self) -> Path: ...


T = TypeVar("T", bound=_Item)


def heavy_first(items: Sequence[T]) -> list[T]:
    """The items, their modules reordered: those of HEAVY_MODULES first, longest first; then the
    rest by their count of tests, most first, as xdist would deal them. A module's own tests
    keep their order (Python's sort is stable)."""
    counts = Counter(item.path.name for item in items)

    def rank(item: T) -> tuple[int, float]:
        name = item.path.name
        if name in HEAVY_MODULES:
            return (0, -HEAVY_MODULES[name])
        return (1, -counts[name])

    return sorted(items, key=rank)
