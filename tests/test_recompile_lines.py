"""A recompile is the base's when git's line map says its line is (issue 56): ``run --base``
through the real CLI on throwaway repositories.

A step whose call compiles again every run, already in the base, passes when the change only
commented its line, added lines above it, or took its function to another file; a recompile
the change brought in fails, saying what the change did to its line. Before, recompiles after
warm-up were never compared with the base, and programs in the first call and warm-up were
compared by function name alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FAST_DEFAULTS, line_of, make_repo, run_gate
from git_helpers import commit, init

from gate.results.line_map import parse_diff
from gate.results.recompile_changes import after_warmup_vs_base
from gate.results.records import Recompile
from gate.user_code import SourceLocation

HEADER = """
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

_scale = itertools.count(1)


@functools.partial(jax.jit, static_argnums=1)
def scale(x, n):
    return x * n
"""
MAKE = """

def make():
    return (jax.device_put(np.ones((8, 4), np.float32)),)
"""
STEP = """

def step(x):
    return scale(x, next(_scale))  # a new static value each run
"""
CALL = "    return scale(x, next(_scale))  # a new static value each run\n"
STEPS = HEADER + MAKE + STEP

POLICY = f"""
version: 1
{FAST_DEFAULTS.strip()}
regions:
  - {{name: step, step: "steps:step", setup: "steps:make", timing: off}}
"""


def _recompiles(repo: Path) -> list[dict[str, Any]]:
    document = json.loads((repo / "r.json").read_text())
    found: list[dict[str, Any]] = document["suites"][0]["regions"][0].get("recompiles", [])
    return found


def _base(tmp_path: Path, steps: str = STEPS) -> Path:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": steps, "policies/p.yaml": POLICY}, "base")
    return repo


HELPERS = HEADER + STEP  # the step and what it calls, taken to a file of their own


@pytest.mark.parametrize(
    ("head", "where", "label"),
    [
        pytest.param(
            {"steps.py": STEPS.replace(CALL, CALL[:-1] + ", on purpose\n")},
            "steps.py",
            "changed line",
            id="comment",
        ),
        pytest.param(
            {"steps.py": STEPS.replace(MAKE, MAKE + "\n\nRATE = 0.5\nWIDTH = 4\n")},
            "steps.py",
            "unchanged line",
            id="lines-above",
        ),
        pytest.param(
            {"steps.py": HEADER + MAKE + "\n\nfrom helpers import step\n", "helpers.py": HELPERS},
            "helpers.py",
            "moved from steps.py:{base_line}",
            id="moved-file",
        ),
    ],
)
def test_a_recompile_the_base_has_at_the_line_it_maps_to_is_not_new(
    tmp_path: Path, head: dict[str, str], where: str, label: str
) -> None:
    repo = _base(tmp_path)
    base_line = line_of(repo / "steps.py", "# a new static value")
    make_repo(repo, head)
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 0, run
    line = line_of(repo / where, "# a new static value")
    [found] = _recompiles(repo)
    assert (found["path"], found["line"], found["function"]) == (where, line, "jit(scale)")
    assert (found["failing"], found["in_base"]) == (False, True), found
    assert found["line_change"] == label.format(base_line=base_line), found
    assert found["base_count"] == found["count"], found
    text = f"{where}:{line}: jit(scale) compiled again"
    assert text in run.stdout, run
    assert "; already in the base" in run.stdout, run
    assert "recompiled (already in the base)" in run.stdout, run


NAMED = "    n = 2\n    return scale(x, n)\n"  # the static value named on a line above


@pytest.mark.parametrize(
    ("base", "head", "label"),
    [
        pytest.param(
            STEPS.replace(CALL, "    return scale(x, 2)\n"), STEPS, "changed line", id="changed"
        ),
        pytest.param(
            STEPS.replace(CALL, NAMED),
            STEPS.replace(CALL, NAMED.replace("2", "next(_scale)")),
            "unchanged line; the change at steps.py:{above} caused it",
            id="caused-above",
        ),
    ],
)
def test_a_static_argument_the_change_made_vary_is_a_new_recompile(
    tmp_path: Path, base: str, head: str, label: str
) -> None:
    repo = _base(tmp_path, base)
    make_repo(repo, {"steps.py": head})
    github = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json", env=github)
    assert run.returncode == 1, run
    line = line_of(repo / "steps.py", "return scale(x, ")
    label = label.format(above=line - 1)
    # (Also one more program in the first call and warm-up than the base's: warm-up's value.)
    [found] = [r for r in _recompiles(repo) if not r["startup"]]
    assert (found["line"], found["failing"], found["in_base"]) == (line, True, False), found
    assert (found["base_count"], found["line_change"]) == (None, label), found
    failure = run.testcase("step: recompiles").find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(f"steps.py:{line}: jit(scale) compiled again"), message
    # accept: takes no recompile after warm-up: nothing says how to accept it.
    assert f"3 now ({label}) (+1 more in this testcase's body)" in message, message
    # The annotation beside the diff says whether its line is part of this change.
    annotation = next(x for x in run.stdout.splitlines() if "compiled again after warm-up::" in x)
    assert annotation.startswith(f"::error file=steps.py,line={line},"), annotation
    assert f"3 now ({label})" in annotation, annotation


def test_a_recompile_more_often_than_the_base_fails_with_the_bases_count(tmp_path: Path) -> None:
    # The base's static value changes every other run; the head's every run.
    every_other = "return scale(x, next(_scale) // 2)  # a new static value each run\n"
    repo = _base(tmp_path, STEPS.replace(CALL, f"    {every_other}"))
    make_repo(repo, {"steps.py": STEPS})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run
    [found] = _recompiles(repo)
    assert (found["failing"], found["in_base"], found["count"]) == (True, False, 4), found
    assert found["base_count"] == 2, found
    line = line_of(repo / "steps.py", "# a new static value")
    assert (
        f"steps.py:{line}: jit(scale) compiled again 4x in 4 runs after warm-up where the base "
        "compiled again 2x: static argument" in run.stdout
    ), run
    assert "(changed line)" in run.stdout, run


WIDER = """

@jax.jit
def double(x):
    return x * 2.0


def wide_step(x):
    y = double(x)
    return y
"""
WIDER_POLICY = f"""
version: 1
{FAST_DEFAULTS.strip()}
regions:
  - {{name: step, step: "steps:wide_step", setup: "steps:make", timing: off}}
"""


def test_new_code_calling_a_jitted_function_at_a_new_shape_is_no_recompile(
    tmp_path: Path,
) -> None:
    # The head also calls ``double`` on a wider array, at a line of its own: one more program
    # of ``jit(double)`` than the base's, in the first call. Matched by name alone, the
    # base's one program at another line made it a recompile; it is new code at a new shape.
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": HEADER + MAKE + WIDER, "policies/p.yaml": WIDER_POLICY}, "base")
    wider = "    y = double(x)\n    z = double(jnp.concatenate([y, y]))\n    return z.sum() + y\n"
    head = (HEADER + MAKE + WIDER).replace("    y = double(x)\n    return y\n", wider)
    make_repo(repo, {"steps.py": head})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    # (Its results and work differ from the base's, as they should: not what is judged here.)
    assert _recompiles(repo) == [], run
    assert "recompile" not in run.stdout, run


def test_a_pmap_named_with_its_line_is_the_same_program_after_lines_added_above() -> None:
    # JAX names a pmap's program after its function's line (the gate says it so): two lines
    # added above shift that name, not the program.
    lines = parse_diff(
        "diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -2,0 +3,2 @@\n"
    )

    def at(line: int, lambda_line: int) -> Recompile:
        where = SourceLocation("train.py", line, "sync")
        name = f"pmap(<lambda> at train.py:{lambda_line})"
        return Recompile(name, where, 8, 4, None, failing=True, source="avg(x)")

    [judged] = after_warmup_vs_base([at(32, 27)], [at(30, 25)], lines)
    assert (judged.in_base, judged.failing, judged.line_change) == (True, False, "unchanged line")
    [new] = after_warmup_vs_base([at(32, 27)], [], lines)
    assert (new.in_base, new.failing, new.base_count) == (False, True, None)
    assert new.line_change == "unchanged line; the change at train.py:4 caused it"
