"""Which frame of a stack is "the user's line", and how every record names that line.

A transfer happens deep inside jax; the line a person must change is the
innermost frame in their own code. Their code is what lives under the repo
root (or a policy's python_path) outside virtual environments; jax, jaxlib,
numpy, the gate and the standard library never are.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gate.package import PACKAGE_DIR

_GATE_DIR = str(Path(PACKAGE_DIR).resolve()) + os.sep
_STDLIB_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    if p
)
_ENV_MARKERS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


@functools.lru_cache(maxsize=16384)
def _real(filename: str) -> str:
    """``os.path.realpath``, remembered: every transfer's stack asks it of the same few
    files, and a region's transfer map reads thousands of frames (a stat call each)."""
    return os.path.realpath(filename)


@dataclass(frozen=True)
class SourceLocation:
    """A line of the user's code: the innermost frame outside jax, numpy and the gate."""

    path: str  # relative to the repo root when under it, else absolute
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class UserCode:
    """Where the user's code lives, for one region."""

    repo_root: Path
    extra_roots: tuple[Path, ...] = ()

    def _roots(self) -> tuple[str, ...]:
        roots = (self.repo_root, *self.extra_roots)
        return tuple(str(r.resolve()) + os.sep for r in roots)

    def is_library(self, filename: str) -> bool:
        if filename.startswith("<"):  # generated code: the gate's trampolines, exec'd text
            return True
        resolved = _real(filename)
        return (
            resolved.startswith(_GATE_DIR)
            or resolved.startswith(_STDLIB_DIRS)
            or any(marker in resolved for marker in _ENV_MARKERS)
        )

    def is_user(self, filename: str) -> bool:
        if self.is_library(filename):
            return False
        return _real(filename).startswith(self._roots())

    def relative(self, filename: str) -> str:
        resolved = Path(_real(filename))
        try:
            return resolved.relative_to(self.repo_root.resolve()).as_posix()
        except ValueError:
            return str(resolved)

    def locate(self, frames: Sequence[traceback.FrameSummary]) -> SourceLocation | None:
        """The innermost user frame of ``frames`` (outermost first).

        Falls back to the innermost frame that is at least not a library,
        so code outside the repo (an installed package of the user's) is
        still named rather than lost.
        """
        for accept in (self.is_user, lambda f: not self.is_library(f)):
            for frame in reversed(frames):
                if accept(frame.filename):
                    return SourceLocation(
                        self.relative(frame.filename), frame.lineno or 0, frame.name
                    )
        return None


def frames_of(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    """The traceback's frames, outermost first."""
    return list(traceback.extract_tb(tb))


def user_frames_text(code: UserCode, frames: Iterable[traceback.FrameSummary]) -> str:
    """A traceback reduced to the user's frames, for report bodies."""
    kept = [f for f in frames if not code.is_library(f.filename)]
    return "".join(traceback.format_list(kept))
