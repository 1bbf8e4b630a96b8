"""The reusable workflow's history job: main's reports kept in the Actions cache, the page, the
drift check, and a pull request's trend, its script run as GitHub runs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import ROOT, make_repo, run_gate
from git_helpers import commit, init
from history_reports import stepped
from result_samples import policy
from workflow_helpers import run_step_script, shown

from gate.cli.exit_codes import ExitCode

STEPS = """
import jax
import numpy as np


@jax.jit
def step(x):
    return x * 2.0 + 1.0


def inputs():
    return (jax.device_put(np.zeros(8, np.float32)),)
"""
REUSABLE = ROOT / ".github/workflows/gate.yml"
# The venv's transfer-gate, as the job's `pip install ./.transfer-gate` puts it on PATH.
GATE_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def job() -> dict[str, Any]:
    workflow = yaml.load(REUSABLE.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    found: dict[str, Any] = workflow["jobs"]["history"]
    return found


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real report of one region, ``p.step``."""
    repo = init(tmp_path_factory.mktemp("history-job"))
    commit(repo, {"mod.py": STEPS, "policies/p.yaml": policy("step")}, "first")
    done = run_gate(repo, "run", "--json", "reports/map.json")
    assert done.returncode == ExitCode.OK, done
    found: dict = json.loads((repo / "reports/map.json").read_text())
    return found


def test_the_job_keeps_the_gate_jobs_report_and_asks_only_to_read(job: dict[str, Any]) -> None:
    assert job["needs"] == ["cpu", "accelerator"]
    assert job["permissions"] == {"contents": "read"}
    assert "inputs.history" in job["if"]
    assert "always()" in job["if"]  # a failed run is a point of the history too
    steps = {step["name"]: step for step in job["steps"]}
    download = steps["Download the report"]["with"]["name"]
    assert "'transfer-gate-report'" in download
    assert "'transfer-gate-report-cpu'" in download
    restore, save = steps["Restore the history"], steps["Save the history"]
    assert restore["uses"].startswith("actions/cache/restore@")
    assert save["uses"].startswith("actions/cache/save@")
    assert restore["with"]["path"] == save["with"]["path"] == ".transfer-gate-history"
    assert restore["with"]["restore-keys"] == "transfer-gate-history-"
    assert save["with"]["key"] == restore["with"]["key"]
    assert save["if"] == "always() && steps.history.outputs.added == 'true'"
    assert steps["Upload the page"]["with"]["name"] == "transfer-gate-history"


def chart(
    job: dict[str, Any], workspace: Path, event: str, keep: str = "1000"
) -> tuple[Any, str, str]:
    """The job's "Chart the history" script in ``workspace``, for a push to main or a PR."""
    step = next(s for s in job["steps"] if s["name"] == "Chart the history")
    env = {
        "EVENT": event,
        "REF": "refs/heads/main" if event == "push" else "refs/pull/7/merge",
        "DEFAULT_BRANCH": "main",
        "PAGE_URL": "https://octo.github.io/proj/",
        "RUN_ID": "4242",
        "RUN_ATTEMPT": "1",
        "KEEP": keep,
    }
    assert step["env"]["KEEP"] == "1000"
    return run_step_script(step["run"], env, workspace, path_prefix=GATE_BIN)


def workspace(tmp_path: Path, report: dict, kept: list[dict], drift: str = "") -> Path:
    """A checkout with the policy, the gate job's report, and the history restored."""
    make_repo(tmp_path, {"policies/p.yaml": policy("step") + drift})
    (tmp_path / ".transfer-gate-report").mkdir()
    (tmp_path / ".transfer-gate-report/transfer-gate.json").write_text(json.dumps(report))
    folder = tmp_path / ".transfer-gate-history/reports"
    folder.mkdir(parents=True)
    for i, kept_report in enumerate(kept):
        # Named as the job names them: when they were added, then the run.
        (folder / f"2026040{i + 1}T120000Z-{i}-1.json").write_text(json.dumps(kept_report))
    return tmp_path


def test_a_push_to_main_adds_its_report_and_writes_the_page(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3) for i in range(2)]
    newest = stepped(report, 5, median=1e-3)
    proc, output, summary = chart(job, workspace(tmp_path, newest, older), "push")
    assert proc.returncode == 0, shown(proc)
    assert output == "added=true\nwritten=true\n"
    kept = sorted((tmp_path / ".transfer-gate-history/reports").glob("*.json"))
    assert len(kept) == 3
    assert kept[-1].name.endswith("-4242-1.json")
    history = json.loads((tmp_path / ".transfer-gate-site/history.json").read_text())
    assert [r["commit"][:2] for r in history["runs"]] == ["00", "01", "05"]
    assert "no drift in 1 region" in proc.stdout
    assert "| [p.step](https://octo.github.io/proj/#region-0) |" in summary


def test_main_keeps_its_newest_reports_only(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3) for i in range(3)]
    newest = stepped(report, 5, median=1e-3)
    proc, _, _ = chart(job, workspace(tmp_path, newest, older), "push", keep="2")
    assert proc.returncode == 0, shown(proc)
    kept = sorted(p.name for p in (tmp_path / ".transfer-gate-history/reports").glob("*.json"))
    assert kept[0] == "20260403T120000Z-2-1.json"
    assert kept[1].endswith("-4242-1.json")
    history = json.loads((tmp_path / ".transfer-gate-site/history.json").read_text())
    assert [r["commit"][:2] for r in history["runs"]] == ["02", "05"]


def test_drift_on_main_fails_the_job_and_the_report_is_kept(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3, flops=100.0) for i in range(2)]
    newest = stepped(report, 5, median=1e-3, flops=150.0)
    proc, output, _ = chart(job, workspace(tmp_path, newest, older), "push")
    assert proc.returncode == 1, shown(proc)
    assert output == "added=true\nwritten=true\n"  # saved and uploaded all the same
    assert "drift: p.step: flops grew x1.50 over 3 runs" in proc.stdout
    (error,) = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert error.startswith("::error title=transfer-gate history::a region drifted beyond")


def test_a_pull_request_shows_its_trend_and_keeps_nothing(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3 * (1 + i / 10)) for i in range(3)]
    proc, output, summary = chart(job, workspace(tmp_path, report, older), "pull_request")
    assert proc.returncode == 0, shown(proc)
    assert output == "written=true\n"  # not added: a pull request's run never joins main's
    assert len(list((tmp_path / ".transfer-gate-history/reports").glob("*.json"))) == 3
    assert summary.startswith("### Step time over main's recent runs\n")
    assert "| 4 |" in summary  # main's three runs, then this one


def test_the_first_pull_request_has_no_history_yet(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    proc, _, summary = chart(job, workspace(tmp_path, report, []), "pull_request")
    assert proc.returncode == 0, shown(proc)
    assert "| 1 |" in summary


def test_a_missing_report_is_one_error(job: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    proc, output, _ = chart(job, tmp_path, "push")
    assert proc.returncode == 1, shown(proc)
    assert output == ""
    assert proc.stdout == (
        "::error title=transfer-gate history::the gate job wrote no JSON report "
        "(.transfer-gate-report/transfer-gate.json); the gate's action writes one unless its "
        "'json' input is emptied\n"
    )
