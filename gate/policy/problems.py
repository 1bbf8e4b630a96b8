"""What is wrong with a policy, and where: the records every policy check reports in."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a policy, located as precisely as it can be."""

    path: str  # relative to the repo root when under it
    line: int | None  # 1-based; None when the whole file (or path) is at fault
    where: str  # e.g. ``regions[0].guard``; empty for the file or its top level
    message: str  # what is wrong, then the fix

    def __str__(self) -> str:
        location = self.path if self.line is None else f"{self.path}:{self.line}"
        parts = [p for p in (location, self.where) if p]
        return ": ".join([*parts, self.message])


class PolicyError(Exception):
    """One or more problems with one or more policy files."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def display_path(path: Path, repo_root: Path) -> str:
    """``path`` relative to ``repo_root`` (POSIX style) when under it, else absolute."""
    absolute = absolute_path(path)
    try:
        return absolute.relative_to(absolute_path(repo_root)).as_posix() or "."
    except ValueError:
        return absolute.as_posix()


def absolute_path(path: Path) -> Path:
    """``path`` made absolute without following symlinks."""
    # abspath, not resolve(): a symlinked policy keeps the name it was given.
    return Path(os.path.abspath(path))
