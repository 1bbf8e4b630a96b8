"""Two trees' code in one process, kept apart: each tree's modules are its own while it runs.

``run --base`` runs the head's regions and the base's in one worker, so that one process
holds the accelerator (a TPU admits one; a GPU's memory is one pool). Both trees define
modules of the same names (``steps``, ``examples.mlp``), and a process has one `sys.modules`.
So each tree (a checkout's root) owns the modules loaded from its own files, and while a
tree's code runs (`Trees.entered`) only its own modules are in `sys.modules`, its root (and
its policy's folders) lead `sys.path`, and the working directory is its root:
- which tree owns a file is `gate.user_code.owning_root`, the rule that also says which frame
  is the user's line: never site-packages or dist-packages, never a virtual environment
  (a ``.venv`` in the repository, as the README installs the gate), the gate's own package or
  the standard library;
- ``import steps`` in the tree's code, at the top of a module or lazily inside a step, finds
  that tree's copy, or imports it from that tree's files, even when the other tree imported an
  installed module of that name first: a module outside the trees whose name the tree ships
  (``mathlib.py`` at its root, a package folder) is set aside while the tree is entered;
- a module outside both trees (jax, flax, an installed package) is the same for both trees,
  and is shared; one a tree's own module displaced is put back when that tree is left, so it
  is never imported again at a switch (a new module would mean new jitted functions, which
  compile again);
- a module the worker imported before any tree's code is everyone's, as in a run of one tree;
- a function keeps its own module's globals whichever tree is entered: the swap only
  decides what an ``import`` statement finds.

The swap is done when the other tree is entered, not on every block: with one tree (a plain
run) nothing ever leaves `sys.modules`. Only new names, and the few top-level names a tree
ships, are looked at when a tree is entered or left, not every module (``run --base``
switches four times a round): ~340 µs a switch with jax, flax and optax imported (~1,130
modules), against a round's runs of milliseconds (`benchmarks/tree_switch.py`).

JAX's process-wide configuration is one per process too: `config_changes` says what a
block changed, so that trees that configure JAX differently (at import, or later in a step)
are never compared in the same process (`gate.compare.session` runs them apart instead).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gate.policy.resolve import python_path
from gate.user_code import is_process_wide, owning_root

_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_SOURCE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES)


def _resolved(path: Path | str) -> str:
    return os.path.realpath(path) + os.sep


def _top_level_names(folder: str) -> frozenset[str]:
    """The modules an ``import`` finds in ``folder``: its modules, extension modules and
    regular packages (a folder without ``__init__.py`` loses to an installed package)."""
    names = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:  # a python_path folder that is not there: it ships nothing
        return frozenset()
    for entry in entries:
        name = entry.name
        if entry.is_dir():
            if name.isidentifier() and os.path.isfile(os.path.join(entry.path, "__init__.py")):
                names.add(name)
            continue
        for suffix in (*_SOURCE_SUFFIXES, *_EXTENSION_SUFFIXES):
            if name.endswith(suffix) and name[: -len(suffix)].isidentifier():
                names.add(name[: -len(suffix)])
    return frozenset(names)


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
    # The top-level names an import finds in its own folders (its root, its policies'
    # python_path folders under its root), and those folders.
    ships: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    # Modules outside the trees that its own modules stand in for while it is entered.
    displaced: dict[str, types.ModuleType] = field(default_factory=dict)


class Trees:
    """The trees whose code this process runs, and which one's modules are in `sys.modules`."""

    def __init__(self) -> None:
        self._trees: dict[str, _Tree] = {}
        self._entries: dict[tuple[Path, tuple[Path, ...]], _Tree] = {}  # as `entered` was asked
        self._current: _Tree | None = None
        self._names_when_entered: set[str] = set()
        # What the process imported before any tree's code: everyone's, never set aside.
        self._before_trees = frozenset(sys.modules)

    @contextlib.contextmanager
    def entered(self, root: Path, paths: Sequence[Path] = ()) -> Iterator[None]:
        """The tree at ``root`` is the one whose modules imports find while the block runs.

        ``paths`` (its policy's python_path) come first on `sys.path`, then ``root``; the
        working directory is ``root``. All three are put back on leaving; the tree's
        modules stay in `sys.modules` until another tree is entered.
        """
        # Entered at each turn of a held region's timed rounds: resolved the first time only.
        tree = self._entries.get((root, tuple(paths)))
        if tree is None:
            resolved = _resolved(root)
            tree = self._trees.setdefault(resolved, _Tree(resolved))
            self._note_folders(tree, paths)
            self._entries[(root, tuple(paths))] = tree
        self._switch_to(tree)
        before = os.getcwd()
        os.chdir(root)
        try:
            with python_path(paths, root):
                yield
        finally:
            os.chdir(before)

    def other_roots(self, root: Path) -> tuple[Path, ...]:
        """The roots of the trees entered so far, but for the one at ``root``."""
        own = _resolved(root)
        return tuple(Path(tree.root) for tree in self._trees.values() if tree.root != own)

    def _note_folders(self, tree: _Tree, paths: Sequence[Path]) -> None:
        """The names ``tree`` ships from its root and from ``paths`` that lie under it."""
        for folder in (*(_resolved(p) for p in paths), tree.root):
            if folder not in tree.folders and folder.startswith(tree.root):
                tree.folders.add(folder)
                tree.ships.update(_top_level_names(folder))

    def _switch_to(self, tree: _Tree) -> None:
        current = self._current
        if current is tree:
            return
        if current is not None:
            self._note_new_modules(current)
            current.saved = {n: m for n in current.owned if (m := sys.modules.get(n)) is not None}
            for name in current.owned:
                sys.modules.pop(name, None)
            sys.modules.update(current.displaced)
            current.displaced = {}
        self._current = tree
        for name in self._shadowed(tree):
            tree.displaced[name] = sys.modules.pop(name)
        for name, module in tree.saved.items():
            present = sys.modules.get(name)
            if present is not None and present is not module:
                tree.displaced[name] = present
        # Anything of this tree's still in sys.modules from before it was first entered (a
        # module the gate's process imported from it) is its own too.
        sys.modules.update(tree.saved)
        tree.owned.update(tree.saved)
        tree.saved = {}
        self._names_when_entered = set(sys.modules)

    def _shadowed(self, tree: _Tree) -> list[str]:
        """Modules outside the trees, with their submodules, under a name ``tree`` ships:
        its own file must be what its ``import`` finds, as when it runs alone."""
        found: list[str] = []
        for name in tree.ships:
            module = sys.modules.get(name)
            if (
                module is None
                or name in self._before_trees
                or any(is_process_wide(f) for f in module_files(module))
                or self._owner(module) is not None
            ):
                continue
            prefix = name + "."
            found.append(name)
            found.extend(n for n in list(sys.modules) if n.startswith(prefix))
        return found

    def _note_new_modules(self, tree: _Tree) -> None:
        """Add to ``tree`` the modules imported since it was entered whose files are its."""
        for name in set(sys.modules) - self._names_when_entered:
            module = sys.modules.get(name)
            if module is not None and self._owner(module) is tree:
                tree.owned.add(name)

    def _owner(self, module: types.ModuleType) -> _Tree | None:
        """The tree ``module`` was loaded from (`gate.user_code.owning_root`), if any."""
        for filename in module_files(module):
            root = owning_root(filename, self._trees)
            if root is not None:
                return self._trees[root]
        return None
