"""ruff and mypy are part of the test suite, so CI cannot skip them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from processes import run

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "gate", "tests", "examples", "benchmarks"],
        ["ruff", "format", "--check", "gate", "tests", "examples", "benchmarks"],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_tool_is_clean(command: list[str]) -> None:
    done = run([BIN / command[0], *command[1:]], cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
