"""A region's footprint in its tree, recorded in the worker (`gate.results.footprint`).

Two sources, because neither alone is enough:
- Python's audit hooks, while the region's job runs: each file opened to be read, each folder
  listed (``os.listdir``, ``os.scandir``, so ``glob`` and ``os.walk`` too), and each module name
  imported, found or not. Installed once per worker (a hook cannot be removed); off between
  jobs, it returns at its first test.
- The modules of the region's callables, and the tree's modules they import, read from their
  sources with `ast` (every ``import`` in the file, those inside functions too). A module an
  earlier region, or the policy check, already imported raises no event now; and every tree
  module in `sys.modules` would be far more than this region reached.

Only paths under the tree's git top level count, and not those in a virtual environment there
(a ``.venv`` in the repository): installed packages are the same for both trees. A name that
resolves outside the tree, or nowhere, leaves the paths where the tree would have shadowed it
as absent. What Python does not see is not recorded: a file read by native code, a path only
tested with ``os.path.exists`` or ``os.stat`` (docs/compare.md).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import FrameType

from gate.results.footprint import Footprint
from gate.user_code import in_venv_below

_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "import"})
# Opened with any of these, a file is written, not (only) read: a region's own output.
_WRITES = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT
# Where the import system lists sys.path folders to find modules, and importlib.metadata to
# find installed packages' versions (the gate's platform line asks): not the region's reading.
_IMPORT_SYSTEM = ("<frozen importlib", os.path.dirname(importlib.__file__) + os.sep)


class FootprintRecorder:
    """The worker's audit hook, and what it heard during the job being recorded."""

    def __init__(self) -> None:
        self._on = False
        self._installed = False
        self._opened: list[str] = []
        self._listed: list[str] = []
        self._imported: list[str] = []
        # What each module file read or listed as it was imported: ("open" or "list", path).
        self._at_import: dict[str, list[tuple[str, str]]] = {}
        # A module file's imports by (path, sha256): parsed once per worker.
        self._imports: dict[tuple[str, str], tuple[tuple[str, bool], ...]] = {}
        # Each file's sha256 by the file as it stands (`_digest`), for the job being recorded.
        self._digests: dict[tuple[str, int, int, int], str] = {}

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Hear the block's opens, listings and imports (the hook is installed on first use)."""
        self.install()
        self._opened, self._listed, self._imported = [], [], []
        self._digests = {}
        self._on = True
        try:
            yield
        finally:
            self._on = False

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> None:
        """Listen from now on: what a module reads as it is imported (before any job, when
        the policies are checked) is kept by module, for every later region that reaches it."""
        if not self._installed:
            sys.addaudithook(_listening(self._heard))
            self._installed = True

    def _heard(self, event: str, args: tuple[object, ...]) -> None:
        try:
            if event == "import":
                if self._on:
                    self._imported.append(str(args[0]))
                return
            try:
                caller: FrameType | None = sys._getframe(2)  # past `_listening`'s hook
            except ValueError:  # raised where no Python frame is (a thread of native code)
                caller = None
            if event == "open":
                path = _path(args[0])
                if path is None or _writes(args):
                    return
                heard = (self._opened, "open")
            elif caller is not None and caller.f_code.co_filename.startswith(_IMPORT_SYSTEM):
                return
            else:
                path = _path("." if args[0] is None else args[0])
                if path is None:
                    return
                heard = (self._listed, "list")
            path = os.path.abspath(path)
            if self._on:
                heard[0].append(path)
            module = _importing(caller)
            if module is not None:
                self._at_import.setdefault(module, []).append((heard[1], path))
        except Exception:  # a hook that raises would fail the region's own call
            return

    def footprint(
        self, top: Path, import_roots: Sequence[Path], modules: Iterable[str]
    ) -> Footprint:
        """What the last recorded job reached under ``top``, its region's callables being
        in ``modules``; ``import_roots``: the tree's folders on `sys.path` (python_path, root)."""
        tree = _Tree(top, tuple(import_roots), self._imports, self._at_import, self._digest)
        for path in self._opened:
            tree.opened(path)
        for name in (*modules, *self._imported):
            tree.module(name)
        for folder in self._listed:
            tree.folder(folder)
        return Footprint(
            files=tuple(sorted(tree.files.items())),
            absent=tuple(sorted(tree.absent - tree.files.keys())),
            listed=tuple(sorted(tree.listed.items())),
        )

    def _digest(self, path: str) -> str:
        """`file_sha256` of ``path``, once in a job for the file as it stands (its inode, size
        and modification time): a job that says what it reached so far (`Job.reports_reach`)
        hashes each file once, not again for the footprint at its end."""
        try:
            stat = os.stat(path)
        except OSError:
            return ""
        key = (os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
        found = self._digests.get(key)
        if found is None:
            found = self._digests[key] = file_sha256(path)
        return found


def _listening(heard: Callable[[str, tuple[object, ...]], None]) -> Callable[..., None]:
    """The audit hook: ``heard`` for the footprint's events alone. A plain function, where a
    bound method as the hook costs every audit event of the worker's life (~5,000 a small
    region, most of them the transfer map's trace function reading ``frame.f_code``) ~0.7 µs
    instead of ~0.2 µs on CPython 3.11 and 3.12: ~3 ms a region on the CPU."""
    events = _EVENTS

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in events:
            heard(event, args)

    return hook


class _Tree:
    """A footprint being gathered: the tree's files, hashed, and its modules' closure."""

    def __init__(
        self,
        top: Path,
        roots: tuple[Path, ...],
        imports: dict[tuple[str, str], tuple[tuple[str, bool], ...]],
        at_import: dict[str, list[tuple[str, str]]],
        digest: Callable[[str], str],
    ) -> None:
        self._digest = digest
        self._at_import = at_import
        self.top = os.path.realpath(top)
        self.roots = roots
        self.files: dict[str, str] = {}
        self.absent: set[str] = set()
        self.listed: dict[str, str] = {}
        self._imports = imports
        self._seen: set[str] = set()
        self._inside: set[str] = set()  # modules whose file is in the tree

    def relative(self, path: str, *, folder: bool = False) -> str | None:
        """``path`` (a ``folder``'s) relative to the top, or None outside it, in git's or
        Python's caches, or in a virtual environment (a folder holding ``pyvenv.cfg``: the
        README's ``.venv``, git-ignored), whose packages both trees' workers import alike
        (`gate.isolation.own_tree`). Only there: a tracked folder of installed packages (a
        vendored ``site-packages``) is the tree's, and each tree has its own copy."""
        real = os.path.realpath(path)
        if real != self.top and not real.startswith(self.top + os.sep):
            return None
        # A folder is told by a stand-in file in it, as `own_tree` tells sys.path entries.
        told = os.path.join(real, "__init__.py") if folder else real
        if real != self.top and in_venv_below(told, self.top + os.sep):
            return None
        relative = Path(os.path.relpath(real, self.top)).as_posix()
        parts = relative.split("/")
        if ".git" in parts or "__pycache__" in parts:
            return None
        return relative

    def opened(self, path: str) -> None:
        relative = self.relative(path)
        if relative is None or relative in self.files:
            return
        if os.path.isfile(path):
            self.files[relative] = self._digest(path)
        elif not os.path.exists(path):
            self.absent.add(relative)

    def folder(self, path: str) -> None:
        relative = self.relative(path, folder=True)
        if relative is None or relative in self.listed:
            return
        try:
            names = os.listdir(path)
        except OSError:
            self.absent.add(relative)
            return
        self.listed[relative] = names_sha256(names)

    def module(self, name: str, *, optional: bool = False) -> None:
        """``name``, its packages, and the tree's modules it imports, each once."""
        if name in self._seen or not name:
            return
        self._seen.add(name)
        package, _, _ = name.rpartition(".")
        if package:
            self.module(package)
        found = sys.modules.get(name)
        file = getattr(found, "__file__", None) if found is not None else None
        if not isinstance(file, str):
            file = None if found is not None else self._candidate(name)
        if file is None or self.relative(file) is None:
            # Found outside the tree, or nowhere: where the tree would shadow it must stay empty.
            # A place the head's tree already fills did not shadow it (the module was imported
            # before the tree was on sys.path: the gate's own package, imported from a .venv,
            # in the gate's repository), nor would the base's: it is not absent.
            if found is None and optional:
                return
            if not package or package in self._inside:
                self.absent.update(
                    relative
                    for relative in self._candidates(name)
                    if not os.path.lexists(os.path.join(self.top, relative))
                )
            return
        self._inside.add(name)
        relative = self.relative(file)
        assert relative is not None
        digest = self.files.get(relative) or self._digest(file)
        self.files[relative] = digest
        for kind, path in self._at_import.get(os.path.abspath(file), ()):
            self.opened(path) if kind == "open" else self.folder(path)
        if file.endswith(".py"):
            for imported, maybe in self._imported_by(file, digest, name):
                self.module(imported, optional=maybe)

    def _candidates(self, name: str) -> list[str]:
        found = (self.relative(str(path)) for path in module_paths(name, self.roots))
        return [relative for relative in found if relative is not None]

    def _candidate(self, name: str) -> str | None:
        return next((str(p) for p in module_paths(name, self.roots) if p.is_file()), None)

    def _imported_by(self, file: str, digest: str, name: str) -> tuple[tuple[str, bool], ...]:
        key = (file, digest)
        if key not in self._imports:
            is_package = os.path.basename(file) == "__init__.py"
            self._imports[key] = _imports(file, name if is_package else name.rpartition(".")[0])
        return self._imports[key]


def module_paths(name: str, roots: Sequence[Path]) -> Iterator[Path]:
    """Where module ``name`` would be imported from under each of ``roots`` in turn (a tree's
    folders on `sys.path`): ``a/b.py``, then ``a/b/__init__.py``. Paths that may not exist."""
    parts = name.split(".")
    for root in roots:
        base = Path(root, *parts)
        yield base.with_name(base.name + ".py")
        yield base / "__init__.py"


def package_paths(modules: Iterable[str], roots: Sequence[Path]) -> Iterator[Path]:
    """`module_paths` of ``modules`` and of every package above each: the files a footprint
    of a region that imports them will hold, where they are in the tree, known before the
    region runs (``run --base`` guesses from them when the base's run may start)."""
    for module in modules:
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            yield from module_paths(".".join(parts[:depth]), roots)


def _importing(frame: FrameType | None) -> str | None:
    """The file of the innermost module being imported on ``frame``'s stack, if any."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and not code.co_filename.startswith("<"):
            return os.path.abspath(code.co_filename)
        frame = frame.f_back
    return None


def _imports(file: str, package: str) -> tuple[tuple[str, bool], ...]:
    """Every module name ``file`` imports anywhere, and whether it may be an attribute instead
    (``from pkg import name``); relative ones made absolute from ``package``."""
    try:
        tree = ast.parse(Path(file).read_bytes(), file)
    except (OSError, SyntaxError, ValueError):
        return ()
    names: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend((alias.name, False) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node.module or "", node.level, package)
            if source is None:
                continue
            if source:
                names.append((source, False))
            prefix = f"{source}." if source else ""
            names.extend((f"{prefix}{a.name}", True) for a in node.names if a.name != "*")
    return tuple(names)


def _absolute(module: str, level: int, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _path(value: object) -> str | None:
    if isinstance(value, int):
        return None  # a file descriptor: its path is not known
    try:
        path = os.fspath(value)  # type: ignore[call-overload]
    except TypeError:
        return None
    return os.fsdecode(path)


def _writes(args: tuple[object, ...]) -> bool:
    mode = args[1] if len(args) > 1 else None
    if isinstance(mode, str):
        return not _WRITES.isdisjoint(mode)
    flags = args[2] if len(args) > 2 else 0
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def file_sha256(path: str) -> str:
    """The file's sha256 hex; "" when it cannot be read (no file has that digest)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return ""
    return digest.hexdigest()


def names_sha256(names: Iterable[str]) -> str:
    """The sha256 hex of a folder's names, sorted."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()
