"""The README's set-up commands are the ones CI and users really run."""

from __future__ import annotations

import re
from pathlib import Path

from cli_helpers import run_gate

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


def test_the_readmes_failing_example_is_what_the_gate_prints(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    intro = "`transfer-gate run\nexamples/policies/leaky.yaml` reads"
    block = text.split(intro, 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    run = run_gate(
        ROOT, "run", "examples/policies/leaky.yaml", "--junit", str(tmp_path / "leaky.xml"),
        report=str(tmp_path / "leaky.xml"),
    )  # fmt: skip
    assert run.returncode == 1, run
    printed = "".join(
        line + "\n" for line in run.stdout.splitlines() if not line.startswith("report:")
    )

    def steady(output: str) -> str:
        # The platform line names this machine's JAX; the median is a measurement.
        output = re.sub(r"^platform: .*$", "platform: …", output, flags=re.MULTILINE)
        return re.sub(r"median \d+(\.\d+)? [µm]?s", "median …", output)

    assert steady(printed) == steady(block), run
