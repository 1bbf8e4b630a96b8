"""The example of a user's image built FROM the gate's (docs/examples/Dockerfile.user).

No Docker engine here, so its parts are checked one by one: hadolint reads it
(tests/test_ci_config.py), the constraints it takes from ``pip freeze`` are JAX's
distributions and nothing else (run on a made-up freeze and on this environment's real one),
it puts the gate's user back, and the doctor check it ends with passes on its requirements.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import processes
from cli_helpers import run_gate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "Dockerfile.user"
TEXT = EXAMPLE.read_text(encoding="utf-8")
(FILTER,) = re.findall(r"pip freeze \| (grep -iE '[^']+')", TEXT)


def constraints_from(freeze: str, tmp_path: Path) -> list[str]:
    """What the example's filter keeps of ``pip freeze`` output, run in bash as the image does."""
    source = tmp_path / "freeze.txt"
    source.write_text(freeze)
    done = processes.run(
        ["bash", "-o", "pipefail", "-c", f'cat "$0" | {FILTER}', str(source)], timeout=30
    )
    assert done.returncode in (0, 1), done  # grep: 1 when nothing matched
    return done.stdout.splitlines()


def test_the_constraints_are_jax_s_distributions(tmp_path: Path) -> None:
    freeze = (
        "flax==0.12.1\njax==0.10.2\njax-cuda12-pjrt==0.10.2\njax_cuda12_plugin==0.10.2\n"
        "jaxlib==0.10.2\njaxtyping==0.3.11\n-e git+https://example.org/x@abc#egg=x\n"
        "JAX-CUDA13-Plugin==0.10.2\n"
    )
    assert constraints_from(freeze, tmp_path) == [
        "jax==0.10.2",
        "jax-cuda12-pjrt==0.10.2",
        "jax_cuda12_plugin==0.10.2",
        "jaxlib==0.10.2",
        "JAX-CUDA13-Plugin==0.10.2",
    ]


def test_the_constraints_from_this_environment_pin_its_jax(tmp_path: Path) -> None:
    done = processes.run([sys.executable, "-m", "pip", "freeze"], timeout=120)
    assert done.returncode == 0, done
    kept = constraints_from(done.stdout, tmp_path)
    for name in ("jax", "jaxlib"):
        assert f"{name}=={importlib.metadata.version(name)}" in kept, kept


def test_it_installs_against_the_constraints_and_puts_the_gate_s_user_back() -> None:
    assert "-c /tmp/jax-constraints.txt" in TEXT
    assert "transfer-gate doctor --requirements /tmp/model-requirements.txt" in TEXT
    gate_user = re.findall(r"^USER .*$", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE)
    assert re.findall(r"^USER .*$", TEXT, flags=re.MULTILINE)[-1] == gate_user[-1]
    (default,) = re.findall(r"^ARG GATE_IMAGE=(\S+)$", TEXT, flags=re.MULTILINE)
    assert default.endswith("@sha256:<digest>")  # a placeholder pinned by digest, never a tag


def test_doctor_passes_on_the_example_s_requirements(tmp_path: Path) -> None:
    requirements = ROOT / "docs" / "examples" / "requirements.txt"
    run = run_gate(tmp_path, "doctor", "--requirements", str(requirements))
    assert run.returncode == 0, run
    assert f"jax>=0.10.1: jax {importlib.metadata.version('jax')}, met" in run.stdout


def test_the_page_quotes_the_example_as_it_is() -> None:
    page = (ROOT / "docs" / "dependencies.md").read_text(encoding="utf-8")
    quoted = page.split("```dockerfile\n", 1)[1].split("```", 1)[0]
    instructions = [line for line in TEXT.splitlines() if line and not line.startswith("#")]
    assert quoted.splitlines() == instructions
