"""The reusable workflow's steps in Python (gate/ci), called directly and as the workflow calls
them; tests/test_ci_config.py and tests/test_history_workflow.py run the same steps from the
workflow's YAML."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import processes
import pytest
from cli_helpers import ROOT

from gate.ci.__main__ import main
from gate.ci.cache_key import cache_key
from gate.ci.cache_scope import cache_scope
from gate.ci.history import add_report, prune, stored
from gate.ci.inputs import InputError, Inputs, check_inputs
from gate.ci.paths import check_paths
from gate.ci.tpu_vm import SetupError, set_up, tpu_vm_step
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


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A caller's repository: policies/, train.yaml, requirements.txt, and a folder deps/."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "train.yaml").write_text("version: 1\n")
    (tmp_path / "requirements.txt").write_text("jax\n")
    (tmp_path / "deps").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("policies", "requirements"),
    [
        ("policies/", ""),
        ("  policies/\t train.yaml ", "requirements.txt"),
        ("train.yaml", "requirements.txt  requirements.txt"),
    ],
)
def test_paths_in_the_callers_checkout_pass(
    checkout: Path, policies: str, requirements: str
) -> None:
    check_paths(str(checkout), policies, requirements)


@pytest.mark.parametrize(
    ("policies", "requirements", "message"),
    [
        ("", "", "input 'policies' is empty: name the policy files or folders"),
        (" \t ", "", "input 'policies' is empty"),
        (
            "policies/\ntrain.yaml",
            "",
            "input 'policies': write the policy files and folders on one",
        ),
        ("policies/ polices/", "", "input 'policies': 'polices/' is not in the repository; name"),
        # The first wrong input, the policies before the requirements.
        ("nowhere/", "nothing.txt", "input 'policies': 'nowhere/' is not in the repository"),
        ("policies/", "a.txt\nb.txt", "input 'requirements': write the requirements files on"),
        ("policies/", "requirement.txt", "input 'requirements': 'requirement.txt' is not a file"),
        # doctor reads files, not folders.
        ("policies/", "deps/", "input 'requirements': 'deps/' is not a file in the repository"),
        # A non-breaking space is no separator for the shell that splits the input later.
        ("policies/\xa0train.yaml", "", "input 'policies': 'policies/\xa0train.yaml' is not in"),
    ],
)
def test_a_wrong_path_is_one_error_that_names_the_input(
    checkout: Path, policies: str, requirements: str, message: str
) -> None:
    with pytest.raises(InputError) as raised:
        check_paths(str(checkout), policies, requirements)
    assert str(raised.value).startswith(message), raised.value
    assert "\n" not in str(raised.value)


def test_paths_are_looked_up_in_the_checkout_not_the_working_directory(
    checkout: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The step runs in the gate's checkout; the caller's lies beside it (CHECKOUT).
    gate = tmp_path_factory.mktemp("gate")
    (gate / "gate").mkdir()
    (gate / "pyproject.toml").write_text("")
    monkeypatch.chdir(gate)
    check_paths(str(checkout), "policies/", "requirements.txt")
    with pytest.raises(InputError, match="'gate/' is not in the repository"):
        check_paths(str(checkout), "gate/", "")
    with pytest.raises(InputError, match=r"'pyproject\.toml' is not a file in the repository"):
        check_paths(str(checkout), "policies/", "pyproject.toml")


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


def test_the_cpu_cache_key_names_jax_the_device_and_the_processor() -> None:
    key = cache_key("0.10.2", "TPU v5 lite", "AMD EPYC 7B13")
    assert key == "jax-0.10.2-TPU_v5_lite-" + hashlib.sha256(b"AMD EPYC 7B13").hexdigest()[:12]
    # Another runner's processor: another key, so its programs are never loaded here.
    assert cache_key("0.10.2", "cpu", "Intel(R) Xeon(R) Platinum 8370C") != cache_key(
        "0.10.2", "cpu", "AMD EPYC 7763 64-Core Processor"
    )


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


def test_the_cpu_job_skipped_after_a_failed_inputs_job_is_no_second_reason() -> None:
    # Both gate jobs need the inputs job, which checks the policies' paths.
    failed = Jobs(
        inputs_result="failure",
        inputs_error="input 'policies': 'polices/' is not in the repository",
        cpu=True,
        cpu_result="skipped",
    )
    why, _ = verdict(failed)
    assert why == [
        "The job 'transfer-gate inputs' ended with result 'failure': input 'policies': "
        "'polices/' is not in the repository"
    ]
    # After a passing inputs job, a skipped CPU job that should have run is a failure.
    why, _ = verdict(Jobs(inputs_result="success", cpu=True, cpu_result="skipped"))
    assert why == [
        "The CPU job ended with result 'skipped': see the job 'transfer-gate CPU' and the "
        "check 'transfer-gate report (CPU)'."
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


class Runner:
    """A TPU VM's programs as `set_up` calls them: each call recorded, each exit status given
    by the first word of the program's arguments that names one (0 for the rest)."""

    def __init__(self, **statuses: int) -> None:
        self.statuses = statuses
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> int:
        self.calls.append(list(argv))
        said = " ".join(argv)
        return next((code for word, code in self.statuses.items() if word in said), 0)


@pytest.mark.parametrize("has_jax", [True, False], ids=["runner's JAX", "jax[tpu] installed"])
def test_a_tpu_vm_gets_the_gate_and_jax_unless_the_runner_has_it(
    tmp_path: Path, has_jax: bool
) -> None:
    run = Runner(**({} if has_jax else {"import": 1}))
    folder = set_up("/usr/bin/python3", (3, 11, 4), str(tmp_path), "/gate", run)
    venv = str(tmp_path / "transfer-gate-venv")
    assert folder == f"{venv}/bin"
    own = f"{venv}/bin/python"
    # The runner's own JAX (and libtpu) are seen through --system-site-packages, never
    # replaced; every Python isolated (-I), so nothing of the working directory runs.
    assert [call[:4] for call in run.calls] == [
        ["/usr/bin/python3", "-I", "-m", "venv"],
        [own, "-I", "-c", run.calls[1][3]],
        *([] if has_jax else [[own, "-I", "-m", "pip"]]),
        [own, "-I", "-m", "pip"],
    ]
    assert run.calls[0][4:] == ["--system-site-packages", venv]
    assert "import jax" in run.calls[1][3]
    assert run.calls[-1][4:] == ["install", "/gate"]
    if not has_jax:
        assert run.calls[2][4:] == ["install", "jax[tpu]"]


@pytest.mark.parametrize(
    ("version", "statuses", "message"),
    [
        (
            (3, 10, 12),
            {},
            "the TPU VM's python3 is Python 3.10.12; the gate needs Python 3.11 or newer: "
            "install one on the runner, or run the job in a container (input 'tpu-image').",
        ),
        ((3, 12, 1), {"venv": 1}, "making the virtual environment failed (its output is above)"),
        ((3, 12, 1), {"import": 1, "jax[tpu]": 1}, 'pip install "jax[tpu]" failed'),
        ((3, 12, 1), {"/gate": 1}, "installing the gate failed (its output is above)."),
    ],
)
def test_a_tpu_vm_set_up_that_fails_says_what_to_do(
    tmp_path: Path, version: tuple[int, ...], statuses: dict[str, int], message: str
) -> None:
    run = Runner(**statuses)
    with pytest.raises(SetupError) as raised:
        set_up("python3", version, str(tmp_path), "/gate", run)
    assert str(raised.value).startswith(message)
    if version < (3, 11):
        assert run.calls == []  # nothing made or installed


def test_the_tpu_vm_step_puts_the_environment_on_path_and_installs_its_own_checkout(
    tmp_path: Path,
) -> None:
    github_path = tmp_path / "github_path"
    run = Runner()
    environ = {"RUNNER_TEMP": str(tmp_path), "GITHUB_PATH": str(github_path)}
    assert tpu_vm_step(environ, run) == 0
    assert github_path.read_text() == f"{tmp_path}/transfer-gate-venv/bin\n"
    assert run.calls[0][0] == sys.executable  # the runner's python3, which runs the step
    # The checkout the step runs from (here this one): this workflow's commit.
    assert run.calls[-1][-2:] == ["install", str(ROOT)]


def test_a_failed_tpu_vm_step_is_one_error_and_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "output"
    environ = {"RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(output)}
    assert tpu_vm_step(environ, Runner(venv=1)) == 1
    error = "making the virtual environment failed (its output is above): install python3-venv"
    assert capsys.readouterr().out.startswith(f"::error title=transfer-gate setup::{error}")
    assert output.read_text().startswith(f"error={error}")


# `python3 -m gate.ci` on a TPU VM runs with the runner's python3 before its version is known.
OLDEST_PYTHON = (3, 8)


def test_what_python_m_gate_ci_imports_reads_as_python_3_8() -> None:
    # As the step starts it: from the gate's checkout, nothing else on the path.
    listed: subprocess.CompletedProcess[str] = processes.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import sys, gate.ci.__main__\n"
            "print('\\n'.join(sorted(m.__file__ for m in list(sys.modules.values())"
            " if m.__name__.startswith('gate') and getattr(m, '__file__', None))))",
        ],
        cwd=ROOT,
        timeout=60,
    )
    assert listed.returncode == 0, listed
    files = [Path(line) for line in listed.stdout.splitlines()]
    assert ROOT / "gate/ci/tpu_vm.py" in files
    for path in files:
        # Python's own parser, held to 3.8's grammar: a newer form is a SyntaxError here.
        ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=OLDEST_PYTHON)
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=OLDEST_PYTHON)


def test_an_unknown_step_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nothing"], {}) == 2
    assert (
        "usage: python -m gate.ci {inputs,paths,cache-scope,cache-key,tpu-vm,history,verdict}"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("step", ["inputs", "paths", "cache-scope", "verdict"])
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
            "CHECKOUT": str(ROOT),
            "GATE_POLICIES": "policies/",
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
