"""Where in the user's code: one line, as every record and report names it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A line of the user's code: the innermost frame outside jax, numpy and the gate."""

    path: str  # relative to the repo root when under it, else absolute
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"
