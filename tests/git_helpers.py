"""Throwaway git repositories for the tests of ``run --base``: commits without anyone's config."""

from __future__ import annotations

import os
from pathlib import Path

from cli_helpers import make_repo
from processes import run

TIMEOUT_S = 60
# Commits made without the user's or the machine's git configuration.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    done = run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    """Write ``files`` (dedented), commit everything; the new commit's sha."""
    make_repo(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    return root
