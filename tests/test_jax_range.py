"""The JAX range pyproject.toml claims is the range .ci/run tests: its floor is the version the
oldest-JAX run pins, it has no ceiling, and the `jaxhooks` marker that run selects is registered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI = (ROOT / ".ci" / "run").read_text()

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib (Python 3.11+)")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement(name: str) -> str:
    (found,) = [
        dep
        for dep in PYPROJECT["project"]["dependencies"]
        if re.match(rf"{name}\s*(?:[<>=!~;\[]|$)", dep)
    ]
    return str(found)


def oldest_pinned_by_ci() -> str:
    (version,) = re.findall(r"^JAX_OLDEST=(\S+)", CI, flags=re.MULTILINE)
    return str(version)


@pytest.mark.parametrize("name", ["jax", "jaxlib"])
def test_the_floor_is_the_jax_ci_runs_oldest_and_there_is_no_ceiling(name: str) -> None:
    # No ceiling on purpose: a JAX that moves an internal makes the gate refuse that hook
    # ("not checked", an error), so a newer JAX can fail a run but never blind it.
    assert requirement(name) == f"{name}>={oldest_pinned_by_ci()}"
    assert f'"{name}==$JAX_OLDEST"' in CI


def test_ci_runs_the_marked_tests_on_both_ends_after_the_readme_command() -> None:
    lines = CI.splitlines()
    readme_run = next(i for i, line in enumerate(lines) if line.startswith("python3 -m venv .venv"))
    hook_runs = [i for i, line in enumerate(lines) if line.startswith("jax_hook_tests ")]
    assert len(hook_runs) == 2
    assert min(hook_runs) > readme_run
    assert "-m pytest -m jaxhooks" in CI


def test_the_jaxhooks_marker_is_registered() -> None:
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("jaxhooks:") for marker in markers)
