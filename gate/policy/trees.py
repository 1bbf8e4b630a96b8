"""Two trees' code in one process, kept apart: each tree's modules are its own while it runs.

``run --base`` runs the head's regions and the base's in one worker, so that one process
holds the accelerator (a TPU admits one; a GPU's memory is one pool). Both trees define
modules of the same names (``steps``, ``examples.mlp``), and a process has one `sys.modules`.
So each tree (a checkout's root) owns the modules whose files lie under its root, and while a
tree's code runs (`Trees.entered`) only its own modules are in `sys.modules`, its root (and
its policy's folders) lead `sys.path`, and the working directory is its root:
- ``import steps`` in the tree's code, at the top of a module or lazily inside a step, finds
  that tree's copy, or imports it from that tree's files;
- a module outside both roots (jax, flax, a folder both trees' policies name outside the
  repository) is the same file for both trees, and is shared;
- a function keeps its own module's globals whichever tree is entered: the swap only
  decides what an ``import`` statement finds.

The swap is done when the other tree is entered, not on every block: with one tree (a plain
run) nothing ever leaves `sys.modules`. Only new names are looked at when a tree is left, so
a switch costs tens of microseconds, not a scan of every module (``run --base`` switches
four times a round).

JAX's process-wide configuration is one per process too: `config_changes` says what a
block changed, so that trees that configure JAX differently at import are never run in the
same process (`gate.compare.session` runs them one after the other instead).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gate.policy.resolve import python_path

_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _resolved(path: Path) -> str:
    return os.path.realpath(path) + os.sep


def module_files(module: types.ModuleType) -> list[str]:
    """Where ``module`` was loaded from: its file, or a namespace package's folders."""
    files = []
    filename = getattr(module, "__file__", None)
    if isinstance(filename, str):
        files.append(filename)
    else:
        spec = getattr(module, "__spec__", None)
        locations = getattr(spec, "submodule_search_locations", None)
        with contextlib.suppress(TypeError):  # a lazy proxy's, or none
            files.extend(str(p) for p in locations or ())
    return files


@dataclass
class _Tree:
    """One checkout: its root, and its modules while another tree's are in `sys.modules`."""

    root: str  # resolved, with a trailing separator
    saved: dict[str, types.ModuleType] = field(default_factory=dict)
    owned: set[str] = field(default_factory=set)  # names of its modules seen so far


class Trees:
    """The trees whose code this process runs, and which one's modules are in `sys.modules`."""

    def __init__(self) -> None:
        self._trees: dict[str, _Tree] = {}
        self._current: _Tree | None = None
        self._names_when_entered: set[str] = set()

    @contextlib.contextmanager
    def entered(self, root: Path, paths: Sequence[Path] = ()) -> Iterator[None]:
        """The tree at ``root`` is the one whose modules imports find while the block runs.

        ``paths`` (its policy's python_path) come first on `sys.path`, then ``root``; the
        working directory is ``root``. All three are put back on leaving; the tree's
        modules stay in `sys.modules` until another tree is entered.
        """
        tree = self._trees.setdefault(_resolved(root), _Tree(_resolved(root)))
        self._switch_to(tree)
        before = os.getcwd()
        os.chdir(root)
        try:
            with python_path(paths, root):
                yield
        finally:
            os.chdir(before)

    def _switch_to(self, tree: _Tree) -> None:
        current = self._current
        if current is tree:
            return
        if current is not None:
            self._note_new_modules(current)
            current.saved = {n: m for n in current.owned if (m := sys.modules.get(n)) is not None}
            for name in current.owned:
                sys.modules.pop(name, None)
        # Anything of this tree's still in sys.modules from before it was first entered (a
        # module the gate's process imported from it) is its own too.
        self._current = tree
        sys.modules.update(tree.saved)
        tree.owned.update(tree.saved)
        tree.saved = {}
        self._names_when_entered = set(sys.modules)

    def extension_modules(self) -> tuple[str, ...]:
        """The compiled extension modules of the tree entered last, by name."""
        tree = self._current
        if tree is None:
            return ()
        self._note_new_modules(tree)
        return tuple(
            sorted(
                name
                for name in tree.owned
                if any(f.endswith(_EXTENSION_SUFFIXES) for f in module_files(sys.modules[name]))
            )
        )

    def _note_new_modules(self, tree: _Tree) -> None:
        """Add to ``tree`` the modules imported since it was entered whose files are its."""
        for name in set(sys.modules) - self._names_when_entered:
            module = sys.modules.get(name)
            if module is not None and self._owner(module) is tree:
                tree.owned.add(name)

    def _owner(self, module: types.ModuleType) -> _Tree | None:
        """The tree ``module`` was loaded from: the one with the longest root around its file
        (a base checkout may lie inside the head's folder)."""
        owner: _Tree | None = None
        for filename in module_files(module):
            resolved = os.path.realpath(filename)
            for tree in self._trees.values():
                if resolved.startswith(tree.root) and (
                    owner is None or len(tree.root) > len(owner.root)
                ):
                    owner = tree
        return owner


def config_values() -> dict[str, object]:
    """JAX's process-wide configuration now: every option's value, by name."""
    import jax

    return dict(jax.config.values)


def config_changes(before: Mapping[str, object], after: Mapping[str, object]) -> dict[str, str]:
    """The options whose value differs between two `config_values`, each as ``old → new``."""
    return {
        name: f"{before.get(name)!r} → {value!r}"
        for name, value in after.items()
        if name not in before or before[name] != value
    }
