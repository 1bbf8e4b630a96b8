"""Where two static values of a jitted call first differ, and the line that made what differs.

JAX's cache-miss log prints a changed static argument whole: a ``filter_jit``'s static half of
a model prints as ``(((<function train_step at 0x…>,), PyTreeDef(…)), (None, …,
functools.partial(…)))`` twice, the same for hundreds of characters. The difference is one
object deep inside: a ``functools.partial``, a closure or an object without ``__eq__``, made
again on every call and equal only to itself. `first_difference` walks the two values side by
side (tuples, lists, dicts, dataclasses, pytree definitions, partials, bound methods) to the
first place they differ; `described` says what differs there and, where the source tells,
the line that made it:

- a function (a closure, a lambda): its ``def`` line, which runs again each time it is made;
- a partial or any other object stored on an attribute of an object still alive (the module
  being traced holds it): the line of the owner's class that assigns that attribute
  (`gate.user_code.attribute_line`), ``self._norm = ft.partial(...)``;
- otherwise its class's ``def``.

Run only on a cache miss JAX is explaining, never in a timed run.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import types
from typing import Any

from gate.user_code import attribute_line

# How deep the walk goes, and how many pairs it compares: a model's static half can be large.
_MAX_DEPTH = 24
_BUDGET = 5_000
# What a value may print as in the report.
VALUE_LIMIT = 80


@dataclasses.dataclass(frozen=True)
class Difference:
    """The first place two values differ: its path inside them, and the two objects there."""

    path: str  # ``[1][0][3]``, ``.keywords['norm']``; "" at the top
    new: Any
    old: Any


def first_difference(new: Any, old: Any) -> Difference | None:
    """The first place, in the values' own order, where ``new`` and ``old`` differ; None where
    the walk finds none (or gives up)."""
    budget = [_BUDGET]
    return _walk(new, old, "", 0, budget)


def _equal(new: Any, old: Any) -> bool:
    try:
        return bool(new is old or new == old)
    except Exception:  # an __eq__ that raises (an array's, ambiguous): not the same
        return False


def _walk(new: Any, old: Any, path: str, depth: int, budget: list[int]) -> Difference | None:
    budget[0] -= 1
    if new is old or budget[0] <= 0 or depth > _MAX_DEPTH:
        return None
    if type(new) is not type(old) or _identity_only(new):
        # A partial or a function equals only itself: what it holds need not be looked at.
        return Difference(path, new, old)
    for inner_path, a, b in _parts(new, old):
        found = _walk(a, b, path + inner_path, depth + 1, budget)
        if found is not None:
            return found
    if _parts_known(new):
        return None  # made of parts that compare equal, and compared by them
    return None if _equal(new, old) else Difference(path, new, old)


def _parts_known(value: Any) -> bool:
    return isinstance(value, (tuple, list, dict, functools.partial, types.MethodType)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    )


def _identity_only(value: Any) -> bool:
    """Whether ``value`` equals only itself, whatever its parts: a partial, a function."""
    return isinstance(value, (functools.partial, types.FunctionType))


def _parts(new: Any, old: Any) -> list[tuple[str, Any, Any]]:
    """The parts to compare, each with its path; [] for a value compared whole."""
    if isinstance(new, (tuple, list)):
        if len(new) != len(old):
            return []
        return [(f"[{i}]", a, b) for i, (a, b) in enumerate(zip(new, old, strict=True))]
    if isinstance(new, dict):
        if list(new) != list(old):
            return []
        return [(f"[{k!r:.30}]", new[k], old[k]) for k in new]
    if isinstance(new, functools.partial):
        if new.func is not old.func:
            return [(".func", new.func, old.func)]
        parts = [
            (f".args[{i}]", a, b) for i, (a, b) in enumerate(zip(new.args, old.args, strict=False))
        ]
        if list(new.keywords) == list(old.keywords):
            parts += [(f".keywords[{k!r}]", new.keywords[k], old.keywords[k]) for k in new.keywords]
        return parts
    if isinstance(new, types.MethodType):
        return [
            (".__func__", new.__func__, old.__func__),
            (".__self__", new.__self__, old.__self__),
        ]
    if dataclasses.is_dataclass(new) and not isinstance(new, type):
        return [
            (f".{f.name}", getattr(new, f.name, None), getattr(old, f.name, None))
            for f in dataclasses.fields(new)
        ]
    node_data = getattr(new, "node_data", None)
    if callable(node_data) and callable(getattr(new, "children", None)):
        return _treedef_parts(new, old)
    val = getattr(type(new), "__name__", "") == "Static" and hasattr(new, "val")
    if val:  # jax.tree_util.Static: a static argument's holder in JAX's cache key
        return [("", new.val, old.val)]
    return []


def _treedef_parts(new: Any, old: Any) -> list[tuple[str, Any, Any]]:
    """A pytree definition's node (its type and static metadata), then its children."""
    try:
        new_node, old_node = new.node_data(), old.node_data()
        new_children, old_children = new.children(), old.children()
    except Exception:  # a leaf, or a JAX whose PyTreeDef says less
        return []
    if (new_node is None) != (old_node is None) or len(new_children) != len(old_children):
        return []
    parts = []
    if new_node is not None and old_node is not None:
        if new_node[0] is not old_node[0]:
            return []
        name = getattr(new_node[0], "__name__", "node")
        parts.append((f"<{name}>", new_node[1], old_node[1]))
    pairs = zip(new_children, old_children, strict=True)
    parts += [(f"[{i}]", a, b) for i, (a, b) in enumerate(pairs)]
    return parts


def described(found: Difference) -> tuple[str, tuple[str, int] | None]:
    """What differs, in words, and the file and line that made the new object (None if unknown)."""
    new, old = found.new, found.old
    if type(new) is not type(old):
        return f"{_shown(old)} before, {_shown(new)} now", None
    if isinstance(new, types.FunctionType):
        code = new.__code__
        made = (code.co_filename, code.co_firstlineno)
        if code is old.__code__:
            return (
                f"a new function object {new.__qualname__} on each call (a closure or lambda "
                "made again; a function equals only itself)",
                made,
            )
        return f"{old.__qualname__} before, {new.__qualname__} now", made
    if isinstance(new, functools.partial):
        func = getattr(new.func, "__qualname__", type(new.func).__name__)
        return (
            f"a new functools.partial({func}, …) on each call (a partial equals only itself)",
            _owner_line(new) or _def_line(new.func),
        )
    if isinstance(new, types.MethodType):
        return (
            f"a bound method {new.__func__.__qualname__} of a new object on each call",
            _def_line(new.__func__),
        )
    if getattr(type(new), "__eq__", None) is getattr(object, "__eq__", None):
        kind = type(new).__qualname__
        return (
            f"a new {kind} object on each call (it has no __eq__, so it equals only itself)",
            _owner_line(new) or _def_line(type(new)),
        )
    return f"{_shown(old)} before, {_shown(new)} now", None


def _shown(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 1] + "…"


def _def_line(value: Any) -> tuple[str, int] | None:
    try:
        filename = inspect.getsourcefile(value)
        _, line = inspect.getsourcelines(value)
    except (TypeError, OSError):
        return None
    return (filename, max(line, 1)) if filename else None


def _owner_line(value: Any) -> tuple[str, int] | None:
    """The line that stores ``value`` on an attribute of a live object: its class's assignment.

    The garbage collector's referrers of ``value`` include the object holding it (or that
    object's ``__dict__``, whose own referrer is the object)."""
    for referrer in gc.get_referrers(value):
        owners = [referrer]
        if isinstance(referrer, dict):
            held_by = gc.get_referrers(referrer)
            owners = [o for o in held_by if getattr(o, "__dict__", None) is referrer]
            names = [k for k, v in referrer.items() if v is value and isinstance(k, str)]
        else:
            names = [k for k, v in _own(referrer).items() if v is value]
        for owner in owners:
            if isinstance(owner, (type, types.ModuleType, types.FrameType)):
                continue
            for name in names:
                found = attribute_line(owner, name)
                if found is not None:
                    line, filename = found
                    return filename, line
    return None


def _own(holder: Any) -> dict[str, Any]:
    try:
        own = vars(holder)
    except TypeError:
        return {}
    return own if isinstance(own, dict) else {}
