"""JAX refusing a jitted call whose arguments' shardings disagree, as one line a person can act on.

JAX 0.10.1 to 0.12 raise a ``ValueError`` worded one of three ways:

    Sharding passed to jit does not match the sharding on the respective arg. Got jit
    sharding: <in_shardings'>,
    arg sharding: <the array's> for arg type: float32[64@data,16]
    Received incompatible devices for jitted computation. Got argument a of f with shape
    float32[64@data,16] and with device ids [0, ..., 7] on platform CPU and argument b of f
    with shape float32[64,16] and with device ids [0] on platform CPU
    Memory kinds passed to jax.jit does not match memory kind on the respective arg. Got jit
    memory kind: pinned_host, arg memory kind: device for arg type: float32[64@data,16]

The first and the last do not say which argument: where the raising line is one plain call
of a jitted function (`gate.witness.line_calls`), the argument is the one leaf of the call's
arguments with that sharding (or memory kind) and type, read from the frame the traceback
keeps. Shardings are said in words (`gate.results.placement`).
"""

from __future__ import annotations

import re
from types import TracebackType
from typing import Any

from gate.jaxhooks.guard_text import parse_sharding
from gate.user_code import UserCode
from gate.witness.arguments import argument_leaves, qualname
from gate.witness.line_calls import bound_call, line_calls

_JIT_SHARDING = re.compile(
    r"Sharding passed to jit does not match the sharding on the respective arg\. "
    r"Got jit sharding: (?P<wanted>.*?),\s*arg sharding: (?P<given>.*) for arg type: (?P<type>\S+)",
    re.DOTALL,
)
_MEMORY_KIND = re.compile(
    r"Memory kinds passed to jax\.jit does not match memory kind on the respective arg\. "
    r"Got jit memory kind: (?P<wanted>[^,]+), arg memory kind: (?P<given>\S+) "
    r"for arg type: (?P<type>\S+)"
)
_DEVICES = re.compile(
    r"Received incompatible devices for jitted computation\. Got (?P<first>.*?) and "
    r"(?P<second>(?:argument|jit's|explicit).*?)(?:\. |$)",
    re.DOTALL,
)
_ARGUMENT = re.compile(
    r"argument (?P<name>.+?) of (?P<function>\S+) with shape (?P<type>\S+) and with device "
    r"ids \[(?P<ids>[0-9, ]*)\]"
)


def describe_mismatch(user: UserCode, exc: BaseException) -> str | None:
    """One line for a sharding mismatch JAX raised, naming the argument and both shardings;
    None for any other error."""
    text = str(exc)
    found = _JIT_SHARDING.search(text)
    if found is not None:
        name = _argument(user, exc, found["type"], lambda leaf: repr(leaf.sharding), found["given"])
        return (
            f"{name} is sharded {_said(found['given'])}, but the jitted function's in_shardings "
            f"say {_said(found['wanted'])}: jax.jit does not move a committed array to another "
            "sharding for you"
        )
    found = _MEMORY_KIND.search(text)
    if found is not None:
        name = _argument(
            user, exc, found["type"], lambda leaf: str(leaf.sharding.memory_kind), found["given"]
        )
        return (
            f"{name} is in memory kind '{found['given']}', but the jitted function's "
            f"in_shardings ask for '{found['wanted'].strip()}'"
        )
    found = _DEVICES.search(text)
    if found is not None:
        said = [
            _device_side(_ARGUMENT.search(found[part]), found[part]) for part in ("first", "second")
        ]
        return (
            f"{said[0]}, but {said[1]}: a jitted call takes arguments on the same devices "
            "(an uncommitted one is moved, a committed one never)"
        )
    return None


def _device_side(side: re.Match[str] | None, text: str) -> str:
    """``argument 'b' float32[64,16] of add is on device 0``; the context mesh as JAX says it."""
    if side is None:
        return " ".join(text.split())
    return (
        f"argument '{side['name']}' {side['type']} of {side['function']} is on "
        f"{_devices(side['ids'])}"
    )


def _devices(ids: str) -> str:
    numbers = [int(n) for n in ids.replace(" ", "").split(",") if n]
    if len(numbers) == 1:
        return f"device {numbers[0]}"
    if numbers and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"devices {numbers[0]}-{numbers[-1]}"
    return f"devices {', '.join(map(str, numbers))}"


def _said(sharding: str) -> str:
    """``P('data') (split 8 ways over 8 devices)``; ``device 3``; else JAX's own text."""
    sharding = " ".join(sharding.split())
    placement = parse_sharding(sharding)
    if placement is not None:
        spread = placement.words().removesuffix(f", {placement.spec}")
        return f"{placement.spec} ({spread})"
    device = re.search(r"SingleDeviceSharding\(device=\w+\(id=(\d+)\)", sharding)
    if device is not None:
        return f"to device {device[1]} alone"
    return sharding


def _argument(
    user: UserCode, exc: BaseException, type_text: str, attribute: Any, value: str
) -> str:
    """``argument 'x' float32[64@data,16] of train_step``, or ``an argument float32[...]``.

    The one leaf of the raising line's jitted call whose ``attribute(leaf)`` is ``value`` and
    whose type JAX printed as ``type_text``; unnamed when the line is not one plain call or
    not exactly one leaf fits.
    """
    unnamed = f"an argument {type_text}"
    frame, line = _user_frame(user, exc.__traceback__)
    if frame is None:
        return unnamed
    call = line_calls(frame.f_code.co_filename).get(line)
    bound = bound_call(frame, call) if call is not None else None
    if bound is None:
        return unnamed
    leaves = argument_leaves(*bound) or []
    fits = [label for label, leaf in leaves if _fits(leaf, type_text, attribute, value)]
    if len(fits) != 1:
        return unnamed
    return f"argument '{fits[0]}' {type_text} of {qualname(bound[0])}"


def _fits(leaf: Any, type_text: str, attribute: Any, value: str) -> bool:
    import jax

    if not isinstance(leaf, jax.Array):
        return False
    try:
        return bool(jax.typeof(leaf).str_short() == type_text and attribute(leaf) == value)
    except Exception:  # naming is a nicety: an array that cannot say is no match
        return False


def _user_frame(user: UserCode, tb: TracebackType | None) -> tuple[Any, int]:
    """The innermost frame of the user's in the traceback, and the line it was on."""
    found: tuple[Any, int] = (None, 0)
    while tb is not None:
        if user.is_user(tb.tb_frame.f_code.co_filename):
            found = (tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    return found
