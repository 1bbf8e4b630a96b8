"""How xdist spreads the suite (tests/scheduling.py): the slow few-test modules are dealt
first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from scheduling import HEAVY_MODULES, heavy_first

TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Item:
    path: Path
    name: str


def _items(counts: dict[str, int]) -> list[Item]:
    return [Item(TESTS / module, f"t{n}") for module, count in counts.items() for n in range(count)]


def test_heavy_modules_come_first_longest_first_then_the_rest_by_count() -> None:
    slowest, slow = sorted(HEAVY_MODULES, key=HEAVY_MODULES.__getitem__)[-1:-3:-1]
    items = _items({"test_a.py": 2, slow: 1, "test_b.py": 5, slowest: 2, "test_c.py": 2})
    ordered = heavy_first(items)
    modules = list(dict.fromkeys(item.path.name for item in ordered))
    assert modules == [slowest, slow, "test_b.py", "test_a.py", "test_c.py"]
    # Each module's own tests keep their order.
    assert [i.name for i in ordered if i.path.name == "test_b.py"] == [f"t{n}" for n in range(5)]
    assert sorted(ordered, key=items.index) == items  # nothing lost, nothing twice


def test_every_heavy_module_is_a_test_module_here() -> None:
    assert all((TESTS / name).is_file() for name in HEAVY_MODULES), HEAVY_MODULES


def test_this_run_deals_modules_in_that_order(request: pytest.FixtureRequest) -> None:
    # xdist would reorder by count alone; conftest.py turns that off where xdist is loaded.
    assert getattr(request.config.option, "loadscopereorder", False) is False
