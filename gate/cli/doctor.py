"""``transfer-gate doctor``: print what JAX sees here; fail on a missing accelerator or JAX version.

It fails when ``--expect`` is not met, when JAX cannot start, and when jax, jaxlib and the GPU
plugins disagree with each other or with a ``--requirements`` file.

`gate.machine.doctor` finds and words it; this prints it, annotates the step
on GitHub Actions, and picks the exit code (`DoctorExitCode`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gate.cli.exit_codes import DoctorExitCode
from gate.isolation.environment import prepare_environment
from gate.machine.diagnosis import Platform
from gate.machine.doctor import Diagnosis, collect, doctor_problem, format_diagnosis
from gate.machine.requirements import read_requirements
from gate.machine.version_check import requirements_text, version_problems
from gate.printable import say, say_command
from gate.report.github_annotations import in_github_actions, workflow_command


def main_doctor(
    expect: str | None,
    environ: Mapping[str, str] | None = None,
    diagnosis: Diagnosis | None = None,
    requirements: Sequence[str] = (),
) -> DoctorExitCode:
    """Print the diagnosis; FAILED when ``expect`` is not met, JAX cannot start, or a version
    disagrees. A ``requirements`` file that cannot be read raises `RequirementsError` first."""
    environ = os.environ if environ is None else environ
    # Read before JAX starts: a mistyped path is a usage error, not a diagnosis.
    stated = tuple((path, read_requirements(Path(path))) for path in requirements)
    if diagnosis is None:
        gate_environ = dict(environ)
        prepare_environment(gate_environ)  # what the gate's own workers run with
        diagnosis = collect(environ, gate_environ)
    expected = None if expect is None else Platform(expect)
    say(format_diagnosis(diagnosis, expected))
    if stated:
        say()
        say(requirements_text(diagnosis, stated))
    platform_problem = doctor_problem(diagnosis, expected)
    problems = [platform_problem] if platform_problem is not None else []
    problems += version_problems(diagnosis, tuple(r for _, found in stated for r in found))
    if platform_problem is None and expected is not None:
        say(f"\nok: JAX runs on the expected {expected.value.upper()}")
    if not problems:
        return DoctorExitCode.OK
    sys.stdout.flush()  # the diagnosis first, then the verdict, also when both go to one log
    say("", sys.stderr)
    for problem in problems:
        say(f"error: {problem}", sys.stderr)
        if in_github_actions(environ):
            say_command(workflow_command("error", problem, title="transfer-gate doctor"))
    return DoctorExitCode.FAILED
