"""What a run measured: the commit, its date, the run's time, the branch, the repository.

Read once in the gate's process when a run starts, and written into the JSON report
(``run``), so that reports can be lined up across commits (``transfer-gate history``).
The commit is the work tree's HEAD: in GitHub Actions ``actions/checkout`` checks out the
commit under test, so HEAD is that commit there too; ``GITHUB_SHA`` stands in only where
the folder is no git checkout. A field git cannot give is null, never a guess.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from gate.documents import Record

# Local git calls only; a hung git (a lock, a network filesystem) must not hang the run.
_GIT_TIMEOUT_S = 30


class Provenance(Record, frozen=True, kw_only=True):
    """The JSON report's ``run``: what was measured, and when."""

    commit: str | None  # the full sha; null outside a git checkout
    commit_date: str | None  # the commit's committer date, ISO 8601 with its offset
    run_at: str  # when the run started, ISO 8601 in UTC
    ref: str | None  # the branch (a pull request's head branch in Actions); null when detached
    repository: str | None  # its web URL ("https://github.com/o/r"), where known

    def short(self) -> str:
        """``3f2a9c1``, or ``(no commit)``."""
        return self.commit[:7] if self.commit else "(no commit)"


def read_provenance(
    repo_root: Path, environ: Mapping[str, str], now: datetime | None = None
) -> Provenance:
    """The provenance of a run started now in ``repo_root``, from git and GitHub's variables."""
    started = (now or datetime.now(UTC)).astimezone(UTC)
    commit = _git(repo_root, "rev-parse", "--verify", "HEAD^{commit}") or environ.get("GITHUB_SHA")
    date = _git(repo_root, "show", "-s", "--format=%cI", commit) if commit else None
    # In Actions a pull request's checkout is detached: its branch is GITHUB_HEAD_REF.
    ref = (
        environ.get("GITHUB_HEAD_REF")
        or environ.get("GITHUB_REF_NAME")
        or _git(repo_root, "symbolic-ref", "--quiet", "--short", "HEAD")
    )
    return Provenance(
        commit=commit or None,
        commit_date=date or None,
        run_at=started.isoformat(timespec="seconds"),
        ref=ref or None,
        repository=_repository(repo_root, environ),
    )


def _repository(repo_root: Path, environ: Mapping[str, str]) -> str | None:
    server, name = environ.get("GITHUB_SERVER_URL"), environ.get("GITHUB_REPOSITORY")
    if server and name:
        return f"{server.rstrip('/')}/{name}"
    remote = _git(repo_root, "remote", "get-url", "origin")
    return web_url(remote) if remote else None


def web_url(remote: str) -> str | None:
    """``https://github.com/o/r`` for ``git@github.com:o/r.git`` or an https remote; None for
    a path, or a remote that carries credentials (they must never reach a report)."""
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):([\w./-]+?)(?:\.git)?/?", remote)
    if scp:
        return f"https://{scp[1]}/{scp[2]}"
    url = re.fullmatch(
        r"(?:https?|ssh|git)://(?:([^@/]*)@)?([\w.-]+)(?::\d+)?/([\w./-]+?)(?:\.git)?/?", remote
    )
    if url is None or (url[1] and ":" in url[1]):
        return None
    return f"https://{url[2]}/{url[3]}"


def _git(repo_root: Path, *args: str) -> str | None:
    """git's one line of output, or None where git is missing, fails or is not a checkout."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=repo_root,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text else None
