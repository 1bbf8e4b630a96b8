#!/usr/bin/env python3
"""The one name of this project's repository, in every file a user reads.

pyproject.toml's ``[project.urls]`` name the repository (``Source``). The caller template's
``uses:``, the README and the docs that show it, the workflows' image names and the policy
schema's address name it too, as ``OWNER/NAME`` (``ghcr.io/owner/name`` in lower case, which
GHCR requires). Until the first release they say ``OWNER/jax-transfer-gate``, a placeholder:

    python3 .ci/repository.py set your-org/jax-transfer-gate   # once, before the first release
    python3 .ci/repository.py check your-org/jax-transfer-gate # the release job runs this

``set`` rewrites every mention; ``check`` prints one ``::error`` per file and line that names
another repository and exits 1, so that a release never ships a placeholder.
tests/test_release.py keeps every mention equal to pyproject.toml's, and runs ``set`` on a copy.

A mention is ``<owner>/<name>`` where ``<name>`` is the repository's name in pyproject.toml,
after ``github.com/``, ``ghcr.io/``, ``raw.githubusercontent.com/`` or at the start of a word.
The tests and this folder are no user's reading (they use the placeholder as data); nor are
build outputs and virtual environments.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SKIPPED_FOLDERS = {".ci", ".git", "tests", "node_modules", "build", "dist", "reports"}
_REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?/[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class Mention:
    """A place that names the repository: ``path``'s line ``line`` says ``repository``."""

    path: Path
    line: int
    repository: str  # as written there, e.g. "OWNER/jax-transfer-gate"
    image: bool  # a ghcr.io name, which must be lower case


def named_repository(root: Path = ROOT) -> str:
    """``OWNER/NAME`` from pyproject.toml's ``Source`` URL."""
    with (root / "pyproject.toml").open("rb") as f:
        source: str = tomllib.load(f)["project"]["urls"]["Source"]
    return source.removeprefix("https://github.com/").rstrip("/")


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        r"(?P<host>github\.com/|ghcr\.io/|raw\.githubusercontent\.com/|(?<![\w./-]))"
        rf"(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/{re.escape(name)}(?![\w-])",
        re.IGNORECASE,
    )


def user_files(root: Path = ROOT) -> Iterator[Path]:
    """The text files a user reads: all but the tests, this folder, build outputs and caches."""
    for path in sorted(root.iterdir()):
        if path.is_dir():
            if path.name in _SKIPPED_FOLDERS or path.name.startswith((".venv", ".mypy", ".ruff")):
                continue
            if path.name in ("__pycache__", ".pytest_cache") or path.name.endswith(".egg-info"):
                continue
            yield from user_files(path)
        elif path.is_file():
            try:
                path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            yield path


def mentions(root: Path = ROOT) -> list[Mention]:
    """Every place a user-facing file names a repository of this project's name."""
    name = named_repository(root).split("/", 1)[1]
    pattern = _pattern(name)
    found = []
    for path in user_files(root):
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in pattern.finditer(text):
                found.append(
                    Mention(
                        path.relative_to(root),
                        number,
                        f"{match['owner']}/{name}",
                        match["host"].lower() == "ghcr.io/",
                    )
                )
    return found


def check(repository: str, root: Path = ROOT) -> list[str]:
    """A ``::error`` line for each mention of another repository than ``repository``."""
    errors = []
    for mention in mentions(root):
        if mention.repository.lower() != repository.lower():
            errors.append(
                f"::error file={mention.path},line={mention.line}::names the repository "
                f"{mention.repository}, not {repository}: run `python3 .ci/repository.py set "
                f"{repository}` and commit the result before releasing"
            )
        elif mention.image and mention.repository != mention.repository.lower():
            errors.append(
                f"::error file={mention.path},line={mention.line}::ghcr.io/{mention.repository} "
                "must be lower case (GHCR takes no upper case): run `python3 .ci/repository.py "
                f"set {repository}`"
            )
    return errors


def set_repository(repository: str, root: Path = ROOT) -> list[Path]:
    """Name ``repository`` wherever a user-facing file names this project's; the files changed."""
    name = named_repository(root).split("/", 1)[1]
    pattern = _pattern(name)

    def renamed(match: re.Match[str]) -> str:
        host = match["host"]
        return host + (repository.lower() if host.lower() == "ghcr.io/" else repository)

    changed = []
    for path in user_files(root):
        text = path.read_text(encoding="utf-8")
        new = pattern.sub(renamed, text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path.relative_to(root))
    return changed


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("set", "check") or not _REPOSITORY.match(argv[1]):
        print("usage: python3 .ci/repository.py set|check OWNER/NAME", file=sys.stderr)
        return 2
    command, repository = argv
    if command == "set":
        for path in set_repository(repository):
            print(f"{path}: now names {repository}")
        return 0
    errors = check(repository)
    for error in errors:
        print(error)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
