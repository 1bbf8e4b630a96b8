"""The one check to require: whether every gate job that should have run passed.

On a fork's pull request with forks off, the CPU job's verdict is the verdict (the accelerator
job is skipped and says so); the verdict fails, saying why, otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gate.ci.step import add_summary, env, error, tell


@dataclass(frozen=True)
class Jobs:
    """The gate jobs' results as the verdict job reads them (its step's ``env:``)."""

    inputs_result: str = ""
    inputs_error: str = ""
    cpu: bool = False
    cpu_result: str = ""
    cpu_error: str = ""
    accelerator: str = ""  # gpu, tpu, or '' without an accelerator job
    accelerator_result: str = ""
    accelerator_error: str = ""
    fork_pr: bool = False
    allow_forks: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Jobs:
        def read(name: str) -> str:
            return env(name, environ)

        return cls(
            inputs_result=read("INPUTS_RESULT"),
            inputs_error=read("INPUTS_ERROR"),
            cpu=read("CPU") == "true",
            cpu_result=read("CPU_RESULT"),
            cpu_error=read("CPU_ERROR"),
            accelerator=read("ACCELERATOR"),
            accelerator_result=read("ACCELERATOR_RESULT"),
            accelerator_error=read("ACCELERATOR_ERROR"),
            fork_pr=read("FORK_PR") == "true",
            allow_forks=read("ALLOW_FORKS") == "true",
        )


def verdict(jobs: Jobs) -> tuple[list[str], list[str]]:
    """Why the gate failed (empty: it passed), and what the summary says when it passed."""
    why: list[str] = []
    notes: list[str] = []
    if jobs.inputs_result != "success":
        why.append(
            f"The job 'transfer-gate inputs' ended with result '{jobs.inputs_result}': "
            f"{jobs.inputs_error or 'see its log.'}"
        )
    if not jobs.cpu and not jobs.accelerator:
        why.append(
            "Nothing was judged: the input 'cpu' is false and 'accelerator' is empty; set "
            "cpu: true, or accelerator: gpu or tpu."
        )
    if jobs.cpu:
        if jobs.cpu_result == "success":
            notes.append("The CPU job ran and passed.")
        elif jobs.cpu_result == "skipped" and jobs.inputs_result != "success":
            pass  # it waits for the inputs job: the inputs' error is the one reason
        else:
            seen = "see the job 'transfer-gate CPU' and the check 'transfer-gate report (CPU)'."
            why.append(
                f"The CPU job ended with result '{jobs.cpu_result}': {jobs.cpu_error or seen}"
            )
    if jobs.accelerator:
        _accelerator(jobs, why, notes)
    return why, notes


def _accelerator(jobs: Jobs, why: list[str], notes: list[str]) -> None:
    kind = jobs.accelerator.upper()
    result = jobs.accelerator_result
    inputs_passed = jobs.inputs_result == "success"
    if result == "success":
        notes.append(f"The {kind} job ran and passed.")
    elif result == "skipped" and inputs_passed and jobs.fork_pr and not jobs.allow_forks:
        if jobs.cpu:
            notes.append(
                f"The {kind} job did not run: this pull request comes from a fork, and forks do "
                f"not run on the {kind} runner (input 'allow-forks'). The CPU job's verdict is "
                f"this pull request's; timing and JAX's own guard on the {kind} run after the "
                "merge, on the push."
            )
        else:
            why.append(
                f"The {kind} job did not run: this pull request comes from a fork, forks do not "
                f"run on the {kind} runner, and the CPU job is off (input 'cpu'). Turn the CPU "
                "job on, or set allow-forks: true together with GitHub's setting 'Require "
                "approval for all outside collaborators'."
            )
    elif result != "skipped" or inputs_passed:
        seen = f"see the job 'transfer-gate {kind}' and the check 'transfer-gate report'."
        why.append(f"The {kind} job ended with result '{result}': {jobs.accelerator_error or seen}")


def verdict_step(environ: Mapping[str, str]) -> int:
    """The step "Require the gate jobs to pass": the notes, or an error line per reason."""
    why, notes = verdict(Jobs.from_env(environ))
    if not why:
        for note in notes:
            tell(note)
            add_summary(environ, note + "\n")
        return 0
    for line in why:
        error("transfer-gate", line)
        add_summary(environ, line + "\n")
    return 1
