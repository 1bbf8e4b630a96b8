"""What the workflow tests share (tests/test_ci_config.py, tests/test_release.py): the pin
pattern, running a tool or a step's script with a timeout, and showing what it printed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import processes
import pytest

# owner/repo[/path]@<full commit SHA>
PINNED_USES = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+(\.\d+)*\s*$")
TIMEOUT_S = 60


def run(argv: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return processes.run(argv, timeout=TIMEOUT_S, **kwargs)


def shown(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def venv_tool(name: str) -> Path:
    """A console script from this environment's bin directory, or a failed test that says why."""
    scripts = Path(sysconfig.get_path("scripts"))
    path = scripts / name
    if not path.is_file():
        pytest.fail(
            f"{name} is not installed in {scripts}. It is a test dependency: "
            "pip install -e '.[test]' (or run .ci/run).",
            pytrace=False,
        )
    return path


def _job_python(tmp_path: Path) -> Path:
    """A folder whose ``python`` and ``python3`` are this one, which imports this checkout's
    gate: as a job's Python finds it (the gate's checkout, or the gate installed), with nothing
    else of this environment's on PATH. A wrapper, not a link: a venv's Python is found by
    the path it is started as."""
    folder = tmp_path / "job-python"
    folder.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        wrapper.chmod(0o755)
    return folder


def run_step_script(
    script: str, env: Mapping[str, str], tmp_path: Path, *, path_prefix: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """Run a step's script as `shell: bash` does, with the gate on its Python (`_job_python`);
    return the process, $GITHUB_OUTPUT, summary."""
    output = tmp_path / "github_output"
    summary = tmp_path / "step_summary"
    output.write_text("")
    summary.write_text("")
    script_file = tmp_path / "step.sh"
    script_file.write_text(script)
    path = f"{_job_python(tmp_path)}{os.pathsep}{os.environ.get('PATH', '')}"
    if path_prefix is not None:
        path = f"{path_prefix}{os.pathsep}{path}"
    proc = run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", script_file],
        cwd=tmp_path,
        env={
            "PATH": path,
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            **env,
        },
    )
    return proc, output.read_text(), summary.read_text()
