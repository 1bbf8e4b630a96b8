"""The benchmark harness cannot rot: ``python -m benchmarks`` lists every scenario, each backs a
figure in the docs, the docs name only scenarios that exist, and the cheapest ones run."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from processes import run
from test_docs import anchors

from benchmarks.__main__ import SCENARIOS, SHARED

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
LOG = ROOT / "docs" / "performance-log.md"
# Where a figure or a command may name a scenario: the README, the docs (the log names the
# scripts as they were), and the accelerator scripts.
NAMING = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p != LOG),
    BENCHMARKS / "tpu_check.sh",
    BENCHMARKS / "gpu_check.sh",
]


def harness(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = run([sys.executable, "-m", "benchmarks", *args], timeout=timeout, cwd=ROOT, env=env)
    return done.returncode, done.stdout, done.stderr


def test_the_listing_has_one_line_per_scenario() -> None:
    code, out, err = harness()
    assert code == 0, err
    listed = [line.split()[0] for line in out.splitlines() if line[:1].isalnum()]
    assert listed[-len(SCENARIOS) :] == list(SCENARIOS), out
    for name, figure in SCENARIOS.items():
        (row,) = [line for line in out.splitlines() if line.startswith(f"{name} ")]
        assert row.endswith(f"[{figure}]"), row
        assert len(row.split()) > 3, f"{name}: its docstring's first line says nothing: {row}"


def test_an_unknown_scenario_is_refused_with_the_list() -> None:
    code, out, err = harness("no_such_scenario")
    assert (code, out) == (2, "")
    assert "no scenario 'no_such_scenario'" in err
    assert "gate_vs_floor" in err


def test_every_module_is_a_scenario_or_shared() -> None:
    modules = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__", "__main__"}
    assert modules == set(SCENARIOS) | set(SHARED), (
        "a module in benchmarks/ is neither registered in benchmarks/__main__.py nor shared: "
        f"{sorted(modules ^ (set(SCENARIOS) | set(SHARED)))}"
    )


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_scenario_backs_a_figure_that_names_it(name: str) -> None:
    page, _, anchor = SCENARIOS[name].partition("#")
    path = ROOT / page
    assert path.exists(), f"{name}: no page {page}"
    if anchor:
        assert anchor in anchors(path), f"{name}: no heading #{anchor} in {page}"
    # In a code span: `python -m benchmarks NAME ...`, or `NAME` in a table's column of them.
    assert re.search(rf"`(?:[^`]*-m\s+benchmarks\s+)?{name}[`\s]", path.read_text()), (
        f"{page} does not name the scenario {name}"
    )


def test_the_docs_name_only_scenarios_and_scripts_that_exist() -> None:
    retired = set(re.findall(r"^\| `(\w+)\.py` \|", LOG.read_text(), re.MULTILINE))
    assert retired, "docs/performance-log.md lists no retired scripts"
    unknown = []
    for path in NAMING:
        text = path.read_text()
        for name in re.findall(r"-m\s+benchmarks\s+(\w+)", text):
            if name not in SCENARIOS and name != "NAME":
                unknown.append(f"{path.name}: python -m benchmarks {name}")
        for name in re.findall(r"benchmarks/(\w+)\.py", text):
            if not (BENCHMARKS / f"{name}.py").exists() and name not in retired:
                unknown.append(f"{path.name}: benchmarks/{name}.py")
    assert not unknown, "; ".join(unknown)


def test_the_cheapest_scenarios_run() -> None:
    code, out, err = harness("sequential_rule", "--regions", "50", timeout=120)
    assert code == 0, err
    assert "Runs of 20 unchanged regions" in out, out
    # The shared regions, floor and processes: the gate against the floor at one region.
    code, out, err = harness(
        "gate_vs_floor", "--regions", "1", "--no-base", "--growth", timeout=240
    )
    assert code == 0, out + err
    assert re.search(r"^\| 1 \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", out, re.MULTILINE), out


def test_the_floor_with_a_process_per_tree_runs_both_ways(tmp_path: Path) -> None:
    """`FLOOR_PROCESSES`: paired rounds whose turn passes between two processes through pipes
    (at the rounds a gate's run took, one more than the least here), and a tree's process on
    its own; a lost turn would hang the first, so each run is bounded."""
    from benchmarks.floor import GATE_ROUNDS, processes_command
    from benchmarks.regions import build

    repo = tmp_path / "repo"
    build(repo, 1)
    base = tmp_path / "base" / "bench_steps.py"
    base.parent.mkdir()
    base.write_text((repo / "bench_steps.py").read_text())
    (repo / GATE_ROUNDS).write_text("[17]")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    paired = processes_command(base, repo / GATE_ROUNDS, env)
    assert paired[3:5] == ["floor_processes.py", "paired"]  # the CPU admits two processes
    pinned = processes_command(base, repo / GATE_ROUNDS, env, pinned=True)
    assert (paired[1], pinned[1]) == ("FLOOR_PINNED=0", "FLOOR_PINNED=1")
    # The base's side apart is the head's code on the base's module: the head's alone here.
    apart = [sys.executable, "floor_processes.py", "apart", str(base)]
    for command in (paired, pinned, apart):
        done = run(command, timeout=120, cwd=repo, env=env)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_floors_run_the_base_for_each_region_the_gate_compared(tmp_path: Path) -> None:
    """The rounds kept for the floors: 0 only for a region whose base did not run; a region
    compared without paired rounds (a TPU's trees apart) still has its base run by them."""
    import json

    from benchmarks.gate_vs_floor import _keep_rounds

    regions = [
        {"base": {"status": "compared", "timing": {"rounds": 20}}},
        {"base": {"status": "compared", "timing": {"verdict": "unchanged"}}},
        {"base": {"status": "compared"}},  # timing: off
        {"base": {"status": "unchanged"}},
        {"base": None},  # a new region: no base at all
    ]
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"suites": [{"regions": regions}]}))
    _keep_rounds(report, tmp_path / "kept.json")
    assert json.loads((tmp_path / "kept.json").read_text()) == [20, 1, 1, 0, 0]
