"""A step's required parameters read from its source (`gate.policy.step_source`), never imported.

`transfer-gate init` uses it; tests/test_init_schema.py runs it through the CLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import make_repo

from gate.policy.step_source import StepSource, module_file, read_step

SOURCE = """
import functools
from functools import partial

import jax

raise RuntimeError("importing this module would start a TPU backend")


@jax.jit
def jitted(params, x, y, lr):
    return params


@partial(jax.jit, static_argnums=(3,))
def partial_jitted(params, x, /, y, n_steps, *, lr=0.1, seed):
    return params


def with_defaults(x=1.0, *args, scale=2.0, **kwargs):
    return x


async def later(batch):
    return batch


class Trainer:
    def step(self, batch):
        return batch

    @staticmethod
    def plain(batch, lr=0.1):
        return batch


def _impl(x):
    return x


bound_by_hand = jax.jit(_impl)


def redefined(a, b):
    return a


def redefined(a):
    return a


def rebound(x):
    return x


rebound = functools.lru_cache(rebound)
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"pkg/__init__.py": "", "pkg/train.py": SOURCE, "solo.py": ""})


@pytest.mark.parametrize(
    ("qualname", "required"),
    [
        ("jitted", ("params", "x", "y", "lr")),
        ("partial_jitted", ("params", "x", "y", "n_steps", "seed")),
        ("with_defaults", ()),
        ("later", ("batch",)),
        ("Trainer.step", ("self", "batch")),  # the policy names the function, so self too
        ("Trainer.plain", ("batch",)),
        ("redefined", ("a",)),  # the last def is the one Python leaves bound
    ],
)
def test_the_defs_parameters_without_a_default(
    root: Path, qualname: str, required: tuple[str, ...]
) -> None:
    found = read_step("pkg.train", qualname, [root])
    assert isinstance(found, StepSource), found
    assert found.required == required
    assert found.path == root / "pkg" / "train.py"
    lines = found.path.read_text(encoding="utf-8").splitlines()
    name = qualname.rpartition(".")[2]
    last_def = max(i for i, text in enumerate(lines) if f"def {name}(" in text)
    assert found.line == last_def + 1


@pytest.mark.parametrize(
    ("module", "qualname", "why"),
    [
        ("pkg.train", "bound_by_hand", "bound_by_hand is not a def at the top level of"),
        ("pkg.train", "rebound", "rebound is not a def at the top level of"),
        ("pkg.train", "missing", "missing is not a def at the top level of"),
        ("pkg.train", "Trainer", "Trainer is not a def at the top level of"),
        ("pkg.train", "jitted.inner", "jitted is not a class at the top level of"),
        ("pkg.nowhere", "step", "no pkg/nowhere.py under "),
    ],
)
def test_what_the_source_cannot_say_is_a_reason(
    root: Path, module: str, qualname: str, why: str
) -> None:
    found = read_step(module, qualname, [root])
    assert isinstance(found, str)
    assert why in found


def test_a_file_that_does_not_parse_is_a_reason(root: Path) -> None:
    (root / "broken.py").write_text("def step(x:\n", encoding="utf-8")
    assert (
        read_step("broken", "step", [root])
        == f"{root / 'broken.py'} could not be read: SyntaxError"
    )


def test_a_package_is_its_init(root: Path) -> None:
    assert module_file("pkg", [root]) == root / "pkg" / "__init__.py"
    assert module_file("solo", [root / "elsewhere", root]) == root / "solo.py"
    assert module_file("pkg.train", [root / "elsewhere"]) is None
