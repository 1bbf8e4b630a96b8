"""Saying which static argument changed where JAX's cache-miss log does not (jax 0.12).

jax 0.10 keeps a jitted call's static arguments in its tracing cache key as
``tree_util.Static`` pytree nodes, so its ``jax_explain_cache_misses`` log says
"* at input path [0][1], now ... Static(val=3) and before ... Static(val=2), so the
pytree node metadata does not match". jax 0.12 keeps them as ``FTStatic`` leaves of
a ``FlatTree`` (``jax._src.flattree``) whose PyTreeDef treats them as plain leaves;
``diff_tracing_cache_keys`` (``jax._src.interpreters.partial_eval``), which compares
the PyTreeDefs, then finds nothing and logs "cache miss explanation unavailable".

`static_values_explained` replaces that function for a block: where JAX found
nothing, it compares the two keys' static leaves and, where some differ, says so in
the words jax 0.10 uses, so `gate.witness.recompiles` reads both versions alike.
Anything unexpected in a key leaves JAX's own answer as it was.

On every version it also adds, after JAX's lines, where a changed static value first differs
and the line that made what differs there (`gate.jaxhooks.changed_value`): JAX prints the
two values whole, a model's static half the same for hundreds of characters.

And it keeps the gate's own jit cache context out of the answer. Each region's step runs
under a context value of its own (`gate.jaxhooks.programs`), part of every key, and JAX
explains a miss by the closest earlier key, where a different context is the closest
difference of all (severity 0). So a function two regions of one worker call (or setup and
a step) had its recompile in the second region explained by the first region's key:
"Tracing context doesn't match ... user_context differs: now ('transfer-gate region', 2)",
not by the argument that changed. A key whose context differs from the new one's only in the
gate's value belongs to another region's programs (or setup's), not to this region's past
calls: it is ranked after every other answer, so the key of the region's own earlier call
explains the miss.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

from gate.jaxhooks.changed_value import described, first_difference
from gate.jaxhooks.patches import attribute_replaced
from gate.jaxhooks.programs import gates_value

_DIFF = "diff_tracing_cache_keys"
# JAX's answer when no difference it knows of explains the miss (its lowest severity).
_UNAVAILABLE = 4
# After all of JAX's answers: a key of another region's programs (`_other_regions`).
_ANOTHER_REGION = _UNAVAILABLE + 1
# What a key's value may print as; a static argument can be a whole model.
_VALUE_LIMIT = 120

Diff = Callable[[Any, Any], tuple[int, int, str]]


def _lookup() -> tuple[types.ModuleType, Diff, tuple[Any, ...] | None] | None:
    """JAX's key-diffing module, its function, and FTStatic, FTTuple, FTDict, FTFiltered
    (None on a JAX without ``flattree``, whose keys hold PyTreeDefs)."""
    try:
        partial_eval = importlib.import_module("jax._src.interpreters.partial_eval")
    except ImportError:
        return None
    diff = partial_eval.__dict__.get(_DIFF)
    if not callable(diff):
        return None
    try:
        flattree = importlib.import_module("jax._src.flattree")
    except ImportError:
        return partial_eval, diff, None
    names = ("FTStatic", "FTTuple", "FTDict", "FTFiltered")
    kinds = tuple(getattr(flattree, name, None) for name in names)
    return partial_eval, diff, kinds if all(isinstance(k, type) for k in kinds) else None


def _statics(tree: Any, kinds: tuple[Any, ...], path: str = "") -> Iterator[tuple[str, Any]]:
    """Each static leaf of a FlatTree with its path as JAX's keystr writes it: ``[1]['n']``."""
    static, group, mapping, filtered = kinds
    if isinstance(tree, static):
        yield path, tree
    elif isinstance(tree, group):
        for index, element in enumerate(tree.elts):
            yield from _statics(element, kinds, f"{path}[{index}]")
    elif isinstance(tree, mapping):
        for key, value in zip(tree.keys, tree._vals, strict=True):
            yield from _statics(value, kinds, f"{path}[{key!r}]")
    elif isinstance(tree, filtered):
        yield from _statics(tree.val, kinds, path)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _VALUE_LIMIT else text[: _VALUE_LIMIT - 1] + "…"


def static_changes(new_tree: Any, old_tree: Any, kinds: tuple[Any, ...]) -> list[str]:
    """JAX-0.10-worded lines for the static leaves that differ; [] when none or not comparable."""
    new, old = dict(_statics(new_tree, kinds)), dict(_statics(old_tree, kinds))
    if new.keys() != old.keys():
        return []  # another pytree: JAX's own diff already covers what it can
    return [
        f"  * at input path {path}, now Static(val={_shown(new[path].val)}) and before "
        f"Static(val={_shown(old[path].val)}), so the static argument's value does not match"
        for path in new
        if new[path] != old[path]
    ]


FIRST_DIFFERS = "  * first differs at "


def first_differences(new_key: Any, old_key: Any, kinds: tuple[Any, ...] | None) -> list[str]:
    """The gate's own lines, after JAX's: where each changed static value first differs, and
    the line that made what differs there (`gate.jaxhooks.changed_value`)."""
    new_tree, old_tree = new_key[1][0], old_key[1][0]
    pairs: list[tuple[str, Any, Any]] = []
    if hasattr(new_tree, "tree") and hasattr(old_tree, "tree"):  # PyTreeDefs: jax 0.10
        pairs.append(("", new_tree.tree, old_tree.tree))
    if kinds is not None:  # FTStatic leaves: jax 0.12
        new, old = dict(_statics(new_tree, kinds)), dict(_statics(old_tree, kinds))
        if new.keys() == old.keys():
            pairs += [(path, new[path].val, old[path].val) for path in new]
    lines = []
    for prefix, new_value, old_value in pairs:
        found = first_difference(new_value, old_value)
        if found is None or not found.path or found.path.endswith("<Static>.val"):
            # A static value that differs whole (a number, a string): JAX's own line says it
            # (or the gate's in JAX's words), by the argument's name (``[1]['lr']``), where a
            # PyTreeDef's path counts children.
            continue
        what, made = described(found)
        where = f" (made at {made[0]}:{made[1]})" if made is not None else ""
        lines.append(f"{FIRST_DIFFERS}{_path_text(prefix + found.path)}: {what}{where}")
    return lines


def _path_text(path: str) -> str:
    """``[0][2]<Static>.val[1][0][3]`` as ``static argument [0][2], at [1][0][3] of its value``;
    ``[0][0]<TrainState>[1][0]`` as ``argument [0][0], at [1][0] of its TrainState's static
    fields``."""
    argument, static, inside = path.partition("<Static>.val")
    if static:
        text = f"static argument {argument or '[]'}"
        return f"{text}, at {inside} of its value" if inside else text
    node = re.search(r"<(\w+)>", argument)
    if node is None:
        return f"argument {argument or '[]'}"
    at = argument[node.end() :]
    text = f"argument {argument[: node.start()] or '[]'}"
    return f"{text}, at {at or '[]'} of its {node[1]}'s static fields"


def _other_regions(new_context: Any, old_context: Any) -> bool:
    """Whether two keys' tracing contexts differ, and only in the gate's own value: the old
    key is another region's (or setup's) program, not an earlier call of this region's."""
    if type(new_context) is not tuple or type(old_context) is not tuple:
        return False
    if len(new_context) != len(old_context):
        return False
    differ = [(n, o) for n, o in zip(new_context, old_context, strict=True) if n != o]
    return bool(differ) and all(gates_value(n) and gates_value(o) for n, o in differ)


def _explaining(original: Diff, kinds: tuple[Any, ...] | None) -> Diff:
    # JAX calls this from inside the user's jitted call: whatever a later JAX passes or
    # returns, it gets JAX's own answer unless the gate's reading of it works out.
    def diff_tracing_cache_keys(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        try:
            new_key, old_key = args
            if _other_regions(new_key[0], old_key[0]):
                return _ANOTHER_REGION, found[1], found[2]
            changes: list[str] = []
            if found[0] == _UNAVAILABLE and kinds is not None:
                changes = static_changes(new_key[1][0], old_key[1][0], kinds)
            extra = first_differences(new_key, old_key, kinds)
        except Exception:  # another signature, result or key shape: JAX's answer stands
            return found
        if changes:
            found = 1, len(changes), "different input pytree:\n" + "\n".join(changes)
        if extra and found[0] != _UNAVAILABLE:
            found = found[0], found[1], found[2] + "\n" + "\n".join(extra)
        return found

    return diff_tracing_cache_keys


@contextlib.contextmanager
def static_values_explained() -> Iterator[bool]:
    """JAX's cache-miss log names changed static arguments in the block; yields whether patched."""
    found = _lookup()
    if found is None:
        yield False
        return
    module, original, kinds = found
    label = f"jax._src.interpreters.partial_eval.{_DIFF}"
    with attribute_replaced(module, _DIFF, _explaining(original, kinds), label=label):
        yield True
