"""Policy loading, schema walking and callable resolution.

Most cases are files: every policy in tests/example-policies/good/ must load
and import, and every one in bad/ must fail with the text its first line
gives (``# error: ...``), as check-jsonschema's tests/example-files do.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

import gate.policy.load
from gate.levels import GuardLevel, GuardSpec
from gate.policy.load import discover_policy_files, load_policy
from gate.policy.model import (
    CallableRef,
    Checks,
    LeakRule,
    MemoryRule,
    Policy,
    RecompileRule,
    Region,
    TimingAction,
    TimingRule,
)
from gate.policy.problems import PolicyError, Problem
from gate.policy.resolve import (
    ResolveError,
    check_callables,
    import_boundary,
    import_callable,
    python_path,
    running_from,
)
from gate.policy.schema import policy_schema, validate

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "tests" / "example-policies"
PKG = EXAMPLES / "pkg"


def _examples(kind: str) -> list[Path]:
    return sorted(p for p in (EXAMPLES / kind).iterdir() if p.suffix in (".yaml", ".yml"))


GOOD = _examples("good")
BAD = _examples("bad")


def _errors(path: Path, repo_root: Path = REPO) -> str:
    """What a user would read for ``path``: load problems, else callable problems."""
    try:
        policy = load_policy(path, repo_root)
    except PolicyError as exc:
        return str(exc)
    return "\n".join(str(p) for p in check_callables(policy, repo_root))


def _expected(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = re.fullmatch(r"# error: (.+)", first)
    assert match, f"{path.name}: first line must be `# error: <expected text>`"
    return match.group(1)


# --- the example folders ------------------------------------------------------


def test_example_folders_are_not_empty() -> None:
    assert len(GOOD) >= 4
    assert len(BAD) >= 40


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_policy_loads_and_imports(path: Path) -> None:
    policy = load_policy(path, REPO)
    assert policy.regions
    assert check_callables(policy, REPO) == []


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_policy_fails_with_the_documented_error(path: Path) -> None:
    output = _errors(path)
    assert _expected(path) in output, output
    shown = path.relative_to(REPO).as_posix()
    for line in output.splitlines():
        # One line each, located in this file; never a traceback.
        assert re.match(rf"{re.escape(shown)}(:\d+)?: ", line), line
    assert "Traceback" not in output


@pytest.mark.parametrize("path", [*GOOD, *BAD], ids=lambda p: p.name)
def test_pure_python_yaml_reports_the_same_locations(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libyaml is optional: without it the same problems come out at the same places."""
    with_libyaml = _errors(path)
    monkeypatch.setattr(gate.policy.load, "_Loader", yaml.SafeLoader)
    pure = _errors(path)

    def locations(text: str) -> list[str]:
        # file:line and the start of each message; the wording of syntax errors differs.
        return [line.split(": ")[0] + ": " + line.split(": ")[1][:20] for line in text.splitlines()]

    assert locations(pure) == locations(with_libyaml)


# --- the schema walker against jsonschema -------------------------------------


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(policy_schema())


def test_walker_and_jsonschema_agree_on_every_example() -> None:
    validator = jsonschema.Draft202012Validator(policy_schema())
    compared = {"valid": 0, "invalid": 0}
    for path in [*GOOD, *BAD]:
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, ValueError):
            continue  # not plain YAML (tags, syntax, bad dates): no jsonschema verdict
        if data is None:
            continue
        document = yaml.compose(text, Loader=yaml.SafeLoader)
        assert document is not None
        walker_valid = not validate(document)
        assert walker_valid == validator.is_valid(data), path.name
        compared["valid" if walker_valid else "invalid"] += 1
    # Guard against a vacuous pass: both verdicts must really be exercised.
    assert compared["valid"] >= 15
    assert compared["invalid"] >= 15


def test_walker_refuses_keywords_it_does_not_implement() -> None:
    document = yaml.compose("a: 1", Loader=yaml.SafeLoader)
    assert document is not None
    with pytest.raises(ValueError, match="maxLength"):
        validate(document, {"type": "object", "maxLength": 3})


def test_walker_reports_lines_and_paths() -> None:
    text = "version: 1\nregions:\n  - name: a\n    step: m:f\n    warmup: x\n"
    document = yaml.compose(text, Loader=yaml.SafeLoader)
    assert document is not None
    (found,) = validate(document)
    assert (found.line, found.where) == (5, "regions[0].warmup")


# --- what a good policy becomes -----------------------------------------------


def test_full_policy_values() -> None:
    path = EXAMPLES / "good" / "full.yaml"
    policy = load_policy(path, REPO)

    def ref(spec: str, line: int) -> CallableRef:
        module, qualname = spec.split(":")
        return CallableRef(spec, module, qualname, line)

    assert policy == Policy(
        path=Path("tests/example-policies/good/full.yaml"),
        version=1,
        suite="mlp-training",
        python_path=(PKG,),
        platform="cpu",
        env=(("XLA_FLAGS", "--xla_force_host_platform_device_count=2"),),
        regions=(
            Region(
                name="train_step",
                line=15,
                step=ref("gate_examples.steps:train_step", 16),
                setup=ref("gate_examples.steps:make_inputs", 17),
                boundaries=(ref("gate_examples.steps:fetch_metrics", 18),),
                # Directions the region leaves out keep the defaults' levels.
                guard=GuardSpec(GuardLevel.DISALLOW, GuardLevel.LOG, GuardLevel.DISALLOW_EXPLICIT),
                warmup=0,
                guarded_runs=4,
                repeats=50,
                timeout_s=2.5,
                checks=Checks(
                    finite=True,
                    reference=EXAMPLES / "good" / "refs" / "train_step.npz",
                    rtol=1e-3,
                    atol=0.0,
                    custom=ref("gate_examples.steps:check_outputs", 30),
                ),
            ),
            Region(
                name="trainer.step-2",
                line=31,
                step=ref("gate_examples.steps:Trainer.step", 32),
                setup=None,
                boundaries=(),
                guard=GuardSpec.uniform(GuardLevel.LOG_EXPLICIT),
                warmup=1,
                guarded_runs=2,
                repeats=5,
                timeout_s=120.0,
                checks=Checks(False, None, 1e-5, 1e-8, None),
            ),
            Region(
                name="recompiling",
                line=34,
                step=ref("gate_examples.steps:train_step", 35),
                setup=None,
                boundaries=(),
                guard=GuardSpec(GuardLevel.DISALLOW, GuardLevel.LOG, GuardLevel.DISALLOW),
                warmup=1,
                guarded_runs=2,
                repeats=5,
                timeout_s=120.0,
                checks=Checks(False, None, 1e-5, 1e-8, None),
                recompiles=RecompileRule.WARN,
                timing=TimingRule(
                    on_regression=TimingAction.WARN, on_inconclusive=TimingAction.FAIL
                ),
                memory=MemoryRule(leaks=LeakRule.WARN),
            ),
        ),
    )
    # Left out, a region fails on recompiles and on a leak.
    assert {r.recompiles for r in policy.regions[:2]} == {RecompileRule.FAIL}
    assert {r.memory.leaks for r in policy.regions[:2]} == {LeakRule.FAIL}


def test_memory_leaks_inherit_from_defaults_key_by_key(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "version: 1\n"
        "defaults: {memory: {leaks: allow}}\n"
        "regions:\n"
        "  - {name: a, step: m:f}\n"
        "  - {name: b, step: m:f, memory: {leaks: warn}}\n"
        "  - {name: c, step: m:f, memory: {}}\n"
    )
    policy = load_policy(tmp_path / "p.yaml", tmp_path)
    assert [r.memory.leaks for r in policy.regions] == [
        LeakRule.ALLOW,
        LeakRule.WARN,
        LeakRule.ALLOW,
    ]


def test_a_misspelt_required_key_is_said_once_as_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("version: 1\nregions:\n  - {name: a, stpe: m:f}\n")
    said = _errors(tmp_path / "p.yaml", tmp_path)
    assert "regions[0]: unknown key 'stpe' (did you mean 'step'?)" in said, said
    assert "missing required key 'step'" not in said, said
    (tmp_path / "q.yaml").write_text("version: 1\nregions:\n  - {name: a, zzzz: m:f}\n")
    said = _errors(tmp_path / "q.yaml", tmp_path)
    assert "unknown key 'zzzz' (valid keys: " in said, said
    assert "missing required key 'step'" in said, said


def test_minimal_policy_takes_builtin_defaults() -> None:
    policy = load_policy(EXAMPLES / "good" / "minimal.yaml", REPO)
    assert policy.suite == "minimal"  # the file's stem
    (region,) = policy.regions
    assert region.guard == GuardSpec.uniform(GuardLevel.DISALLOW)
    assert (region.warmup, region.guarded_runs, region.repeats) == (2, 3, 20)
    assert region.timeout_s == 600.0
    assert region.checks == Checks(finite=False, reference=None, rtol=1e-5, atol=1e-8, custom=None)
    assert not region.checks.any


def test_plain_yaml_conveniences() -> None:
    anchors = load_policy(EXAMPLES / "good" / "anchors.yml", REPO)
    assert anchors.regions[0].boundaries[0].spec == anchors.regions[1].boundaries[0].spec
    assert anchors.regions[1].boundaries[0].line == 8  # where the anchored list is
    assert anchors.regions[1].checks.finite is True  # YAML 1.1: yes is true
    quoting = load_policy(EXAMPLES / "good" / "quoting.yaml", REPO)
    assert quoting.suite == "2024"
    assert quoting.regions[0].warmup == 3
    assert isinstance(quoting.regions[0].warmup, int)


def test_relative_path_is_taken_from_the_repo_root() -> None:
    policy = load_policy(Path("tests/example-policies/good/minimal.yaml"), REPO)
    assert policy.path == Path("tests/example-policies/good/minimal.yaml")
    assert policy.python_path == (PKG,)


def test_policy_outside_the_repo_is_shown_absolute(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nregions: []\n")
    with pytest.raises(PolicyError) as caught:
        load_policy(policy, REPO)
    assert str(caught.value).startswith(f"{policy.as_posix()}:2: regions: ")


# --- errors -------------------------------------------------------------------


def test_problem_and_error_text() -> None:
    located = Problem("policies/train.yaml", 12, "regions[0]", "unknown key 'gaurd'")
    assert str(located) == "policies/train.yaml:12: regions[0]: unknown key 'gaurd'"
    top = Problem("policies/train.yaml", 3, "", "missing required key 'version'")
    assert str(top) == "policies/train.yaml:3: missing required key 'version'"
    whole_file = Problem("policies/train.yaml", None, "", "cannot read the file")
    assert str(whole_file) == "policies/train.yaml: cannot read the file"
    error = PolicyError([located, top])
    assert error.problems == (located, top)
    assert str(error) == f"{located}\n{top}"


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(EXAMPLES / "bad" / "several-problems.yaml", REPO)
    where = [(p.line, p.where) for p in caught.value.problems]
    assert where == [
        (4, "defaults"),
        (8, "regions[0].repeats"),
        (9, "regions[1]"),
        (9, "regions[1].name"),
    ]


def test_a_python_tag_constructs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    policy = tmp_path / "evil.yaml"
    policy.write_text(
        "version: 1\n"
        f'suite: !!python/object/apply:os.system ["touch {marker}"]\n'
        "regions:\n"
        f'  - !!python/object/apply:os.system ["touch {marker}"]\n'
        f"  - name: !!python/name:os.system\n"
        f'    step: !!python/object/new:subprocess.Popen [["touch", "{marker}"]]\n'
    )
    with pytest.raises(PolicyError) as caught:
        load_policy(policy, tmp_path)
    assert not marker.exists()
    lines = [(p.line, p.where) for p in caught.value.problems]
    assert lines == [
        (2, "suite"),
        (4, "regions[0]"),
        (5, "regions[1].name"),
        (6, "regions[1].step"),
    ]
    assert all("is not allowed" in p.message for p in caught.value.problems)


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    policy = tmp_path / "bomb.yaml"
    policy.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyError, match="expands to more than"):
        load_policy(policy, tmp_path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"version: 1\nsuite: caf\xe9\n", "p.yaml:2: not UTF-8 text (byte 0xe9); save the file"),
        (b"# only a comment\n---\n", "p.yaml:1: policy is empty: start it with `version: 1`"),
        (
            b"version: 1\nsuite: a\x07b\n",
            "p.yaml:2: invalid YAML: control character '\\x07' is not allowed",
        ),
        (b"version: 1\n---\nversion: 1\n", "p.yaml:2: invalid YAML: expected a single document"),
        (b"version: !!int ten\n", "p.yaml:1: version: 'ten' is not a valid !!int value"),
        (b"", "p.yaml:1: policy is empty"),
    ],
)
def test_unreadable_yaml(tmp_path: Path, content: bytes, expected: str) -> None:
    (tmp_path / "p.yaml").write_bytes(content)
    with pytest.raises(PolicyError) as caught:
        load_policy(tmp_path / "p.yaml", tmp_path)
    assert expected in str(caught.value)


@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)])
def test_deep_nesting_is_an_error_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: type
) -> None:
    monkeypatch.setattr(gate.policy.load, "_Loader", loader)
    (tmp_path / "p.yaml").write_text("[" * 5000)
    with pytest.raises(PolicyError) as caught:
        load_policy(tmp_path / "p.yaml", tmp_path)
    (problem,) = caught.value.problems
    assert problem.message.startswith("invalid YAML: ")
    assert problem.message.endswith("; flatten the policy")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"^nope\.yaml: cannot read the file \(No such file"):
        load_policy(Path("nope.yaml"), tmp_path)


# --- discovery ----------------------------------------------------------------


def test_discover_sorts_dedups_and_searches_subfolders(tmp_path: Path) -> None:
    # Teams keep policies in subfolders; one left out would be a silent pass.
    folder = tmp_path / "policies"
    (folder / "nested").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    for name in ("b.yaml", "a.yml", "c.yaml", "notes.txt", "nested/d.yaml", ".hidden/e.yaml"):
        (folder / name).write_text("version: 1\n")
    found = discover_policy_files(["policies", "policies/c.yaml", "./policies/"], tmp_path)
    assert found == [
        folder / "a.yml",
        folder / "b.yaml",
        folder / "c.yaml",
        folder / "nested" / "d.yaml",
    ]


def test_discover_takes_a_file_as_given(tmp_path: Path) -> None:
    (tmp_path / "gate.policy.load").write_text("version: 1\n")
    assert discover_policy_files([str(tmp_path / "gate.policy.load")], REPO) == [
        tmp_path / "gate.policy.load"
    ]


def test_discover_reports_every_bad_path(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "README.md").write_text("")
    with pytest.raises(PolicyError) as caught:
        discover_policy_files(["policies", "missing.yaml"], tmp_path)
    assert str(caught.value).splitlines() == [
        "policies: no policy files (*.yaml, *.yml) in this folder;"
        " add one (see README) or pass a file",
        "missing.yaml: no such file or folder; pass a policy file or a folder",
    ]


# --- resolving callables ------------------------------------------------------


def test_python_path_puts_folders_first_and_restores_sys_path(tmp_path: Path) -> None:
    before = list(sys.path)
    same_list = sys.path
    with python_path([PKG], repo_root=tmp_path):
        assert sys.path[:2] == [str(PKG), str(tmp_path)]
    assert sys.path == before

    def mutate_then_fail() -> None:
        with python_path([PKG], repo_root=tmp_path):
            sys.path.append("/somewhere/else")
            sys.path.remove(str(PKG))
            raise RuntimeError

    with pytest.raises(RuntimeError):
        mutate_then_fail()
    assert sys.path == before
    assert sys.path is same_list  # restored in place: others may hold the list


def test_running_from_a_tree_puts_the_path_and_the_working_directory_back(
    tmp_path: Path,
) -> None:
    """A worker's request runs from its tree: its python_path, then its root, first on
    `sys.path`, its root the working directory; both put back, whatever the code did."""
    before, cwd = list(sys.path), os.getcwd()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with running_from(tmp_path, [PKG]):
        assert sys.path[:2] == [str(PKG), str(tmp_path)]
        assert Path.cwd() == tmp_path
        os.chdir(elsewhere)  # the code under test moves
    assert (sys.path, os.getcwd()) == (before, cwd)


def test_import_callable_and_boundary() -> None:
    ref = CallableRef("gate_examples.steps:Trainer.step", "gate_examples.steps", "Trainer.step", 1)
    assert import_callable(ref, [PKG], REPO).__qualname__ == "Trainer.step"
    fetch = CallableRef(
        "gate_examples.steps:fetch_metrics", "gate_examples.steps", "fetch_metrics", 1
    )
    assert import_boundary(fetch, [PKG], REPO).__name__ == "fetch_metrics"
    partial = CallableRef(
        "gate_examples.steps:partial_fetch", "gate_examples.steps", "partial_fetch", 1
    )
    with pytest.raises(ResolveError, match=r"is a functools\.partial, not a plain Python function"):
        import_boundary(partial, [PKG], REPO)
    lambda_ = CallableRef(
        "gate_examples.signatures:fetch_lambda", "gate_examples.signatures", "fetch_lambda", 1
    )
    with pytest.raises(ResolveError, match=r"is a lambda \(at .*signatures\.py:\d+\), not a named"):
        import_boundary(lambda_, [PKG], REPO)


def _write_policy(folder: Path, *steps: str) -> Path:
    regions = "".join(f"  - name: r{i}\n    step: {s}\n" for i, s in enumerate(steps))
    policy = folder / "p.yaml"
    policy.write_text(f"version: 1\npython_path: [src]\nregions:\n{regions}")
    return policy


def test_user_module_errors_point_at_the_user_line(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "tg_syntax.py").write_text("def f():\n    return (\n")
    (src / "tg_exits.py").write_text("import sys\n\nsys.exit('no GPU here')\n")
    (src / "tg_stdlib.py").write_text("import json\n\nCONFIG = json.loads('{bad')\n")
    policy = load_policy(
        _write_policy(tmp_path, "tg_syntax:f", "tg_exits:f", "tg_stdlib:f", "tg_exits:g"),
        tmp_path,
    )
    messages = [str(p) for p in check_callables(policy, tmp_path)]
    assert messages[0].startswith("p.yaml:5: regions[0].step: importing 'tg_syntax' raised")
    assert messages[0].endswith("(at src/tg_syntax.py:2); fix the module")
    assert messages[1] == (
        "p.yaml:7: regions[1].step: importing 'tg_exits' raised SystemExit: no GPU here"
        " (at src/tg_exits.py:3); fix the module"
    )
    # The stdlib frame where json raised is not the user's line; line 3 is.
    assert "raised JSONDecodeError:" in messages[2]
    assert messages[2].endswith("(at src/tg_stdlib.py:3); fix the module")
    # A module that failed once is not run again; its next reference gets the same problem.
    assert messages[3] == messages[1].replace("7: regions[1]", "11: regions[3]")
    assert all("\n" not in m for m in messages)


def test_sys_path_is_restored_after_check_callables(tmp_path: Path) -> None:
    before = list(sys.path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "tg_path_mutator.py").write_text(
        "import sys\nsys.path.insert(0, '/nowhere')\n\ndef f():\n    pass\n"
    )
    policy = load_policy(_write_policy(tmp_path, "tg_path_mutator:f"), tmp_path)
    assert check_callables(policy, tmp_path) == []
    assert sys.path == before
