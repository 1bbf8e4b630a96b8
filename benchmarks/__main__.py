"""``python -m benchmarks``: the scenarios, one line each; ``python -m benchmarks NAME ...`` runs
one (``--help`` after the name lists its options).

A scenario's line is its module docstring's first line and the figure it backs; the listing
imports no scenario (most start JAX as they are imported into their ``main``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Each scenario, by its module's name, and the figure in the docs it backs. A module here that
# is no scenario is one of the shared ones (tests/test_benchmarks.py keeps the two lists whole).
SCENARIOS = {
    "gate_vs_floor": "docs/performance.md#the-gate-against-a-hand-written-floor",
    "region_phases": "docs/performance.md#where-a-regions-time-goes",
    "leftovers": "docs/performance.md#with-regions",
    "gate_overhead": "docs/performance.md#its-pieces",
    "worker_overhead": "docs/performance.md#its-pieces",
    "parent_start": "docs/performance.md#its-pieces",
    "comm_overhead": "docs/performance.md#with-program-size",
    "leak_overhead": "docs/performance.md#with-program-size",
    "line_overhead": "docs/performance.md#with-program-size",
    "op_times_check": "docs/performance.md#on-a-tpu-or-a-gpu",
    "base_scenarios": "docs/performance.md#on-a-tpu-or-a-gpu",
    "base_power": "docs/performance.md#run---base-detection-power",
    "base_load": "docs/performance.md#run---base-under-a-busy-neighbour",
    "base_reach": "docs/performance.md#run---base-when-the-change-reaches-few-regions",
    "diff_headline": "docs/performance.md#on-a-tpu-or-a-gpu",
    "loop_work": "docs/performance.md#on-a-tpu-or-a-gpu",
    "sequential_rule": "docs/compare.md#time-slower-faster-unchanged-inconclusive",
    "realistic_steps": "docs/performance.md#realistic-steps",
    "compile_cache": "docs/performance.md#the-compilation-cache-in-ci",
    "history_scale": "docs/performance.md#history-1000-reports-of-100-regions",
    "merge_scale": "docs/performance.md#merging-shards",
}
# The modules the scenarios share.
SHARED = ("processes", "regions", "floor", "worker", "region_parts")


def summary(name: str) -> str:
    """The first line of scenario ``name``'s docstring, read without importing it."""
    import ast  # only to list: a scenario's child processes start here too

    tree = ast.parse((HERE / f"{name}.py").read_text(encoding="utf-8"))
    return (ast.get_docstring(tree) or "").splitlines()[0]


def listing() -> str:
    width = max(map(len, SCENARIOS))
    rows = [f"{name:<{width}}  {summary(name)} [{figure}]" for name, figure in SCENARIOS.items()]
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n")
        print(listing())
        return 0
    name, options = argv[0], argv[1:]
    if name not in SCENARIOS:
        print(
            f"python -m benchmarks: no scenario {name!r}; these are:\n{listing()}", file=sys.stderr
        )
        return 2
    sys.argv = [f"python -m benchmarks {name}", *options]  # argparse's name for the scenario
    scenario = importlib.import_module(f"benchmarks.{name}")
    return int(scenario.main(options) or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
