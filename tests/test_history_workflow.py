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
# The job's folders, all in RUNNER_TEMP, outside the checkout.
HISTORY = "transfer-gate-history"
REPORT = "transfer-gate-report/transfer-gate.json"
SITE = "transfer-gate-site"


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
    # Outside the checkout: a file the repository commits is never part of main's history.
    assert restore["with"]["path"] == save["with"]["path"] == "${{ runner.temp }}/" + HISTORY
    assert steps["Download the report"]["with"]["path"] == "${{ runner.temp }}/transfer-gate-report"
    assert restore["with"]["restore-keys"] == "transfer-gate-history-"
    assert save["with"]["key"] == restore["with"]["key"]
    assert save["if"] == "always() && steps.history.outputs.added == 'true'"
    upload = steps["Upload the page"]
    assert upload["with"] == {
        "name": "transfer-gate-history",
        "path": "${{ runner.temp }}/" + SITE,
        "if-no-files-found": "error",
    }
    # Main's page only: a pull request's run keeps nothing (issue 54).
    assert upload["if"] == (
        "always() && steps.history.outputs.added == 'true' "
        "&& steps.history.outputs.written == 'true'"
    )


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
        "RUNNER_TEMP": str(workspace / "runner-temp"),
    }
    assert step["env"]["KEEP"] == "1000"
    return run_step_script(step["run"], env, workspace, path_prefix=GATE_BIN)


def workspace(tmp_path: Path, report: dict | None, kept: list[dict], drift: str = "") -> Path:
    """A checkout with the policy; in RUNNER_TEMP the gate job's report and main's history."""
    make_repo(tmp_path, {"policies/p.yaml": policy("step") + drift})
    temp = tmp_path / "runner-temp"
    if report is not None:
        (temp / REPORT).parent.mkdir(parents=True)
        (temp / REPORT).write_text(json.dumps(report))
    folder = temp / HISTORY
    folder.mkdir(parents=True)
    for i, kept_report in enumerate(kept):
        # Named as the job names them: the place in line, then the run.
        (folder / f"{i + 1:010d}-{i}-1.json").write_text(json.dumps(kept_report))
    return tmp_path


def kept_names(workspace: Path) -> list[str]:
    return sorted(p.name for p in (workspace / "runner-temp" / HISTORY).iterdir())


def test_a_push_to_main_adds_its_report_and_writes_the_page(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3) for i in range(2)]
    newest = stepped(report, 5, median=1e-3)
    proc, output, summary = chart(job, workspace(tmp_path, newest, older), "push")
    assert proc.returncode == 0, shown(proc)
    assert output == "added=true\nwritten=true\n"
    assert kept_names(tmp_path) == [
        "0000000001-0-1.json",
        "0000000002-1-1.json",
        "0000000003-4242-1.json",  # the next in line
    ]
    history = json.loads((tmp_path / "runner-temp" / SITE / "history.json").read_text())
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
    assert kept_names(tmp_path) == ["0000000003-2-1.json", "0000000004-4242-1.json"]
    history = json.loads((tmp_path / "runner-temp" / SITE / "history.json").read_text())
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
    assert len(kept_names(tmp_path)) == 3
    assert summary.startswith("### Step time over main's recent runs\n")
    assert "| 4 |" in summary  # main's three runs, then this one


def test_the_first_pull_request_has_no_history_yet(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    proc, _, summary = chart(job, workspace(tmp_path, report, []), "pull_request")
    assert proc.returncode == 0, shown(proc)
    assert "| 1 |" in summary


def test_a_missing_report_is_one_error(job: dict[str, Any], tmp_path: Path) -> None:
    # One the repository commits where the job once kept it is not the gate job's report.
    (tmp_path / ".transfer-gate-report").mkdir()
    (tmp_path / ".transfer-gate-report/transfer-gate.json").write_text("{}")
    proc, output, _ = chart(job, workspace(tmp_path, None, []), "push")
    assert proc.returncode == 1, shown(proc)
    assert output == ""
    assert proc.stdout == (
        "::error title=transfer-gate history::the gate job wrote no JSON report "
        "(transfer-gate.json in its artifact); the gate's action writes one unless its "
        "'json' input is emptied\n"
    )


def forged(report: dict) -> dict:
    """A report that claims the latest date there can be and holds no region (issue 54)."""
    found = stepped(report, 99, median=1e-3)
    found["run"]["commit_date"] = found["run"]["run_at"] = "2099-12-31T23:59:59+00:00"
    found["suites"][0]["regions"] = []
    return found


def test_main_keeps_nothing_but_the_reports_it_stored(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3) for i in range(2)]
    space = workspace(tmp_path, stepped(report, 5, median=1e-3), older)
    folder = space / "runner-temp" / HISTORY
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(forged(report)))
    # Whatever else a history holds goes, read by no run: files of other names, a folder, a
    # link, a name that only looks like a stored one on one of its lines.
    (folder / "planted.json").write_text(json.dumps(forged(report)))
    (folder / "notes.txt").write_text("x")
    (folder / "0000000009-1-1.json.bak").write_text("x")
    (folder / "x\n0000000005-1-1.json").write_text(json.dumps(forged(report)))
    (folder / "sub").mkdir()
    (folder / "sub/0000000007-1-1.json").write_text(json.dumps(forged(report)))
    (folder / "0000000008-1-1.json").symlink_to(elsewhere)
    proc, output, _ = chart(job, space, "push")
    assert proc.returncode == 0, shown(proc)
    assert output == "added=true\nwritten=true\n"
    assert kept_names(space) == [
        "0000000001-0-1.json",
        "0000000002-1-1.json",
        "0000000003-4242-1.json",
    ]
    assert elsewhere.is_file()  # the link went, not what it named
    assert "no drift in 1 region" in proc.stdout


def test_a_report_the_repository_commits_is_never_part_of_mains_history(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3, flops=100.0) for i in range(2)]
    space = workspace(tmp_path, stepped(report, 5, median=1e-3, flops=150.0), older)
    # Where the history and the page once lay, in the checkout: a merged pull request's files.
    for name in (".transfer-gate-history/reports/z.json", ".transfer-gate-history/z.json"):
        (space / name).parent.mkdir(parents=True, exist_ok=True)
        (space / name).write_text(json.dumps(forged(report)))
    proc, _, _ = chart(job, space, "push")
    assert proc.returncode == 1, shown(proc)
    assert "drift: p.step: flops grew x1.50 over 3 runs" in proc.stdout
    assert len(kept_names(space)) == 3


def test_a_forged_newest_report_fails_main_and_the_next_push_is_judged_again(
    job: dict[str, Any], report: dict, tmp_path: Path
) -> None:
    older = [stepped(report, i, median=1e-3, flops=100.0) for i in range(2)]
    # The gate job's own report is the forgery: stored, as the newest, it passes nothing.
    proc, output, _ = chart(job, workspace(tmp_path / "one", forged(report), older), "push")
    assert proc.returncode == 1, shown(proc)
    assert output == "added=true\nwritten=true\n"
    assert "missing: p.step: held by the run before the newest (01ccccc)" in proc.stdout
    (error,) = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert "or the newest report left out a region" in error
    # The next push stores its report after the forgery, so its own is the newest again.
    kept = [*older, forged(report)]
    newest = stepped(report, 5, median=1e-3, flops=150.0)
    proc, _, _ = chart(job, workspace(tmp_path / "two", newest, kept), "push")
    assert proc.returncode == 1, shown(proc)
    assert "drift: p.step: flops grew x1.50 over 3 runs" in proc.stdout
