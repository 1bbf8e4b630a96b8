"""Every JSON report records what it measured: the commit, its date, the run's time, the branch,
the repository, and each region's machine as the stored baseline names it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_helpers import run_gate
from git_helpers import commit, git, init
from result_samples import STEPS, policy

from gate.cli.exit_codes import ExitCode
from gate.package import __version__
from gate.results.provenance import read_provenance, web_url

COMMIT_DATE = "2026-03-01T10:00:00+01:00"


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str, datetime]:
    """A repository on branch main with an origin, run once and its timing recorded."""
    repo = init(tmp_path_factory.mktemp("provenance"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GIT_COMMITTER_DATE", COMMIT_DATE)
        sha = commit(repo, {"mod.py": STEPS, "policies/p.yaml": policy("step")}, "first")
    git(repo, "remote", "add", "origin", "git@github.com:octo/proj.git")
    before = datetime.now(UTC).replace(microsecond=0)
    done = run_gate(repo, "run", "--json", "reports/map.json")
    assert done.returncode == ExitCode.OK, done
    assert run_gate(repo, "baseline", "--timing-only").returncode == ExitCode.OK
    return repo, json.loads((repo / "reports/map.json").read_text()), sha, before


def test_the_report_names_the_commit_its_date_the_branch_and_the_repository(
    measured: tuple[Path, dict, str, datetime],
) -> None:
    _, report, sha, before = measured
    run = report["run"]
    assert run["commit"] == sha
    # The commit's own date, with its offset: not the time the run happened.
    assert datetime.fromisoformat(run["commit_date"]) == datetime.fromisoformat(COMMIT_DATE)
    assert run["ref"] == "main"
    assert run["repository"] == "https://github.com/octo/proj"
    started = datetime.fromisoformat(run["run_at"])
    assert started.utcoffset() is not None
    assert before <= started <= datetime.now(UTC)


def test_each_region_names_its_machine_as_the_stored_baseline_does(
    measured: tuple[Path, dict, str, datetime],
) -> None:
    repo, report, _, _ = measured
    [region] = report["suites"][0]["regions"]
    stored = json.loads((repo / "policies/transfer-gate-baseline.json").read_text())
    assert region["machine"] == stored["timing"][region["classname"]]["machine"]
    assert region["machine"]["platform"] == "cpu"
    assert region["machine"]["transfer_gate"] == __version__


def test_outside_a_checkout_the_commit_is_null_not_guessed(tmp_path: Path) -> None:
    found = read_provenance(tmp_path, {})
    assert (found.commit, found.commit_date, found.ref, found.repository) == (None,) * 4
    assert found.short() == "(no commit)"


def test_in_actions_a_pull_requests_branch_and_the_repository_come_from_its_variables(
    tmp_path: Path,
) -> None:
    repo = init(tmp_path / "repo")
    sha = commit(repo, {"a.txt": "a"}, "a")
    git(repo, "checkout", "-q", "--detach")
    environ = {
        "GITHUB_SHA": "f" * 40,  # the merge commit: HEAD, which checkout checked out, wins
        "GITHUB_HEAD_REF": "feature",
        "GITHUB_REF_NAME": "12/merge",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "octo/proj",
    }
    found = read_provenance(repo, environ, now=datetime(2026, 5, 1, 12, tzinfo=UTC))
    assert found.commit == sha
    assert found.ref == "feature"
    assert found.repository == "https://github.com/octo/proj"
    assert found.run_at == "2026-05-01T12:00:00+00:00"
    # Detached, outside Actions: no branch, rather than "HEAD".
    assert read_provenance(repo, {}).ref is None
    # No checkout at all: the commit Actions names.
    assert read_provenance(tmp_path, {"GITHUB_SHA": "e" * 40}).commit == "e" * 40


@pytest.mark.parametrize(
    ("remote", "url"),
    [
        ("git@github.com:octo/proj.git", "https://github.com/octo/proj"),
        ("https://github.com/octo/proj.git", "https://github.com/octo/proj"),
        ("https://github.com/octo/proj", "https://github.com/octo/proj"),
        (
            "ssh://git@gitlab.example.com:2222/group/sub/proj.git",
            "https://gitlab.example.com/group/sub/proj",
        ),
        # A token in the remote must never reach a report.
        ("https://user:ghp_secret@github.com/octo/proj.git", None),
        ("/srv/git/proj.git", None),
    ],
)
def test_a_remote_becomes_its_web_address(remote: str, url: str | None) -> None:
    assert web_url(remote) == url


def test_merged_shards_keep_their_one_commit_and_refuse_two(
    measured: tuple[Path, dict, str, datetime], tmp_path: Path
) -> None:
    _, report, sha, _ = measured
    early = {**report, "run": {**report["run"], "run_at": "2026-03-01T09:00:00+00:00"}}
    (tmp_path / "s1.json").write_text(json.dumps(report))
    (tmp_path / "s2.json").write_text(json.dumps(early))
    done = run_gate(tmp_path, "merge", "all.json", "s1.json", "s2.json", report="all.json")
    assert done.returncode == ExitCode.OK, done
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["run"] == early["run"]  # the commit, and the time the first shard started

    other = {**report, "run": {**report["run"], "commit": "a" * 40}}
    (tmp_path / "s3.json").write_text(json.dumps(other))
    done = run_gate(tmp_path, "merge", "all.json", "s1.json", "s3.json", report="all.json")
    assert done.returncode == ExitCode.USAGE, done
    assert done.stderr == (
        f"error: s3.json: measured aaaaaaa, but s1.json measured {sha[:7]}; "
        "merge the shards of one run (one commit) only\n"
    )
