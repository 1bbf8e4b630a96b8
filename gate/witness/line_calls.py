"""What a user's line will move, worked out before it runs: its one call to a jitted function.

Where a line is one simple statement with one call, to a jitted function,
with plain names or numbers as its arguments, the values those names hold
just before the line runs say which host values the call will move
(`gate.witness.arguments`). Nothing here runs the user's code: names are
looked up in the frame, attributes only through modules.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import types
from dataclasses import dataclass
from typing import Any

from gate.witness.arguments import CallPlan, is_jitted, plan_call

# A line's one call: the callee as a chain of names (``train.sgd_update``),
# then its positional and keyword arguments, each a name or a number.
_Arg = tuple[str, Any]  # ("name", "x") or ("value", 0.1)


@dataclass(frozen=True)
class LineCall:
    """A line's only call, with every argument a plain name or number."""

    callee: tuple[str, ...]
    args: tuple[_Arg, ...]
    kwargs: tuple[tuple[str, _Arg], ...]


_SIMPLE_STATEMENTS = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)


def _callee_chain(node: ast.expr) -> tuple[str, ...] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))


def _argument(node: ast.expr) -> _Arg | None:
    if isinstance(node, ast.Name):
        return ("name", node.id)
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, bool | int | float | complex)
    ):
        return ("value", node.value)
    return None


def _line_call(statement: ast.stmt) -> LineCall | None:
    """The statement's only call, when it is plain enough to name its arguments."""
    calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call)]
    if len(calls) != 1:
        return None
    [call] = calls
    callee = _callee_chain(call.func)
    args = [_argument(a) for a in call.args]
    kwargs = [(k.arg, _argument(k.value)) for k in call.keywords]
    if callee is None or None in args or any(k is None or a is None for k, a in kwargs):
        return None
    return LineCall(
        callee,
        tuple(a for a in args if a is not None),
        tuple((k, a) for k, a in kwargs if k is not None and a is not None),
    )


def line_calls(filename: str) -> dict[int, LineCall]:
    """Per line of the file, its one-line simple statement's only call (see `_line_call`)."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return {}
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, _SIMPLE_STATEMENTS) and node.lineno == node.end_lineno:
            call = _line_call(node)
            if call is not None:
                found[node.lineno] = call
    return found


_MISSING = object()


def _lookup(frame: types.FrameType, name: str) -> Any:
    """A name's value in the frame, as Python would find it; never runs the user's code."""
    for scope in (frame.f_locals, frame.f_globals, vars(builtins)):
        if name in scope:
            return scope[name]
    return _MISSING


def bound_call(
    frame: types.FrameType, call: LineCall
) -> tuple[Any, list[Any], dict[str, Any]] | None:
    """The line's jitted callee and the values of its arguments, read from the frame;
    None when the callee is no jitted function or a name is not found."""
    target = _lookup(frame, call.callee[0])
    for attribute in call.callee[1:]:
        # Only through modules: an attribute of any other object could be a
        # property, and the gate never runs the user's code to find out.
        if not isinstance(target, types.ModuleType):
            return None
        target = vars(target).get(attribute, _MISSING)
    if target is _MISSING or not is_jitted(target):
        return None
    values = []
    for kind, value in call.args:
        found = _lookup(frame, value) if kind == "name" else value
        if found is _MISSING:
            return None
        values.append(found)
    keywords = {}
    for key, (kind, value) in call.kwargs:
        found = _lookup(frame, value) if kind == "name" else value
        if found is _MISSING:
            return None
        keywords[key] = found
    return target, values, keywords


def call_plan(frame: types.FrameType, call: LineCall) -> CallPlan | None:
    """What the line's call will move, if its callee is a jitted function."""
    bound = bound_call(frame, call)
    return plan_call(*bound) if bound is not None else None
