"""The reusable workflow's steps in Python (gate/ci), called directly and as the workflow calls
them; tests/test_ci_config.py and tests/test_history_workflow.py run the same steps from the
workflow's YAML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import processes
import pytest
from cli_helpers import ROOT

from gate.ci.__main__ import main
from gate.ci.cache_scope import cache_scope
from gate.ci.history import add_report, prune, stored
from gate.ci.inputs import InputError, Inputs, check_inputs
from gate.ci.verdict import Jobs, verdict

DIGEST = "sha256:" + "a" * 64
BUDGET = {"timeout_minutes": "60", "time_budget": "3300"}


def test_a_gpu_job_gets_its_image_its_sandbox_and_the_default_labels() -> None:
    image = f"ghcr.io/owner/gate@{DIGEST}"
    outputs = check_inputs(Inputs("gpu", image, accelerator_cache="jax-cache", **BUDGET))
    assert outputs == {
        "image": image,
        "options": "--gpus all",
        "network": "none",
        "runs-on": '["self-hosted", "linux", "x64", "gpu"]',
    }


@pytest.mark.parametrize(
    ("given", "names"),
    [
        (Inputs("gpu", "ghcr.io/owner/gate:latest", accelerator_cache="c", **BUDGET), "'image'"),
        # Python's `$` would match before a final newline; the whole value must match.
        (Inputs("gpu", f"ghcr.io/o/g@{DIGEST}\n", accelerator_cache="c", **BUDGET), "'image'"),
        (Inputs("tpu", accelerator_cache="c", runs_on='["x", 3]', **BUDGET), "'runs-on'"),
        (Inputs("tpu", accelerator_cache="c", record_baseline="a/../b.json", **BUDGET), "baseline"),
        (Inputs(timeout_minutes="3", time_budget="1"), "'timeout-minutes'"),
        (Inputs(timeout_minutes="10", time_budget="421"), "'time-budget'"),
        (Inputs(record_baseline="b.json", **BUDGET), "'record-baseline'"),
    ],
)
def test_a_wrong_input_is_one_error_that_names_it_on_one_line(given: Inputs, names: str) -> None:
    with pytest.raises(InputError) as raised:
        check_inputs(given)
    assert f"input {names}" in str(raised.value) or names in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("event", "ref", "head", "scope"),
    [
        ("push", "refs/heads/main", "", "main"),
        ("push", "refs/heads/feature", "", "pull-requests"),
        ("pull_request", "refs/pull/1/merge", "owner/repo", "pull-requests"),
        ("pull_request", "refs/pull/1/merge", "fork/repo", "forks"),
        ("pull_request_target", "refs/heads/main", "fork/repo", "forks"),
    ],
)
def test_the_cache_scope(event: str, ref: str, head: str, scope: str) -> None:
    assert cache_scope(event, ref, "main", head, "owner/repo") == scope


def test_no_default_branch_is_never_mains_scope() -> None:
    assert cache_scope("push", "refs/heads/", "", "", "owner/repo") == "pull-requests"


def test_the_verdict_repeats_the_inputs_error_alone() -> None:
    why, _ = verdict(
        Jobs(
            inputs_result="failure",
            inputs_error="input 'image': pin it",
            cpu=True,
            cpu_result="success",
            accelerator="gpu",
            accelerator_result="skipped",
        )
    )
    assert why == [
        "The job 'transfer-gate inputs' ended with result 'failure': input 'image': pin it"
    ]


def test_a_forks_skipped_accelerator_job_leaves_the_verdict_to_the_cpu_job() -> None:
    jobs = Jobs(
        inputs_result="success",
        cpu=True,
        cpu_result="success",
        accelerator="tpu",
        accelerator_result="skipped",
        fork_pr=True,
    )
    why, notes = verdict(jobs)
    assert why == []
    assert notes[0] == "The CPU job ran and passed."
    assert notes[1].startswith("The TPU job did not run: this pull request comes from a fork")


def test_the_history_keeps_its_own_reports_in_line_and_nothing_else(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "0000000009-1-1.json").write_text("{}")
    (kept / "notes.json").write_text("{}")
    (kept / "folder").mkdir()
    (kept / "0000000010-2-1.json").symlink_to(tmp_path / "elsewhere.json")
    report = tmp_path / "report.json"
    report.write_text('{"new": true}')
    assert add_report(kept, report, "77", "2") == "0000000010-77-2.json"
    assert stored(kept) == ["0000000009-1-1.json", "0000000010-77-2.json"]
    assert prune(kept, 1) == ["0000000010-77-2.json"]
    assert sorted(p.name for p in kept.iterdir()) == ["0000000010-77-2.json"]
    assert json.loads((kept / "0000000010-77-2.json").read_text()) == {"new": True}


def test_an_empty_history_starts_at_one(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("{}")
    (tmp_path / "kept").mkdir()
    assert add_report(tmp_path / "kept", report, "5", "1") == "0000000001-5-1.json"


def test_an_unknown_step_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nothing"], {}) == 2
    assert (
        "usage: python -m gate.ci {inputs,cache-scope,history,verdict}" in capsys.readouterr().err
    )


@pytest.mark.parametrize("step", ["inputs", "cache-scope", "verdict"])
def test_the_steps_without_an_install_need_only_the_standard_library(
    tmp_path: Path, step: str
) -> None:
    # As their jobs run them: `python3 -m gate.ci STEP` in the gate's checkout, nothing
    # installed. -S: no site-packages at all, so neither jax nor yaml nor the gate's install.
    output = tmp_path / "output"
    done: subprocess.CompletedProcess[str] = processes.run(
        [sys.executable, "-S", "-m", "gate.ci", step],
        cwd=ROOT,
        env={
            "GITHUB_OUTPUT": str(output),
            "TIMEOUT_MINUTES": "60",
            "TIME_BUDGET": "60",
            "INPUTS_RESULT": "success",
            "CPU": "true",
            "CPU_RESULT": "success",
        },
        timeout=60,
    )
    assert done.returncode == 0, done
    assert "jax" not in done.stderr
