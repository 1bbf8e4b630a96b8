"""``transfer-gate doctor``: print what JAX sees here, and fail when ``--expect`` is not met.

`gate.machine.doctor` finds and words it; this prints it, annotates the step
on GitHub Actions, and picks the exit code (`DoctorExitCode`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from gate.cli.exit_codes import DoctorExitCode
from gate.machine.diagnosis import Platform
from gate.machine.doctor import Diagnosis, collect, doctor_problem, format_diagnosis
from gate.report.github_annotations import in_github_actions, workflow_command


def main_doctor(
    expect: str | None,
    environ: Mapping[str, str] | None = None,
    diagnosis: Diagnosis | None = None,
) -> DoctorExitCode:
    """Print the diagnosis; FAILED when ``expect`` is not met or JAX cannot start."""
    environ = os.environ if environ is None else environ
    diagnosis = collect(environ) if diagnosis is None else diagnosis
    print(format_diagnosis(diagnosis))
    expected = None if expect is None else Platform(expect)
    problem = doctor_problem(diagnosis, expected)
    if problem is None:
        if expected is not None:
            print(f"\nok: JAX runs on the expected {expected.value.upper()}")
        return DoctorExitCode.OK
    sys.stdout.flush()  # the diagnosis first, then the verdict, also when both go to one log
    print(f"\nerror: {problem}", file=sys.stderr)
    if in_github_actions(environ):
        print(workflow_command("error", problem, title="transfer-gate doctor"))
    return DoctorExitCode.FAILED
