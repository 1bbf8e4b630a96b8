"""Whether a step can be called as a run calls it: with what its setup returns, or nothing.

A step called with one argument too few raises ``TypeError: missing 1 required
positional argument``, which reads like a bug in the step. Binding setup's
outputs to the step's signature first tells the two apart: a misfit is named
as one (both policy lines, or from `gate.api` where each callable is defined;
what setup gave, what the step takes), and a TypeError raised inside a step
that was called correctly stays the step's own.

Two uses: at run time on setup's actual outputs (`misfit_text`), and in
`validate` (`call_problem`): on setup's return annotation where that gives a
count of values, and, for a region without setup, on whether the step can be
called with nothing at all. When the step's signature cannot be read, nothing
is checked: guessing would refuse a step that works.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gate.policy.model import CallableRef, Policy, Region
from gate.policy.problems import Problem

_FIX = "make setup return what the step takes"
_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def step_signature(step: Callable[..., Any]) -> inspect.Signature | None:
    """The parameters a call to ``step`` must fit, or None when they cannot be read.

    `inspect.signature` follows ``__wrapped__`` (jax.jit, functools.wraps,
    equinox.filter_jit) to the function inside. The outer layer's own
    signature wins when it says more than ``(*args, **kwargs)``: a wrapper
    that supplies an argument itself takes fewer than the function it wraps.
    """
    # ValueError or TypeError for a builtin or extension object without one;
    # anything from a user's object whose __signature__ raises.
    try:
        outer = inspect.signature(step, follow_wrapped=False)
    except Exception:
        outer = None
    if outer is not None and not _passes_anything(outer):
        return outer
    try:
        return inspect.signature(step)
    except Exception:
        return None


@dataclass(frozen=True)
class Misfit:
    """What setup gave and what the step takes, when the two do not fit."""

    returned: str  # "3 values", "a dict (keys: x, y): missing 'lr'"
    takes: str  # "4 (params, x, y, lr)"


def misfit(
    signature: inspect.Signature, args: Sequence[Any], kwargs: dict[str, Any]
) -> Misfit | None:
    """Why ``step(*args, **kwargs)`` cannot bind to ``signature``; None when it can."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        why = " ".join(str(exc).split())
    else:
        return None
    params = list(signature.parameters.values())
    names = _param_list(params)
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = [p for p in positional if p.default is p.empty]
    spread = any(p.kind is p.VAR_POSITIONAL for p in params)
    if not kwargs:
        if len(args) < len(required) or (len(args) > len(positional) and not spread):
            return Misfit(_values(len(args)), f"{_count(params)} {names}")
        keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
        if keyword_only:
            return Misfit(
                "a tuple",
                f"keyword-only {_arguments(keyword_only)} {names}, which only a dict can give",
            )
    if not args:
        return Misfit(_dict_misfit(params, kwargs) or f"a dict ({why})", names)
    return Misfit(f"what the step cannot take ({why})", names)


def misfit_text(
    policy: Policy, region: Region, step: Callable[..., Any], inputs: tuple[Any, Any]
) -> tuple[str, str] | None:
    """What the region's error says (one line, then the details) when setup's outputs
    ``inputs`` do not fit ``step``; None when they fit. `gate.region.inputs` makes the error."""
    if region.setup is None:
        return None
    signature = step_signature(step)
    if signature is None:
        return None
    args, kwargs = inputs
    found = misfit(signature, args, kwargs)
    if found is None:
        return None
    path = policy.path.as_posix()
    message = (
        f"setup {_at(path, region.setup)} returned {found.returned}; "
        f"step {_at(path, region.step)} takes {found.takes}; {_FIX}"
    )
    returned = ", ".join(
        [*(type(a).__name__ for a in args), *(f"{k}={type(v).__name__}" for k, v in kwargs.items())]
    )
    details = (
        f"{message}\n\nsetup {region.setup.spec} returned ({returned})\n"
        f"step {region.step.spec} has the signature {signature}\n"
        "The step was not called."
    )
    return message, details


def call_problem(
    policy: Policy, index: int, setup: Callable[..., Any] | None, step: Callable[..., Any]
) -> Problem | None:
    """A `Problem` when region ``index``'s step cannot be called as a run will call it.

    With a setup, as `annotation_problem` judges it; without one the step is called with
    no argument at all, so a parameter without a default is a policy error at ``step:``
    (`run` would only say ``train_step() missing 4 required positional arguments``).
    """
    if setup is not None:
        return annotation_problem(policy, index, setup, step)
    region = policy.regions[index]
    signature = step_signature(step)
    if signature is None:
        return None
    required = [
        p.name for p in signature.parameters.values() if p.kind not in _VAR and p.default is p.empty
    ]
    if not required:
        return None
    them = "it" if len(required) == 1 else "them"
    return Problem(
        policy.path.as_posix(),
        region.step.line,
        f"regions[{index}].step",
        f"step {region.step.spec} takes {_arguments(required)} and the region has no setup "
        f"to give {them}; add `setup: MODULE:FUNCTION` to the region, a function that returns "
        f"{them} (a tuple in that order, or a dict by name), or give {them} a default",
    )


def annotation_problem(
    policy: Policy, index: int, setup: Callable[..., Any], step: Callable[..., Any]
) -> Problem | None:
    """A `Problem` when setup's return annotation gives a count of values the step can't take.

    Only a fixed-length ``tuple[A, B, C]`` or a NamedTuple gives a count; an
    annotation that does not resolve (a name imported only under
    TYPE_CHECKING) is no evidence either way.
    """
    region = policy.regions[index]
    assert region.setup is not None
    counted = _annotated_count(setup)
    signature = step_signature(step)
    if counted is None or signature is None:
        return None
    count, shown = counted
    found = misfit(signature, [None] * count, {})
    if found is None:
        return None
    return Problem(
        policy.path.as_posix(),
        region.setup.line,
        f"regions[{index}].setup",
        f"setup returns {found.returned} ({shown}); step {region.step.spec} (line"
        f" {region.step.line}) takes {found.takes}; {_FIX}, or fix the annotation",
    )


# --- helpers -------------------------------------------------------------------


def _passes_anything(signature: inspect.Signature) -> bool:
    """``(*args, **kwargs)``: a wrapper that hands every argument on, saying nothing."""
    kinds = {p.kind for p in signature.parameters.values()}
    return bool(kinds) and kinds <= set(_VAR)


def _dict_misfit(params: list[inspect.Parameter], kwargs: dict[str, Any]) -> str | None:
    named = {p.name: p for p in params if p.kind not in _VAR}
    takes_any_name = any(p.kind is p.VAR_KEYWORD for p in params)
    missing = [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is p.empty
        and p.name not in kwargs
    ]
    unknown = [k for k in kwargs if k not in named and not takes_any_name]
    # Given by name or not at all, a positional-only parameter needs a tuple.
    by_position = [
        p.name
        for p in params
        if p.kind is p.POSITIONAL_ONLY and (p.name in kwargs or p.default is p.empty)
    ]
    parts = []
    if missing:
        parts.append(f"missing {_keys(missing)}")
    if unknown:
        parts.append(f"unexpected {_keys(unknown)}")
    if by_position:
        parts.append(f"positional-only {_keys(by_position)} (return a tuple)")
    if not parts:
        return None
    return f"a dict (keys: {', '.join(kwargs) or 'none'}): {', '.join(parts)}"


def _keys(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _count(params: list[inspect.Parameter]) -> str:
    """How many positional values: ``4``, ``1 to 2``, ``at least 1``."""
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = sum(1 for p in positional if p.default is p.empty)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return f"at least {required}"
    if required == len(positional):
        return str(required)
    return f"{required} to {len(positional)}"


def _param_list(params: list[inspect.Parameter]) -> str:
    """``(params, x, lr=..., *, seed)``: names only, as the step's `def` has them."""
    shown = []
    for param in params:
        if param.kind is param.KEYWORD_ONLY and not any(
            p.kind in (p.VAR_POSITIONAL, p.KEYWORD_ONLY) for p in params[: params.index(param)]
        ):
            shown.append("*")
        if param.kind is param.VAR_POSITIONAL:
            shown.append(f"*{param.name}")
        elif param.kind is param.VAR_KEYWORD:
            shown.append(f"**{param.name}")
        elif param.default is param.empty:
            shown.append(param.name)
        else:
            # A default's repr can be a whole array; that there is one is what matters.
            shown.append(f"{param.name}=...")
    return f"({', '.join(shown)})"


def _values(n: int) -> str:
    return f"{n} value" if n == 1 else f"{n} values"


def _arguments(names: Sequence[str]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"argument {quoted}" if len(names) == 1 else f"arguments {quoted}"


def _at(path: str, ref: CallableRef) -> str:
    where = ref.where(path)
    return ref.spec if where is None else f"{ref.spec} ({where})"


def _annotated_count(setup: Callable[..., Any]) -> tuple[int, str] | None:
    """How many values setup's return annotation says, and the annotation as written."""
    function = inspect.unwrap(setup)
    try:
        # Resolves string annotations (from __future__ import annotations) too.
        hint = typing.get_type_hints(function).get("return")
    except Exception:  # a name that does not resolve, or not a function at all
        return None
    if hint is None:
        return None
    written = getattr(function, "__annotations__", {}).get("return")
    shown = written if isinstance(written, str) else _type_text(hint)
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):
        return len(hint._fields), f"NamedTuple {shown} annotation"
    # Bare `tuple` and `typing.Tuple` give no count; `tuple[int, ...]` neither.
    if hint is tuple or hint is typing.Tuple or typing.get_origin(hint) is not tuple:  # noqa: UP006
        return None
    args = typing.get_args(hint)
    if Ellipsis in args:
        return None
    return len(args), f"{shown} annotation"


def _type_text(hint: Any) -> str:
    """``tuple[Params, Array, Array]``: short names, as a user writes them."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if hint is type(None):
        return "None"
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_type_text(a) for a in args)
    if origin is not None and args:
        name = getattr(origin, "__qualname__", str(origin))
        return f"{name}[{', '.join(_type_text(a) for a in args)}]"
    if isinstance(hint, type):
        return hint.__qualname__
    return inspect.formatannotation(hint)
