"""The README's set-up commands are the ones CI and users really run."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_starts_with_two_setup_commands() -> None:
    run_gate, run_tests = readme_commands()
    assert "transfer-gate run" in run_gate
    assert "pytest" in run_tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, run_tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert run_tests in ci
