"""The container's install steps, tested where Docker cannot run: build and install the
package into a fresh virtual environment, then use it the way the image does.

The Dockerfile runs `pip install .` and `transfer-gate --help`; a wheel that forgot its
package data (the policy schema) or its console script would pass every other test,
because they run from the source tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import processes

ROOT = Path(__file__).resolve().parent.parent


def run(
    *command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = processes.run(command, cwd=cwd, env=env, timeout=240)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_wheel_installs_into_a_fresh_environment_and_runs(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT)
    (wheel,) = wheels.glob("jax_transfer_gate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gate/policy/policy.schema.json" in names
    assert "gate/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "policies/"))]

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)

    # The dependencies come from the test environment: installing jax again from
    # the network would only test PyPI.
    deps = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": deps, "JAX_PLATFORMS": "cpu"}
    run(env_dir / "bin" / "transfer-gate", "--help", env=env)
    validated = run(env_dir / "bin" / "transfer-gate", "validate", cwd=ROOT, env=env)
    assert "regions: valid" in validated.stdout
    where = run(python, "-c", "import gate; print(gate.__file__)", cwd=tmp_path, env=env)
    assert str(env_dir) in where.stdout  # the installed copy, not the source tree
