"""Import the ``module:qualname`` callables a policy names, and say why one doesn't import.

Every message here is one line for a CI log: what failed, where (the policy's
file:line, or the user's file:line for an exception raised on import), and the
fix. Never a traceback.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import chdir, contextmanager
from pathlib import Path
from typing import Any

from gate.package import PACKAGE_DIR
from gate.policy.model import CallableRef, NamedCallable, Policy
from gate.policy.problems import Problem, display_path
from gate.policy.signature import call_problem
from gate.text import did_you_mean
from gate.user_code import UserCode, is_library


class ResolveError(Exception):
    """A policy's callable could not be imported; the message is one line."""


@contextmanager
def python_path(paths: Sequence[Path], repo_root: Path | None = None) -> Iterator[None]:
    """Put ``paths`` (a policy's python_path), then the repo root, first on `sys.path`.

    The repo root defaults to the working directory. `sys.path` is restored in
    place on exit, whatever the body did to it; imported modules stay imported.
    """
    saved = list(sys.path)
    sys.path[:0] = _entries(paths, repo_root)
    try:
        yield
    finally:
        sys.path[:] = saved


@contextmanager
def running_from(root: Path, paths: Sequence[Path] = ()) -> Iterator[None]:
    """The tree at ``root`` is where the block's code runs from: ``paths`` (its policy's
    python_path), then ``root``, first on `sys.path`, and ``root`` the working directory.

    Both are put back on leaving, whatever the block did to them; imported modules stay.
    A worker runs one tree's code (``run --base`` starts the base's in workers of its own),
    so nothing else of the process needs putting back.
    """
    with chdir(root), python_path(paths, root):
        yield


def _entries(paths: Sequence[Path], repo_root: Path | None) -> list[str]:
    root = Path.cwd() if repo_root is None else repo_root
    # The policy's own folders first: they are the more specific.
    return list(dict.fromkeys(os.path.abspath(p) for p in (*paths, root)))


def import_callable(
    ref: CallableRef, python_path: Sequence[Path], repo_root: Path | None = None
) -> Callable[..., Any]:
    """The callable ``ref`` names, imported with ``python_path`` on `sys.path`.

    Raises `ResolveError` when the module does not import, the attribute is
    missing, or it is not callable.
    """
    root = Path.cwd() if repo_root is None else repo_root
    module = _import_module(ref.module, python_path, root)
    return _lookup(module, ref)


def import_boundary(
    ref: CallableRef, python_path: Sequence[Path], repo_root: Path | None = None
) -> types.FunctionType:
    """Like `import_callable`, but only a plain Python function will do.

    The gate patches a boundary's code object, which is what catches both
    ``module.fn()`` and ``from module import fn`` call sites; a jitted or
    otherwise wrapped callable has no code object of its own to patch.
    """
    found = import_callable(ref, python_path, repo_root)
    problem = _boundary_problem(ref, found, Path.cwd() if repo_root is None else repo_root)
    if problem is not None:
        raise ResolveError(problem)
    assert isinstance(found, types.FunctionType)
    return found


def check_callables(policy: Policy, repo_root: Path) -> list[Problem]:
    """One `Problem` per callable of ``policy`` that does not import, in file order.

    Covers every region's step, setup, boundaries and checks.custom, and whether a
    step can take what its setup's return annotation says it returns. A module
    that fails to import is tried once; each reference to it gets the problem.
    """
    refs: list[NamedCallable] = []
    for i, region in enumerate(policy.regions):
        refs.append((f"regions[{i}].step", region.step, False))
        if region.setup is not None:
            refs.append((f"regions[{i}].setup", region.setup, False))
        refs += [
            (f"regions[{i}].boundaries[{j}]", b, True) for j, b in enumerate(region.boundaries)
        ]
        if region.checks.custom is not None:
            refs.append((f"regions[{i}].checks.custom", region.checks.custom, False))
    problems = check_named(policy.path.as_posix(), refs, policy.python_path, repo_root)
    return sorted(problems + _misfits(policy, repo_root, problems), key=lambda p: p.line or 0)


def _misfits(policy: Policy, repo_root: Path, problems: Sequence[Problem]) -> list[Problem]:
    """Steps that cannot take what their setup's return annotation says it returns, or
    that take arguments and have no setup to give them."""
    failed = {p.where for p in problems}
    found = []
    for i, region in enumerate(policy.regions):
        if {f"regions[{i}].step", f"regions[{i}].setup"} & failed:
            continue
        step = import_callable(region.step, policy.python_path, repo_root)
        setup = (
            None
            if region.setup is None
            else import_callable(region.setup, policy.python_path, repo_root)
        )
        problem = call_problem(policy, i, setup, step)
        if problem is not None:
            found.append(problem)
    return found


def check_named(
    path: str, refs: Sequence[NamedCallable], paths: Sequence[Path], repo_root: Path
) -> list[Problem]:
    """One `Problem` per callable in ``refs`` that does not import, in file order."""
    failed: dict[str, ResolveError] = {}
    problems: list[Problem] = []
    for where, ref, boundary in refs:
        try:
            if ref.module in failed:
                raise failed[ref.module]
            try:
                module = _import_module(ref.module, paths, repo_root)
            except ResolveError as exc:
                failed[ref.module] = exc
                raise
            found = _lookup(module, ref)
            problem = _boundary_problem(ref, found, repo_root) if boundary else None
            if problem is not None:
                raise ResolveError(problem)
        except ResolveError as exc:
            problems.append(Problem(path, ref.line, where, str(exc)))
    return sorted(problems, key=lambda p: p.line or 0)


def _import_module(name: str, paths: Sequence[Path], repo_root: Path) -> types.ModuleType:
    with python_path(paths, repo_root):
        entries = _entries(paths, repo_root)
        searched = [display_path(Path(p), repo_root) for p in entries]
        theirs = _their_gate(entries)
        if theirs is not None and name in _CLASHED:
            raise ResolveError(_CLASHED[name])
        before = set(sys.modules) if theirs is not None else set()
        # Files made after start-up (a fresh checkout, a test's tmp_path) must be seen.
        importlib.invalidate_caches()
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            if theirs is not None and _names_own_gate(exc):
                raise ResolveError(_clash(name, theirs, repo_root, exc)) from None
            raise _import_error(name, exc, searched, repo_root) from None
        except SystemExit as exc:  # user code: anything may escape it
            raise ResolveError(_raised_on_import(name, exc, repo_root)) from None
        if theirs is not None:
            binder = _binds_own_gate(set(sys.modules) - before, paths, repo_root)
            if binder is not None:
                raise ResolveError(_clash(name, theirs, repo_root, binder))
        return module


def _import_error(
    name: str, exc: Exception, searched: Sequence[str], repo_root: Path
) -> ResolveError:
    """The one-line error for ``exc``, raised by importing module ``name``."""
    if isinstance(exc, ModuleNotFoundError):
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            return ResolveError(_not_found(name, exc.name, searched, repo_root))
        fix = f"install {exc.name!r} or fix the import" if exc.name else "fix the import"
        return ResolveError(_raised_on_import(name, exc, repo_root, fix))
    return ResolveError(_raised_on_import(name, exc, repo_root))


# -- a `gate` package of the user's -------------------------------------------------
#
# The gate's processes import the gate's own package (gate.isolation.spawn.worker_command), and a
# process holds one module per name: a user's own top-level `gate` cannot be imported next to
# it. When the user's code needs theirs, the region gets one line that says so, not the
# confusing error of the user's code meeting the gate's modules.

_OWN_INIT = os.path.realpath(os.path.join(PACKAGE_DIR, "__init__.py"))
# Module name -> the clash's message, so that a module imported once (it stays in
# sys.modules) gets the same error every time it is asked for.
_CLASHED: dict[str, str] = {}


def _their_gate(entries: Sequence[str]) -> str | None:
    """The user's own top-level `gate` (package or module) on ``entries``, if any.

    Only one that would win over the installed gate in the user's own runs counts: a regular
    package or a module, not a folder without ``__init__.py``, nor this package itself (a
    checkout of the gate).
    """
    for entry in entries:
        for candidate in (
            os.path.join(entry, "gate", "__init__.py"),
            os.path.join(entry, "gate.py"),
        ):
            if os.path.isfile(candidate) and os.path.realpath(candidate) != _OWN_INIT:
                return candidate
    return None


def _is_own_gate(name: object) -> bool:
    # In the gate's processes every module called gate or gate.* is the gate's own.
    return isinstance(name, str) and (name == "gate" or name.startswith("gate."))


def _names_own_gate(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's code failing to find what it wanted in `gate`."""
    if isinstance(exc, ImportError):  # no module gate.x; cannot import name x from gate
        return _is_own_gate(exc.name)
    if isinstance(exc, AttributeError):  # module 'gate' has no attribute x
        obj = getattr(exc, "obj", None)
        return isinstance(obj, types.ModuleType) and _is_own_gate(obj.__name__)
    return False


def _binds_own_gate(
    imported: set[str], paths: Sequence[Path], repo_root: Path
) -> types.ModuleType | None:
    """A module of the user's, among ``imported``, that holds one of the gate's own modules,
    functions or classes: in the user's own runs the name `gate` is their package, so it
    was meant to be theirs."""
    code = UserCode(repo_root, tuple(paths))
    for name in sorted(imported):
        module = sys.modules.get(name)
        filename = getattr(module, "__file__", None)
        if module is None or not isinstance(filename, str) or not code.is_user(filename):
            continue
        for value in list(vars(module).values()):
            held: object
            if isinstance(value, types.ModuleType):
                held = value.__name__
            else:
                try:
                    held = getattr(value, "__module__", None)
                except Exception:  # a lazy proxy that raises: not the gate's
                    continue
            if _is_own_gate(held):
                return module
    return None


def _clash(name: str, theirs: str, repo_root: Path, cause: BaseException | types.ModuleType) -> str:
    if isinstance(cause, types.ModuleType):
        filename = getattr(cause, "__file__", None)
        where: str | None = display_path(Path(filename), repo_root) if filename else None
    else:
        where = _user_frame(cause, repo_root)
    package = display_path(Path(theirs), repo_root).removesuffix("__init__.py")
    uses = f"; {where} imports it" if where else ""
    message = (
        f"importing {name!r} needs your own 'gate' ({package}{uses}), but transfer-gate's own "
        "package is also named 'gate' and one Python process can hold only one of them: rename "
        "yours (or vendor it under another name) and update its imports"
    )
    _CLASHED[name] = message
    return message


def _not_found(name: str, missing: str, searched: Sequence[str], repo_root: Path) -> str:
    parent_name, _, child = missing.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None and hasattr(parent, "__path__"):
        children = [m.name for m in pkgutil.iter_modules(parent.__path__)]
        folders = ", ".join(sorted(display_path(Path(p), repo_root) for p in parent.__path__))
        return (
            f"module {name!r} not found: package {parent_name!r} ({folders}) has no module"
            f" {child!r}{did_you_mean(child, children)}"
        )
    listed = ", ".join("the repo root" if p == "." else p for p in searched)
    return (
        f"module {name!r} not found in {listed} or installed packages;"
        " add the folder that holds it to the policy's `python_path:`"
    )


def _raised_on_import(
    name: str, exc: BaseException, repo_root: Path, fix: str = "fix the module"
) -> str:
    at = _user_frame(exc, repo_root)
    where = f" (at {at})" if at else ""
    return f"importing {name!r} raised {_one_line(exc)}{where}; {fix}"


def _user_frame(exc: BaseException, repo_root: Path) -> str | None:
    """``file:line`` of the innermost frame in the user's code that ``exc`` passed through."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        # The bad line is in a file that never ran, so it is in no frame.
        return f"{display_path(Path(exc.filename), repo_root)}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        filename = frame.filename
        # The standard library and installed packages: a json.loads that raised inside the
        # user's module should be reported at the user's line.
        if is_library(filename):
            continue
        return f"{display_path(Path(filename), repo_root)}:{frame.lineno}"
    return None


def _lookup(module: types.ModuleType, ref: CallableRef) -> Callable[..., Any]:
    found: object = module
    parts = ref.qualname.split(".")
    for depth, part in enumerate(parts):
        owner = (
            f"module {ref.module!r}"
            if depth == 0
            else repr(f"{ref.module}:{'.'.join(parts[:depth])}")
        )
        try:
            found = getattr(found, part)
        except AttributeError:
            names = [n for n in dir(found) if not n.startswith("__")]
            raise ResolveError(
                f"{owner} has no attribute {part!r}{did_you_mean(part, names)}"
            ) from None
        except Exception as exc:  # a property or module __getattr__ that raised
            raise ResolveError(f"getting {part!r} from {owner} raised {_one_line(exc)}") from None
    if not callable(found):
        raise ResolveError(f"{ref.spec!r} is {_kind(found)}, not callable; point at a function")
    return found


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _kind(obj: object) -> str:
    name = type(obj).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _boundary_problem(ref: CallableRef, found: object, repo_root: Path) -> str | None:
    """Why ``found`` cannot be a boundary, or None when it can."""
    if not isinstance(found, types.FunctionType):
        return _not_a_function(ref, found)
    code = found.__code__
    if code.co_name == "<lambda>":
        # A refused transfer's traceback is matched to a boundary by file and
        # function name (`RegionRun._boundary_in`), and every lambda is named
        # "<lambda>": one would claim every other lambda in its file.
        at = f"{display_path(Path(code.co_filename), repo_root)}:{code.co_firstlineno}"
        return (
            f"boundary {ref.spec!r} is a lambda (at {at}), not a named function; define it"
            " with `def` and name that function (the gate tells boundaries apart by"
            " their function's name, and every lambda is called '<lambda>')"
        )
    return None


def _not_a_function(ref: CallableRef, found: object) -> str:
    if isinstance(found, functools.partial):
        kind = "a functools.partial"
    elif hasattr(found, "__wrapped__"):
        kind = f"a wrapped function ({type(found).__name__}, e.g. from jax.jit)"
    else:
        kind = _kind(found)
    return (
        f"boundary {ref.spec!r} is {kind}, not a plain Python function; declare the plain"
        " function that calls jax.device_get (the gate patches its code, so both"
        " `module.fn()` and `from module import fn` call sites are caught)"
    )
