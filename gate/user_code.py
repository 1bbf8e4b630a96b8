"""Which frame of a stack is "the user's line", and how every record names that line.

A transfer happens deep inside jax; the line a person must change is the
innermost frame in their own code. Their code is what lives under the repo
root (or a policy's python_path) outside virtual environments; jax, jaxlib,
numpy, the gate and the standard library never are, wherever pip put them: in
site-packages, or in a folder of their own on ``PYTHONPATH`` (``pip install
--target``, as a TPU VM image may ship JAX), known by the ``*.dist-info`` pip
leaves beside the packages.

Which of the roots (the repo root, a policy's python_path folders) owns a file is
`owning_root`. Where a value was made, read from the source with `ast`, is the line that
assigns a module's global or a class's attribute (`global_lines`, `attribute_line`): both a
leak's holder and a recompile's changed static value are named by it.

A virtual environment is found by its ``pyvenv.cfg`` wherever it lies under a root: the
README's own install puts ``.venv`` in the repository.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import sys
import sysconfig
import traceback
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from gate.package import PACKAGE_DIR

_GATE_DIR = str(Path(PACKAGE_DIR).resolve()) + os.sep
_STDLIB_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    if p
)
_GATE_AND_STDLIB = (_GATE_DIR, *_STDLIB_DIRS)
_ENV_MARKERS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def _root_text(path: Path | str) -> str:
    """A root as the rule compares it: resolved, with a trailing separator."""
    return os.path.realpath(path) + os.sep


@functools.lru_cache(maxsize=16384)
def _real(filename: str) -> str:
    """``os.path.realpath``, remembered: every transfer's stack asks it of the same few
    files, and a region's transfer map reads thousands of frames (a stat call each)."""
    return os.path.realpath(filename)


def is_library(filename: str) -> bool:
    """Whether ``filename`` is never the user's code: generated text, the gate's own package, the
    standard library, or an installed package (site-packages, dist-packages, or a folder on
    ``sys.path`` that pip installed into, `_install_folders`)."""
    if filename.startswith("<"):  # generated code: the gate's trampolines, exec'd text
        return True
    resolved = _real(filename)
    if resolved.startswith(_GATE_AND_STDLIB):
        return True
    if any(marker in resolved for marker in _ENV_MARKERS):
        return True
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: no folder is told from it
        return False
    return resolved.startswith(_install_folders(tuple(sys.path), cwd))


@functools.lru_cache(maxsize=64)
def _install_folders(path: tuple[object, ...], cwd: str) -> tuple[str, ...]:
    """The folders of ``path`` (``sys.path``) that pip installed packages into: each holds a
    ``*.dist-info``. Never a repository's (it holds ``.git``: a tree the gate runs, or the
    user's own checkout on ``PYTHONPATH``) or one around or inside the working directory,
    where the gate runs the user's code."""
    here = _root_text(cwd)
    found = []
    for entry in path:
        if not isinstance(entry, str):  # the import system skips them too
            continue
        root = _root_text(os.path.join(cwd, entry))
        if here.startswith(root) or root.startswith(here) or not _holds_distribution(root):
            continue
        found.append(root)
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _holds_distribution(folder: str) -> bool:
    """Whether ``folder`` holds an installed distribution's ``*.dist-info`` and no ``.git``."""
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return False
    return ".git" not in names and any(name.endswith(".dist-info") for name in names)


@functools.lru_cache(maxsize=4096)
def _holds_venv(folder: str) -> bool:
    """Whether ``folder`` is a virtual environment (it holds ``pyvenv.cfg``)."""
    return os.path.isfile(os.path.join(folder, "pyvenv.cfg"))


def in_venv_below(resolved: str, root: str) -> bool:
    """Whether a folder between ``root`` (excluded: ``python -m venv .`` in a repository
    still leaves its own files the user's) and the file ``resolved`` is a virtual environment."""
    folder = os.path.dirname(resolved)
    while len(folder) >= len(root):  # root ends with a separator: it is never reached
        if _holds_venv(folder):
            return True
        folder = os.path.dirname(folder)
    return False


def owning_root(filename: str, roots: Iterable[str]) -> str | None:
    """Which of ``roots`` (each resolved, ending in a separator) owns the code in ``filename``.

    The longest root around the file (a policy's python_path folder may lie in the repo root),
    unless the file is a library's (`is_library`) or lies in a virtual environment under
    that root: then none does.
    """
    if is_library(filename):
        return None
    resolved = _real(filename)
    owner = max((r for r in roots if resolved.startswith(r)), key=len, default=None)
    if owner is None or in_venv_below(resolved, owner):
        return None
    return owner


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

    @functools.cached_property
    def _own(self) -> frozenset[str]:
        return frozenset(_root_text(r) for r in (self.repo_root, *self.extra_roots))

    def is_library(self, filename: str) -> bool:
        return is_library(filename)

    def is_user(self, filename: str) -> bool:
        return owning_root(filename, self._own) is not None

    @functools.cached_property
    def _resolved_root(self) -> Path:
        # Resolved once: every line the map names asks (a stat call per part of the path).
        return self.repo_root.resolve()

    def relative(self, filename: str) -> str:
        resolved = Path(_real(filename))
        try:
            return resolved.relative_to(self._resolved_root).as_posix()
        except ValueError:
            return str(resolved)

    def shown(self, filename: str) -> str:
        """A file as a report names it: the user's relative to the repository; a library's or
        the standard library's from its package (``optax/_src/alias.py``), not from wherever
        it was installed."""
        if self.is_user(filename):
            return self.relative(filename)
        resolved = _real(filename)
        for marker in _ENV_MARKERS:
            if marker in resolved:
                return resolved.rsplit(marker, 1)[1]
        for stdlib in _STDLIB_DIRS:
            if resolved.startswith(stdlib):
                return resolved[len(stdlib) :]
        return self.relative(filename)

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


@functools.cache
def parsed(filename: str) -> ast.Module | None:
    """The file's syntax tree, or None where it cannot be read or parsed."""
    try:
        with open(filename, encoding="utf-8") as source:
            return ast.parse(source.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return None


def global_lines(module: types.ModuleType) -> dict[str, int]:
    """Where each of a module's globals is first assigned (or defined), by name."""
    tree = parsed(getattr(module, "__file__", None) or "")
    lines: dict[str, int] = {}
    if tree is None:
        return lines
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        for name in names:
            lines.setdefault(name, node.lineno)
    return lines


def attribute_line(holder: Any, name: str) -> tuple[int, str] | None:
    """Where the class of ``holder`` (or ``holder``, a class), or a class it inherits from,
    first assigns ``name``: its line and file; None where no source says."""
    cls = holder if isinstance(holder, type) else type(holder)
    for owner in cls.__mro__:
        if owner is object:
            break
        found = _assigned_in(owner, name)
        if found is not None:
            return found
    return None


def _assigned_in(cls: type, name: str) -> tuple[int, str] | None:
    try:
        filename = inspect.getsourcefile(cls)
    except TypeError:  # a built-in class
        return None
    tree = parsed(filename) if filename else None
    if tree is None or filename is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            # A value stored, not a bare annotation: ``_norm: Callable`` in a dataclass's body
            # declares the field, ``self._norm = ft.partial(...)`` in __init__ makes it.
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign):
                    targets = [t for target in inner.targets for t in ast.walk(target)]
                elif isinstance(inner, (ast.AugAssign, ast.AnnAssign)) and inner.value is not None:
                    targets = list(ast.walk(inner.target))
                else:
                    continue
                for target in targets:
                    line = _stored_at(target, name)
                    if line is not None:
                        return line, filename
    return None


def _stored_at(node: ast.AST, name: str) -> int | None:
    """The line of ``node`` if it assigns ``name`` (``self.name = ...``, or ``name = ...`` in
    a class body); else None."""
    if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Store):
        return node.lineno
    if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
        return node.lineno
    return None
