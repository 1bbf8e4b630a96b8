"""``run --base`` when the change renamed a region's step: the base runs its own definition.

The base runs each region under the head's policy, so a renamed step (the policy updated to
the new name) is a name the base's code lacks. The base then runs the step its own copy of
the policy names for that region, and the reports say so. Timing is off: the rename, not the
time, is under test here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

from gate.compare.own_definition import OwnDefinition, own_definition
from gate.policy.load import load_policy

# The gates here run under the accelerator's rule (tests/accelerator_rule.py).
under_the_rule = pytest.mark.usefixtures("one_process_on_the_device")

STEPS = """
import jax
import numpy as np


@jax.jit
def clean(x):
    return x * 2.0


def make():
    return (jax.device_put(np.arange(8, dtype=np.float32)),)
"""

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: clean, step: "pkg.steps:clean", setup: "pkg.steps:make"}
"""


def _renamed(steps: str) -> str:
    return steps.replace("def clean(", "def clean2(")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = init(tmp_path / "repo")
    files = {"pkg/__init__.py": "", "pkg/steps.py": STEPS, "policies/p.yaml": POLICY}
    commit(root, files, "base")
    return root


def _base(repo: Path) -> dict[str, object]:
    document = json.loads((repo / "r.json").read_text())
    [region] = [r for suite in document["suites"] for r in suite["regions"]]
    base = region["base"]
    assert isinstance(base, dict), region
    return base


@under_the_rule
def test_a_renamed_step_is_compared_with_the_bases_own_and_passes(repo: Path) -> None:
    make_repo(
        repo,
        {"pkg/steps.py": _renamed(STEPS), "policies/p.yaml": POLICY.replace(":clean", ":clean2")},
    )
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 0, run
    said = "compared with the base's step pkg.steps:clean (the head renamed it pkg.steps:clean2)"
    assert f"vs base: {said}" in run.stdout, run
    base = _base(repo)
    assert base["status"] == "compared", base
    assert base["renamed"] == [
        {"role": "step", "base": "pkg.steps:clean", "head": "pkg.steps:clean2"}
    ], base
    assert base["results"] == {
        "status": "matches",
        "compared": True,
        "passed": True,
        "detail": base["results"]["detail"],  # type: ignore[index]
        "differences": [],
    }, base
    properties = {p.get("name"): p.get("value") for p in run.junit().iter("property")}
    assert properties["clean.vs_base.renamed.step"] == "pkg.steps:clean -> pkg.steps:clean2"
    # The jitted step's cost is compared under its new name, not as one gone and one new.
    assert "cost vs base" not in run.stdout, run
    results = run.testcase("clean: results vs base")
    assert said in (results.findtext("system-out") or ""), run


@under_the_rule
def test_a_renamed_step_that_computes_something_else_fails_on_results(repo: Path) -> None:
    changed = _renamed(STEPS).replace("return x * 2.0", "return x * 3.0")
    make_repo(
        repo, {"pkg/steps.py": changed, "policies/p.yaml": POLICY.replace(":clean", ":clean2")}
    )
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run
    failure = run.testcase("clean: results vs base").find("failure")
    assert failure is not None, run
    assert _base(repo)["status"] == "compared"
    # Among the findings: the failing results, with what they were compared against.
    finding = next(line for line in run.stdout.splitlines() if "policies/p.yaml:4:" in line)
    assert "results vs base: 1 leaf differs: the output" in finding, run
    assert (
        "(compared with the base's step pkg.steps:clean (the head renamed it pkg.steps:clean2)); "
        "to accept it, add `accept: {results: <why this change is meant>}` to region clean"
    ) in finding, run


@under_the_rule
def test_a_step_the_base_lacks_under_its_own_policy_too_is_an_error_saying_what_to_do(
    repo: Path,
) -> None:
    # A base whose own policy already names the new step: nothing else to run there.
    commit(repo, {"policies/p.yaml": POLICY.replace(":clean", ":clean2")}, "policy first")
    make_repo(repo, {"pkg/steps.py": _renamed(STEPS)})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run
    error = run.testcase("clean: vs base").find("error")
    assert error is not None, run
    message = error.get("message", "")
    for said in (
        "has no attribute 'clean2'",
        "The base cannot import what the head's policy names for this region "
        "(step pkg.steps:clean2, setup pkg.steps:make)",
        "policies/p.yaml names the same step, setup and boundaries for region 'clean'",
        "give the region a new name in the policy: a new region is not compared",
    ):
        assert said in message, message
        assert said in " ".join(run.stdout.split()), run
    assert _base(repo)["renamed"] == []


@under_the_rule
def test_a_base_whose_own_step_fails_too_says_it_was_its_own(repo: Path) -> None:
    broken = STEPS.replace("return x * 2.0", "raise ValueError('the old bug')")
    commit(repo, {"pkg/steps.py": broken}, "a broken base")
    make_repo(
        repo,
        {"pkg/steps.py": _renamed(STEPS), "policies/p.yaml": POLICY.replace(":clean", ":clean2")},
    )
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run
    error = run.testcase("clean: vs base").find("error")
    assert error is not None, run
    message = error.get("message", "")
    assert "the base ran its own step pkg.steps:clean (the head renamed it pkg.steps:clean2)" in (
        message
    ), message
    assert "and that failed too:" in message, message
    assert "the old bug" in message, message
    assert _base(repo)["renamed"] == [
        {"role": "step", "base": "pkg.steps:clean", "head": "pkg.steps:clean2"}
    ]


@pytest.mark.parametrize(
    ("base_region", "reason"),
    [
        ("{name: other, step: 'pkg.steps:clean'}", "has no region 'clean'"),
        ("{name: clean, step: 42}", "region 'clean' has no usable step"),
        (
            "{name: clean, step: 'pkg.steps:clean', boundaries: ['not a ref']}",
            "region 'clean' has no usable boundaries",
        ),
    ],
)
def test_the_bases_definition_is_none_when_it_cannot_be_used(
    tmp_path: Path, base_region: str, reason: str
) -> None:
    head, base = tmp_path / "head", tmp_path / "base"
    make_repo(head, {"policies/p.yaml": POLICY})
    make_repo(base, {"policies/p.yaml": f"version: 1\nregions:\n  - {base_region}\n"})
    policy = load_policy(Path("policies/p.yaml"), head)
    found = own_definition(policy, policy.regions[0], head, base)
    assert isinstance(found, str), found
    assert reason in found, found


def test_the_bases_definition_takes_its_callables_and_keeps_the_heads_settings(
    tmp_path: Path,
) -> None:
    head, base = tmp_path / "head", tmp_path / "base"
    make_repo(head, {"policies/p.yaml": POLICY.replace(":clean", ":clean2")})
    older = "version: 0\nregions:\n  - {name: clean, step: 'pkg.steps:clean', extra: 1}\n"
    make_repo(base, {"policies/p.yaml": older})
    policy = load_policy(Path("policies/p.yaml"), head)
    found = own_definition(policy, policy.regions[0], head, base)
    assert isinstance(found, OwnDefinition), found
    assert found.region.step.spec == "pkg.steps:clean"
    assert found.region.setup is None  # the base's region has none
    assert found.region.timing == policy.regions[0].timing
    assert [(r.role, r.base, r.head) for r in found.renamed] == [
        ("step", "pkg.steps:clean", "pkg.steps:clean2"),
        ("setup", "", "pkg.steps:make"),  # the head's setup, which the base's region lacks
    ]


def test_a_boundary_the_head_adds_is_a_difference_and_the_base_runs_without_it(
    tmp_path: Path,
) -> None:
    # The base cannot import the head's new boundary: it runs its own definition, without it,
    # rather than failing with "names the same step, setup and boundaries".
    head, base = tmp_path / "head", tmp_path / "base"
    added = POLICY.replace(
        'setup: "pkg.steps:make"}', 'setup: "pkg.steps:make", boundaries: ["pkg.io:save"]}'
    )
    make_repo(head, {"policies/p.yaml": added})
    make_repo(base, {"policies/p.yaml": POLICY})
    policy = load_policy(Path("policies/p.yaml"), head)
    found = own_definition(policy, policy.regions[0], head, base)
    assert isinstance(found, OwnDefinition), found
    assert found.region.boundaries == ()
    assert [(r.role, r.base, r.head) for r in found.renamed] == [("boundary", "", "pkg.io:save")]
    from gate.results.comparison import renamed_text

    assert renamed_text(found.renamed) == "definition without the head's new boundary pkg.io:save"
