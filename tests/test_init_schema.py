"""``transfer-gate init`` and ``transfer-gate schema``, through the real CLI on throwaway repos.

The schema is what editors complete and check policies with, so it must hold every key the
loader reads, each with a description (read from `gate/policy/load.py` itself, so a key added
to the loader and not to the schema fails here).
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cli_helpers import ROOT, make_repo, run_gate

from gate.levels import Direction
from gate.policy.load import BUILTIN_DEFAULTS

SCHEMA_FILE = ROOT / "gate" / "policy" / "policy.schema.json"
MODELINE = re.compile(r"# yaml-language-server: \$schema=(\S+)\n")

# A step module that imports nothing: validate imports it, and jax adds nothing to that here.
STEP_MODULE = {
    "models/tiny.py": """
        def train_step(x):
            return x

        def make_inputs():
            return (1.0,)

        def fetch_metrics(x):
            return x
    """,
}
STEP = ["models.tiny:train_step", "--setup", "models.tiny:make_inputs"]


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


def _properties(schema: Any, where: str = "") -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(where, key, its schema) for every property anywhere in ``schema``."""
    if isinstance(schema, Mapping):
        for key, sub in schema.get("properties", {}).items():
            yield where, key, sub
        for key, sub in schema.items():
            yield from _properties(sub, f"{where}/{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            yield from _properties(sub, f"{where}/{i}")


def _described(schema: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    if "description" in schema:
        return True
    ref = schema.get("$ref")
    return ref is not None and _described(root["$defs"][ref.removeprefix("#/$defs/")], root)


def _keys_the_loader_reads() -> set[str]:
    """Every key `gate/policy/load.py` reads: ``value(m, KEY, ...)``, ``m.get(KEY)``,
    ``m[KEY]`` and ``KEY in m``, plus `BUILTIN_DEFAULTS` and the guard's directions."""
    tree = ast.parse((ROOT / "gate" / "policy" / "load.py").read_text(encoding="utf-8"))
    keys: set[str] = set(BUILTIN_DEFAULTS) | {d.value for d in Direction}

    def text(node: ast.AST) -> str | None:
        return (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        )

    for node in ast.walk(tree):
        found: list[str | None] = []
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "value" and len(node.args) >= 2:
                found.append(text(node.args[1]))
            elif isinstance(func, ast.Attribute) and func.attr == "get" and node.args:
                found.append(text(node.args[0]))
        elif isinstance(node, ast.Subscript):
            found.append(text(node.slice))
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In):
            found.append(text(node.left))
        keys.update(k for k in found if k is not None)
    return keys


# --- schema -------------------------------------------------------------------------------


def test_schema_prints_the_shipped_schema_a_valid_draft_2020_12_schema(tmp_path: Path) -> None:
    done = run_gate(tmp_path, "schema")
    assert done.returncode == 0, done
    printed = json.loads(done.stdout)
    assert printed == _schema()
    jsonschema.Draft202012Validator.check_schema(printed)
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert printed["$id"].endswith("/gate/policy/policy.schema.json")


def test_the_schema_id_names_the_repository_that_pyproject_names() -> None:
    # Replacing OWNER in pyproject.toml before the first release must not leave the schema's
    # address (which every `init`-written policy's modeline carries) pointing at OWNER.
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    repository = urls["Source"].removeprefix("https://github.com/")
    assert _schema()["$id"] == (
        f"https://raw.githubusercontent.com/{repository}/main/gate/policy/policy.schema.json"
    )


def test_every_property_in_the_schema_has_a_description() -> None:
    schema = _schema()
    undescribed = [f"{w}: {k}" for w, k, sub in _properties(schema) if not _described(sub, schema)]
    assert not undescribed, "properties without a description (editors show it on hover)"


def test_every_key_the_loader_reads_is_in_the_schema() -> None:
    in_schema = {key for _, key, _ in _properties(_schema())}
    read = _keys_the_loader_reads()
    assert {"step", "max_slowdown", "rtol", "python_path"} <= read  # the walk finds them
    assert read - in_schema == set()


def test_schema_write_puts_the_policy_schema_where_the_modeline_points(tmp_path: Path) -> None:
    done = run_gate(tmp_path, "schema", "--write", ".transfer-gate/policy.schema.json")
    assert done.returncode == 0, done
    assert done.stdout == "wrote the policy schema to .transfer-gate/policy.schema.json\n"
    written = json.loads((tmp_path / ".transfer-gate" / "policy.schema.json").read_text())
    assert written == _schema()


@pytest.mark.parametrize("document", ["baseline", "report", "history"])
def test_the_baseline_and_report_schemas_are_printed_and_published(
    tmp_path: Path, document: str
) -> None:
    done = run_gate(tmp_path, "schema", document)
    assert done.returncode == 0, done
    printed = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(printed)
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # docs/reports.md links the copies in docs/schemas/: they are what the gate prints.
    published = ROOT / "docs" / "schemas" / f"{document}.schema.json"
    assert published.read_text(encoding="utf-8") == done.stdout, (
        f"regenerate it: transfer-gate schema {document} --write {published.relative_to(ROOT)}"
    )


# --- init ---------------------------------------------------------------------------------


def test_init_writes_a_policy_that_validate_accepts(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, STEP_MODULE)
    done = run_gate(repo, "init", *STEP, "--boundary", "models.tiny:fetch_metrics")
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[0] == (
        "wrote policies/tiny.yaml; check it with `transfer-gate validate policies/tiny.yaml`"
    )
    text = (repo / "policies" / "tiny.yaml").read_text(encoding="utf-8")
    modeline = MODELINE.match(text)
    assert modeline is not None, text
    # A file in the repository, written with the policy: it resolves offline, no OWNER in it.
    assert modeline.group(1) == "../.transfer-gate/policy.schema.json"
    assert json.loads((repo / ".transfer-gate" / "policy.schema.json").read_text()) == _schema()
    assert done.stdout.splitlines()[1].startswith(
        "wrote .transfer-gate/policy.schema.json, the schema its first line names for editors"
    )
    assert "      - models.tiny:fetch_metrics\n" in text
    checked = run_gate(repo, "validate", "policies/tiny.yaml")
    assert checked.returncode == 0, checked
    assert "policies/tiny.yaml: ok (1 region)" in checked.stdout


def test_what_the_starter_leaves_commented_out_validates_too(tmp_path: Path) -> None:
    # The commented keys are suggestions a user will uncomment; each must be valid as written.
    repo = make_repo(tmp_path, STEP_MODULE)
    assert run_gate(repo, "init", *STEP, "--output", "p.yaml").returncode == 0
    path = repo / "p.yaml"
    lines = path.read_text(encoding="utf-8").splitlines()
    uncommented = [
        re.sub(r"^(\s*)# ", r"\1", line)
        if re.match(r"^\s*# +\w+:", line) and not re.search(r"MODULE|NAME|python_path", line)
        else line
        for line in lines
    ]
    assert uncommented != lines
    path.write_text("\n".join(uncommented) + "\n", encoding="utf-8")
    checked = run_gate(repo, "validate", "p.yaml")
    assert checked.returncode == 0, f"{checked}\n{path.read_text()}"


def test_init_without_setup_or_boundaries_validates(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"solo.py": "def step():\n    return 1.0\n"})
    (repo / ".transfer-gate").mkdir()
    (repo / ".transfer-gate" / "policy.schema.json").write_text("{}  # mine\n")
    done = run_gate(repo, "init", "solo:step", "--output", "gate-policies/nested/solo.yml")
    assert done.returncode == 0, done
    assert "wrote gate-policies/nested/solo.yml;" in done.stdout
    text = (repo / "gate-policies" / "nested" / "solo.yml").read_text(encoding="utf-8")
    assert text.startswith(
        "# yaml-language-server: $schema=../../.transfer-gate/policy.schema.json"
    )
    # A schema file already there is the repository's: init leaves it alone.
    assert (repo / ".transfer-gate" / "policy.schema.json").read_text() == "{}  # mine\n"
    assert ".transfer-gate" not in done.stdout
    assert run_gate(repo, "validate", "gate-policies").returncode == 0


TRAIN_MODULE = """
    from functools import partial

    import jax


    @partial(jax.jit, static_argnames=("lr",))
    def train_step(params, x, y, lr=0.1):
        return params


    def evaluate(params, batch):
        return params
"""


def test_init_writes_a_setup_stub_for_a_step_that_takes_arguments(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"models/train.py": TRAIN_MODULE})
    done = run_gate(repo, "init", "models.train:train_step")
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[1] == (
        "train_step (models/train.py:7) takes params, x, y: write "
        "models.train:train_step_inputs, a function that returns them (a tuple in that order, "
        "or a dict by name), or point setup: at one you have; validate fails until it imports"
    )
    text = (repo / "policies" / "train.yaml").read_text(encoding="utf-8")
    stub = re.search(
        r"^    setup: models\.train:train_step_inputs +# to write: returns \(params, x, y\)$",
        text,
        re.MULTILINE,
    )
    assert stub is not None, text
    line = text[: stub.start()].count("\n") + 1
    # Until the stub is written, validate names its line...
    checked = run_gate(repo, "validate")
    assert checked.returncode == 2, checked
    assert f"policies/train.yaml:{line}: regions[0].setup: " in checked.stderr, checked
    # ... and once it is, the region can be called.
    setup = "\n\ndef train_step_inputs():\n    return {}, 1.0, 2.0\n"
    make_repo(repo, {"models/train.py": textwrap.dedent(TRAIN_MODULE) + setup})
    assert run_gate(repo, "validate").returncode == 0


def test_init_reads_the_step_without_importing_its_module(tmp_path: Path) -> None:
    # A module that takes the TPU when imported (`jax.devices("tpu")` at import) must not be
    # imported by init, which runs in the gate's own process: read, never run.
    raising = TRAIN_MODULE.replace(
        "    import jax\n",
        "    import jax\n\n    raise RuntimeError('init imported the step module')\n",
    )
    assert raising != TRAIN_MODULE
    repo = make_repo(tmp_path, {"models/train.py": raising})
    done = run_gate(repo, "init", "models.train:evaluate", "--output", "p.yaml")
    assert done.returncode == 0, done
    assert "RuntimeError" not in done.stdout + done.stderr, done
    text = (repo / "p.yaml").read_text(encoding="utf-8")
    assert re.search(
        r"^    setup: models\.train:evaluate_inputs +# to write: returns \(params, batch\)$",
        text,
        re.MULTILINE,
    ), text


def test_init_falls_back_where_the_source_does_not_say(tmp_path: Path) -> None:
    module = "import jax\n\n\ndef _step(x):\n    return x\n\n\nstep = jax.jit(_step)\n"
    repo = make_repo(tmp_path, {"bound.py": module})
    done = run_gate(repo, "init", "bound:step", "--output", "p.yaml")
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[1] == (
        "bound:step's parameters were not read (step is not a def at the top level of "
        f"{repo / 'bound.py'}): if it takes any, give the region a setup that returns them; "
        "validate will say"
    )
    text = (repo / "p.yaml").read_text(encoding="utf-8")
    assert "    # setup: MODULE:FUNCTION" in text, text
    # validate imports the step and says what the source could not.
    checked = run_gate(repo, "validate", "p.yaml")
    assert checked.returncode == 2, checked
    assert "regions[0].step: step bound:step takes argument 'x' and the region has no setup" in (
        checked.stderr
    ), checked


def test_init_never_overwrites_a_policy(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {**STEP_MODULE, "policies/tiny.yaml": "version: 1  # mine\n"})
    done = run_gate(repo, "init", *STEP)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "error: policies/tiny.yaml already exists; init never overwrites a policy: "
        "name another file with --output FILE"
    ]
    assert (repo / "policies" / "tiny.yaml").read_text() == "version: 1  # mine\n"


@pytest.mark.parametrize(
    ("args", "option", "spelling"),
    [
        (["models.tiny"], "MODULE:STEP", "models.tiny"),
        (["models/tiny.py:train_step"], "MODULE:STEP", "models/tiny.py:train_step"),
        (["models.tiny:train_step", "--setup", "make_inputs"], "--setup", "make_inputs"),
        (["models.tiny:train_step", "--boundary", "m:f()"], "--boundary", "m:f()"),
    ],
)
def test_a_callable_not_spelt_module_qualname_is_one_usage_line(
    tmp_path: Path, args: list[str], option: str, spelling: str
) -> None:
    done = run_gate(tmp_path, "init", *args)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: init {option}: {spelling!r} is not MODULE:QUALNAME; "
        "spell it like examples.mlp:train_step"
    ]
    assert list(tmp_path.iterdir()) == []


def test_init_wants_a_yaml_file(tmp_path: Path) -> None:
    done = run_gate(tmp_path, "init", "m:step", "--output", "policies/m.json")
    assert done.returncode == 2, done
    assert len(done.stderr.splitlines()) == 1
    assert "--output policies/m.json: name a .yaml or .yml file" in done.stderr
    assert not (tmp_path / "policies").exists()


# --- the shipped policies -----------------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    sorted(
        p.relative_to(ROOT).as_posix()
        for p in ROOT.glob("*/**/*.yaml")
        if p.parts[len(ROOT.parts)] in ("policies", "examples")
    ),
)
def test_shipped_policies_point_editors_at_the_schema(policy: str) -> None:
    text = (ROOT / policy).read_text(encoding="utf-8")
    modeline = MODELINE.match(text)
    assert modeline is not None, f"{policy}: no schema modeline on its first line"
    # Relative: the checkout's own schema, offline and always the one this tree validates with.
    assert ((ROOT / policy).parent / modeline.group(1)).resolve() == SCHEMA_FILE
