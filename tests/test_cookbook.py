"""docs/cookbook.md is what docs/cookbook/generate.py writes today, and the gate agrees with it.

One run of the generator in ``--check`` mode (one ``transfer-gate run`` of the recipe policies,
~15 s): it fails when the committed page is stale. The gate's JSON report of that run, which the
generator keeps, is checked here on its own: every leaky region failed, at exactly the lines its
recipe module marks ``# LEAK``, and every fixed region passed, so the page can never show a
passing leak or a failing fix.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from processes import run

ROOT = Path(__file__).resolve().parent.parent
COOKBOOK = ROOT / "docs" / "cookbook"
PAGE = ROOT / "docs" / "cookbook.md"
# What docs/cookbook/generate.py reads as a leaky line: one ending in "# LEAK: why", or in
# "# RECOMPILE: why" where the step compiles again as the loop's step moves on.
MARKER = re.compile(r"\S {2}# (LEAK|RECOMPILE): ")


def marked(path: Path) -> set[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {number for number, line in enumerate(lines, 1) if MARKER.search(line)}


# A recipe is a module with at least one marked line; its regions are <slug>-leaky and -fixed.
RECIPES = sorted(p.stem for p in COOKBOOK.glob("*.py") if marked(p))


@pytest.fixture(scope="module")
def generated(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """The generator's --check run, and the regions of the report it kept, by name."""
    reports = tmp_path_factory.mktemp("cookbook")
    done = run(
        [sys.executable, COOKBOOK / "generate.py", "--check", "--report-dir", reports],
        cwd=ROOT,
        timeout=240,
    )
    path = reports / "cookbook.json"
    assert path.is_file(), f"the gate wrote no JSON report\n{done.stdout}\n{done.stderr}"
    report = json.loads(path.read_text(encoding="utf-8"))
    regions = {r["name"]: r for suite in report["suites"] for r in suite["regions"]}
    return done, regions


def test_the_page_is_what_the_generator_writes(
    generated: tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]],
) -> None:
    done, _ = generated
    assert done.returncode == 0, (
        "docs/cookbook.md is stale or the recipes disagree with the gate; regenerate it with "
        f"`.venv/bin/python docs/cookbook/generate.py`\n{done.stdout}\n{done.stderr}"
    )


def test_there_are_recipes_and_nothing_else_in_the_run(
    generated: tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]],
) -> None:
    _, regions = generated
    assert len(RECIPES) >= 8, RECIPES
    assert set(regions) == {f"{slug}-{side}" for slug in RECIPES for side in ("leaky", "fixed")}


@pytest.mark.parametrize("slug", RECIPES)
def test_the_leaky_step_fails_exactly_at_its_marked_lines(
    generated: tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]], slug: str
) -> None:
    _, regions = generated
    leaky = regions[f"{slug}-leaky"]
    assert leaky["status"] == "failed", leaky
    path = f"docs/cookbook/{slug}.py"
    found = [*leaky["transfers"], *leaky.get("recompiles", ())]
    failing = {(f["path"], f["line"]) for f in found if f["failing"]}
    assert failing == {(path, line) for line in marked(COOKBOOK / f"{slug}.py")}
    # The page shows that failure, under the region's own name.
    assert f"FAIL  {leaky['classname']}  " in PAGE.read_text(encoding="utf-8")


@pytest.mark.parametrize("slug", RECIPES)
def test_the_fixed_step_passes(
    generated: tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]], slug: str
) -> None:
    _, regions = generated
    fixed = regions[f"{slug}-fixed"]
    assert fixed["status"] == "passed", fixed
    assert not [t for t in fixed["transfers"] if t["failing"]]
    assert not [r for r in fixed.get("recompiles", ()) if r["failing"]]
    assert f"PASS  {fixed['classname']}  " in PAGE.read_text(encoding="utf-8")
