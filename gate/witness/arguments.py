"""Which argument of a jitted call moved: ``argument 'y' int32[32]``.

JAX moves a jitted call's host values (NumPy arrays and scalars, Python
numbers) one by one, in the flattened order of its dynamic arguments:
positional arguments in call order, then keyword arguments sorted by name,
each in pytree order (``jax.tree_util.tree_flatten``, dict keys sorted);
arrays already on a device and static arguments move nothing. A `CallPlan`
is that list, worked out from the call's own arguments before the call runs;
`match` checks it against what JAX logged and names the moves only when the
two agree exactly (same count, and the dtype and shape of every described
move). Anything the gate cannot know for sure (an argument of an unknown
type, a signature that does not bind) gives no plan: it never guesses.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate.jaxhooks.internals import jit_info


@dataclass(frozen=True)
class Moved:
    """One host value a jitted call will move: its name and what JAX will call it."""

    label: str  # "y", "batch['image']"
    dtype: str  # as JAX names it once canonicalised ("float32" for a NumPy float64)
    shape: tuple[int, ...]


@dataclass(frozen=True)
class CallPlan:
    """What one call of a jitted function moves to the device, in JAX's order."""

    function: str  # the jitted function's qualname
    moves: tuple[Moved, ...]
    # The same moves with keyword arguments in the signature's order, where
    # that differs from sorted by name (JAX is not consistent about which).
    alternative: tuple[Moved, ...] | None = None


def is_jitted(fn: object) -> bool:
    """A ``jax.jit`` function (PjitFunction): it lowers, and wraps a Python function."""
    return callable(fn) and hasattr(fn, "lower") and hasattr(fn, "__wrapped__")


def qualname(fn: object) -> str:
    wrapped: Any = getattr(fn, "__wrapped__", fn)
    return str(getattr(wrapped, "__qualname__", None) or getattr(fn, "__qualname__", "?"))


def _signature(fn: object) -> inspect.Signature | None:
    info = jit_info(fn)
    found = getattr(info, "fun_signature", None)
    if isinstance(found, inspect.Signature):
        return found
    wrapped: Any = getattr(fn, "__wrapped__", fn)
    try:
        return inspect.signature(wrapped)
    except (TypeError, ValueError):
        return None


def _statics(fn: object) -> tuple[frozenset[int], frozenset[str]] | None:
    info = jit_info(fn)
    if info is None:
        return None  # a JAX that keeps this elsewhere: static arguments unknowable
    numbers = getattr(info, "static_argnums", None)
    names = getattr(info, "static_argnames", None)
    if numbers is None or names is None:
        return None
    return frozenset(int(n) for n in numbers), frozenset(str(n) for n in names)


# A leaf already on a device: the call moves nothing of it.
ON_DEVICE = ("", ())


def host_leaf(leaf: Any) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, shape) of a host value JAX will move; `ON_DEVICE`; None if unknowable."""
    import jax
    import numpy as np

    if isinstance(leaf, jax.Array):
        return ON_DEVICE
    if isinstance(leaf, np.ndarray | np.generic):
        dtype = leaf.dtype
    elif isinstance(leaf, bool | int | float | complex):
        dtype = np.asarray(leaf).dtype
    else:
        return None
    try:
        canonical = jax.dtypes.canonicalize_dtype(dtype)
    except (TypeError, ValueError):
        return None
    return str(canonical), tuple(int(d) for d in np.shape(leaf))


def _named_arguments(
    fn: object, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[tuple[str, Any]], list[str]] | None:
    """The call's dynamic positional arguments by parameter name, and its keyword names;
    None when the signature or the static arguments cannot be known."""
    signature = _signature(fn)
    statics = _statics(fn)
    if signature is None or statics is None:
        return None
    static_numbers, static_names = statics
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return None
    params = list(signature.parameters.values())
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    varargs = next((p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    named: list[tuple[str, Any]] = []
    for index, value in enumerate(args):
        if index in static_numbers or index - len(args) in static_numbers:
            continue
        if index < len(positional):
            name = positional[index]
            if name in static_names:
                continue
        elif varargs is not None:
            name = f"{varargs}[{index - len(positional)}]"
        else:
            return None
        named.append((name, value))
    return named, [key for key in kwargs if key not in static_names]


def plan_call(fn: object, args: Sequence[Any], kwargs: Mapping[str, Any]) -> CallPlan | None:
    """What calling the jitted ``fn`` with these arguments moves, or None if not knowable."""
    found = _named_arguments(fn, args, kwargs)
    signature = _signature(fn)
    if found is None or signature is None:
        return None
    named, keywords = found
    params = list(signature.parameters.values())
    # JAX's order for keyword arguments is sorted by name on one path and the
    # signature's order on another; both are planned, and `match` takes only
    # the one a described call agrees with.
    order_in_signature = {p.name: i for i, p in enumerate(params)}
    by_signature = sorted(keywords, key=lambda k: (order_in_signature.get(k, len(params)), k))
    orders = []
    for order in (sorted(keywords), by_signature):
        moves = _moves([*named, *((key, kwargs[key]) for key in order)])
        if moves is None:
            return None
        orders.append(moves)
    sorted_moves, signature_moves = orders
    alternative = signature_moves if signature_moves != sorted_moves else None
    return CallPlan(qualname(fn), sorted_moves, alternative)


def argument_leaves(
    fn: object, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[tuple[str, Any]] | None:
    """Every leaf of the jitted call's dynamic arguments, labelled as `CallPlan` labels them
    (``"batch['image']"``); None when the call cannot be read for sure."""
    import jax

    found = _named_arguments(fn, args, kwargs)
    if found is None:
        return None
    named, keywords = found
    leaves: list[tuple[str, Any]] = []
    for name, value in [*named, *((key, kwargs[key]) for key in sorted(keywords))]:
        try:
            flat, _ = jax.tree_util.tree_flatten_with_path(value)
        except Exception:  # a pytree node whose flattening fails: not knowable
            return None
        leaves.extend((name + jax.tree_util.keystr(path), leaf) for path, leaf in flat)
    return leaves


def _moves(named: Sequence[tuple[str, Any]]) -> tuple[Moved, ...] | None:
    import jax

    moves = []
    for name, value in named:
        try:
            leaves, _ = jax.tree_util.tree_flatten_with_path(value)
        except Exception:  # a pytree node whose flattening fails: not knowable
            return None
        for path, leaf in leaves:
            found = host_leaf(leaf)
            if found is None:
                return None
            if found is ON_DEVICE:
                continue
            moves.append(Moved(name + jax.tree_util.keystr(path), *found))
    return tuple(moves)


def match(
    plan: CallPlan, seen: Sequence[tuple[str | None, tuple[int, ...] | None]]
) -> tuple[Moved, ...] | None:
    """The plan's moves for what JAX logged at the call, in order; None unless they agree.

    ``seen`` is (dtype, shape) per logged host-to-device move, None where the
    fast path left the line empty. A move JAX did not describe cannot confirm
    the order, so a call with such a move is named only when it moves one
    value: a count alone would let a wrong order pass for the right one.
    """
    if not plan.moves or len(seen) != len(plan.moves):
        return None
    if any(dtype is None for dtype, _ in seen) and len(plan.moves) > 1:
        return None
    agreeing = {
        moves
        for moves in (plan.moves, plan.alternative)
        if moves is not None
        and all(
            dtype is None or (dtype, shape) == (move.dtype, move.shape)
            for (dtype, shape), move in zip(seen, moves, strict=True)
        )
    }
    # Both orders fitting what JAX described with different names: not knowable.
    return agreeing.pop() if len(agreeing) == 1 else None
