"""A step's required parameters, whether it is jitted and which loops call it, read from its
source with `ast`, for ``transfer-gate init``.

``init`` runs in the gate's own process, which must never start JAX on an accelerator, and a
user's module may do just that when imported (``jax.devices("tpu")`` at import). So the
step's ``def`` is found in its file and read, never run. Decorators are not applied:
``@jax.jit`` and ``@partial(jax.jit, static_argnums=...)`` keep the parameters the ``def``
has. Where the source does not say (no file for the module under the folders given, a
qualname bound by assignment such as ``train_step = jax.jit(_step)``, a file that does not
parse), the answer is why not, and ``init`` writes what it wrote before; ``validate``
imports the step and checks it for real (`gate.policy.signature.call_problem`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StepSource:
    """Where a step's ``def`` is, and the parameters a call must give it."""

    path: Path
    line: int
    required: tuple[str, ...]  # parameters without a default, in the def's order


@dataclass(frozen=True)
class LoopCall:
    """A function whose loop calls the step: the loop body is what a region should run."""

    function: str  # its qualname in the module, e.g. "train" or "Trainer.fit"
    path: Path
    line: int  # the loop's line


def module_file(module: str, roots: Sequence[Path]) -> Path | None:
    """The file ``module`` (dotted) imports from under the first of ``roots`` that has it."""
    parts = module.split(".")
    for root in roots:
        for candidate in (
            root.joinpath(*parts).with_suffix(".py"),
            root.joinpath(*parts, "__init__.py"),
        ):
            if candidate.is_file():
                return candidate
    return None


def read_step(module: str, qualname: str, roots: Sequence[Path]) -> StepSource | str:
    """The step ``module:qualname`` as its source defines it, or why the source cannot say."""
    path = module_file(module, roots)
    if path is None:
        return f"no {module.replace('.', '/')}.py under {', '.join(str(r) for r in roots)}"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        return f"{path} could not be read: {type(exc).__name__}"
    scope: list[ast.stmt] = tree.body
    names = qualname.split(".")
    for depth, name in enumerate(names):
        found = _last_definition(scope, name)
        last = depth == len(names) - 1
        if last and isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef):
            return StepSource(path, found.lineno, _required(found.args))
        if not last and isinstance(found, ast.ClassDef):
            scope = found.body
            continue
        kind = "def" if last else "class"
        return f"{'.'.join(names[: depth + 1])} is not a {kind} at the top level of {path}"
    raise AssertionError("unreachable: a qualname has at least one part")


def _last_definition(
    body: Sequence[ast.stmt], name: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None:
    """The last ``def``/``class`` named ``name`` in ``body``: the one Python leaves bound."""
    found = None
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                found = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and name in _targets(
            node
        ):
            found = None  # rebound by assignment (a jit applied by hand): the def says nothing
    return found


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _required(args: ast.arguments) -> tuple[str, ...]:
    """Positional parameters before the defaulted ones, and keyword-only ones without one."""
    positional = [*args.posonlyargs, *args.args]
    without_default = positional[: len(positional) - len(args.defaults)]
    keyword_only = [
        a.arg
        for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        if default is None
    ]
    return (*(a.arg for a in without_default), *keyword_only)


def jitted_by(module: str, qualname: str, roots: Sequence[Path]) -> str | None:
    """How the step is made a jitted function in its source, ``@jax.jit`` or
    ``train_step = jax.jit(...)``; None where it is not (or the source does not say)."""
    path = module_file(module, roots)
    tree = _parsed(path) if path is not None else None
    if tree is None:
        return None
    scope: list[ast.stmt] = tree.body
    *outer, name = qualname.split(".")
    for part in outer:
        found = _last_definition(scope, part)
        if not isinstance(found, ast.ClassDef):
            return None
        scope = found.body
    how = None
    for node in scope:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            jits = [d for d in node.decorator_list if _names_jit(d)]
            how = f"@{ast.unparse(jits[0])}" if jits else None
        elif isinstance(node, ast.Assign | ast.AnnAssign) and name in _targets(node):
            value = node.value
            jit = isinstance(value, ast.Call) and _names_jit(value)
            how = f"{name} = {ast.unparse(value)}" if value is not None and jit else None
    return how


def loop_calls(module: str, qualname: str, roots: Sequence[Path]) -> list[LoopCall]:
    """The functions in the step's package folder whose ``for`` or ``while`` loop calls it
    (by its last name, as ``train_step(...)`` or ``self.train_step(...)``), first by file."""
    path = module_file(module, roots)
    if path is None:
        return []
    name = qualname.rpartition(".")[2]
    found = []
    for candidate in sorted(path.parent.glob("*.py")):
        tree = _parsed(candidate)
        if tree is not None:
            found += [LoopCall(f, candidate, line) for f, line in _loops_calling(tree, name)]
    return found


def _parsed(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _names_jit(node: ast.expr) -> bool:
    """``jax.jit``, ``jit``, ``eqx.filter_jit``, ``nnx.jit``, ``jax.pmap``, or a call of
    one (``partial(jax.jit, ...)``, ``jax.jit(donate_argnums=0)``)."""
    if isinstance(node, ast.Call):
        return _names_jit(node.func) or any(_names_jit(a) for a in node.args)
    last = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return last in ("jit", "pjit", "pmap", "filter_jit", "filter_pmap")


def _loops_calling(tree: ast.Module, name: str) -> list[tuple[str, int]]:
    """(qualname, loop line) of each function, methods included, with a loop that calls
    ``name``; the first such loop of each."""
    found = []

    def visit(body: Sequence[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                loops = [
                    loop
                    for loop in ast.walk(node)
                    if isinstance(loop, ast.For | ast.While | ast.AsyncFor)
                    and any(_calls(n, name) for n in ast.walk(loop))
                ]
                if loops:
                    found.append((f"{prefix}{node.name}", min(loop.lineno for loop in loops)))

    visit(tree.body, "")
    return found


def _calls(node: ast.AST, name: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == name) or (
        isinstance(func, ast.Attribute) and func.attr == name
    )
