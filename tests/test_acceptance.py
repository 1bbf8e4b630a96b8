"""A region's ``accept:`` accepts an intended change against ``run --base`` (issue 58), through the
real CLI on throwaway git repositories.

A failing comparison with the base ends with the exact edit that accepts it; made, the change
reads as accepted in the terminal, JUnit and JSON, and the run passes. The entry accepts only
what its kind names (results never hide cost), and only while the base lacks it: merged into
main, it accepts nothing more, and the next change of that kind needs its own reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

BASE_STEPS = """
import jax
import numpy as np


@jax.jit
def forward(x):
    return {"y": x * 2.0}


def make():
    return (jax.device_put(np.arange(16, dtype=np.float32)),)


def step(x):
    return forward(x)
"""

# The pull request: a new output, computed in the program (more flops: a cost change too).
HEAD_STEPS = BASE_STEPS.replace('return {"y": x * 2.0}', 'return {"y": x * 2.0, "z": x * x + x}')

POLICY = """\
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - name: train
    step: "steps:step"
    setup: "steps:make"
    cost: {max_increase: 1.5}
"""


def _regions(report: Path) -> dict[str, dict[str, Any]]:
    document = json.loads(report.read_text())
    return {r["name"]: r for suite in document["suites"] for r in suite["regions"]}


def _message(done: Any, name: str) -> str:
    failure = done.testcase(name).find("failure")
    assert failure is not None, done
    return str(failure.get("message"))


def _run(repo: Path) -> Any:
    return run_gate(repo, "run", "policies", "--base", "main", "--json", "reports/r.json")


def _repo(tmp_path: Path) -> Path:
    root = init(tmp_path / "repo")
    commit(root, {"steps.py": BASE_STEPS, "policies/p.yaml": POLICY}, "base")
    return root


def test_a_failing_change_ends_with_its_edit_and_the_edit_makes_it_pass(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    make_repo(repo, {"steps.py": HEAD_STEPS})
    done = _run(repo)
    assert done.returncode == 1, done
    edit = {
        kind: f"to accept it, add `accept: {{{kind}: <why this change is meant>}}` to region "
        "train at policies/p.yaml:4"
        for kind in ("results", "cost")
    }
    stdout = " ".join(done.stdout.split())
    assert f"['z'] (['z']: a leaf the base does not have); {edit['results']}" in stdout, done
    assert _message(done, "train: results vs base").endswith(edit["results"]), done
    assert _message(done, "train: cost").endswith(edit["cost"]), done

    # Accepting the results alone leaves the cost failing; its edit now names the block.
    accept = "    accept:\n      results: adds the z metric\n"
    make_repo(repo, {"policies/p.yaml": POLICY + accept})
    done = _run(repo)
    assert done.returncode == 1, done
    assert "policies/p.yaml:9: adds the z metric" in done.stdout, done
    assert done.testcase("train: results vs base").find("failure") is None, done
    cost_edit = "to accept it, add `cost: <why this change is meant>` under `accept:` at "
    assert _message(done, "train: cost").endswith(cost_edit + "policies/p.yaml:8"), done

    accept += "      cost: z costs two flops a value\n"
    make_repo(repo, {"policies/p.yaml": POLICY + accept})
    done = _run(repo)
    assert done.returncode == 0, done
    stdout = " ".join(done.stdout.split())
    assert "accepted at policies/p.yaml:9: adds the z metric" in stdout, done
    assert "accepted at policies/p.yaml:10: z costs two flops a value" in stdout, done
    base = _regions(repo / "reports/r.json")["train"]["base"]
    assert base["failing"] is False
    assert base["results"]["status"] == "differs"
    assert base["results"]["passed"] is True
    assert base["accepted"] == [
        {"kind": "results", "reason": "adds the z metric", "line": 9},
        {"kind": "cost", "reason": "z costs two flops a value", "line": 10},
    ]
    body = done.testcase("train: results vs base").findtext("system-out") or ""
    assert "accepted at policies/p.yaml:9: adds the z metric" in body, done


def test_an_acceptance_merged_into_the_base_accepts_nothing_more(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    accept = "    accept:\n      results: adds the z metric\n      cost: z costs two flops\n"
    commit(repo, {"steps.py": HEAD_STEPS, "policies/p.yaml": POLICY + accept}, "merged")
    # The next pull request changes the results again, under main's old entry.
    make_repo(repo, {"steps.py": HEAD_STEPS.replace("* 2.0,", "* 3.0,")})
    done = _run(repo)
    assert done.returncode == 1, done
    stdout = " ".join(done.stdout.split())
    assert (
        "to accept it, give `accept: results:` at policies/p.yaml:9 a new reason for this "
        "change: the base has 'adds the z metric' too"
    ) in stdout, done
    assert (
        "policies/p.yaml:9: accept: results: the base has this entry too, so it accepts nothing "
        "here"
    ) in stdout, done
    assert _regions(repo / "reports/r.json")["train"]["base"]["accepted"] == []

    make_repo(repo, {"policies/p.yaml": POLICY + accept.replace("adds the z", "doubles y's")})
    done = _run(repo)
    assert done.returncode == 0, done
    assert "accepted at policies/p.yaml:9: doubles y's metric" in " ".join(done.stdout.split())


def test_a_bad_entry_is_one_line_with_its_file_line_and_fix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"steps.py": BASE_STEPS})
    cases = {
        "    accept:\n      resuts: adds z\n": (
            "policies/p.yaml:9: regions[0].accept: unknown key 'resuts' (did you mean 'results'?)"
        ),
        "    accept:\n      results: ' '\n": "policies/p.yaml:9: regions[0].accept.results: ' ' "
        "is not why the change is meant, in words for the reviewer (not empty)",
        "    accept: {results: [a]}\n": "policies/p.yaml:8: regions[0].accept.results:",
    }
    for entry, error in cases.items():
        make_repo(repo, {"policies/p.yaml": POLICY + entry})
        done = run_gate(repo, "validate", "policies")
        assert done.returncode == 2, done
        assert error in done.stderr, done
        assert len([line for line in done.stderr.splitlines() if "accept" in line]) == 1, done


RECOMPILING_BASE = """
import functools

import jax
import numpy as np


@functools.partial(jax.jit, static_argnums=1)
def scaled(x, n):
    return x * n


def make():
    return (jax.device_put(np.arange(16, dtype=np.float32)),)


def step(x):
    return scaled(x, 2)
"""

# The pull request: a second static value, so jit(scaled) compiles two programs in the first
# call where the base compiled one; the outputs are the base's.
RECOMPILING_HEAD = RECOMPILING_BASE.replace(
    "return scaled(x, 2)", "return scaled(x, 2) + (scaled(x, 3) - scaled(x, 3))"
)

RECOMPILING_POLICY = """\
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - name: train
    step: "steps:step"
    setup: "steps:make"
    cost: {max_work_increase: 10}
"""


def test_programs_beyond_the_bases_end_with_their_edit_and_are_accepted_by_it(
    tmp_path: Path,
) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": RECOMPILING_BASE, "policies/p.yaml": RECOMPILING_POLICY}, "base")
    make_repo(repo, {"steps.py": RECOMPILING_HEAD})
    done = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert done.returncode == 1, done
    message = _message(done, "train: recompiles")
    assert "compiled 2 programs in the first call and warm-up (2 calls) where the base" in message
    assert message.endswith(
        "; to accept it, add `accept: {recompiles: <why this change is meant>}` to region train "
        "at policies/p.yaml:4"
    ), message

    accepting = RECOMPILING_POLICY + "    accept: {recompiles: a second scale once at start}\n"
    make_repo(repo, {"policies/p.yaml": accepting})
    done = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert done.returncode == 0, done
    case = done.testcase("train: recompiles")
    assert case.find("failure") is None, done
    listing = case.findtext("system-out") or ""
    assert "accepted at policies/p.yaml:8: a second scale once at start" in listing, listing
    region = _regions(repo / "r.json")["train"]
    assert [a["kind"] for a in region["base"]["accepted"]] == ["recompiles"], region["base"]
    assert [r["failing"] for r in region["recompiles"]] == [False], region["recompiles"]
