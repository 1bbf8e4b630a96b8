"""JAX's transfer guard, entered and left exactly as a region needs it.

Everything here restores JAX's state in ``finally``: the gate runs many
regions in one process and must not leak a level from one into the next.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from types import FrameType, FunctionType
from typing import Any

from gate.jaxhooks import interpose as _interpose_module
from gate.jaxhooks.guard_text import parse_guard_text
from gate.jaxhooks.internals import guard_setters
from gate.jaxhooks.interpose import interposed
from gate.levels import Direction, GuardSpec
from gate.results.placement import Placement

# JAX's wording, e.g. "INVALID_ARGUMENT: Disallowed host-to-device transfer:
# aval=ShapedArray(float32[8]), dst_sharding=...". Matched loosely on purpose:
# only the direction is required; the array and its destination are read where
# present (`gate.jaxhooks.guard_text`, which knows every version's spelling).
_DISALLOWED = re.compile(
    r"Disallowed (?P<direction>host-to-device|device-to-host|device-to-device)"
)

_CONFIG_NAMES = {
    Direction.HOST_TO_DEVICE: "jax_transfer_guard_host_to_device",
    Direction.DEVICE_TO_HOST: "jax_transfer_guard_device_to_host",
    Direction.DEVICE_TO_DEVICE: "jax_transfer_guard_device_to_device",
}


@dataclass(frozen=True)
class Refusal:
    """What JAX's message says about a disallowed transfer."""

    direction: Direction
    dtype: str | None
    shape: tuple[int, ...] | None
    destination: Placement | None = None  # over several devices, where JAX named it


def parse_refusal(exc: BaseException, all_devices: int | None = None) -> Refusal | None:
    """The disallowed transfer ``exc`` reports, or None if it is another error.

    ``all_devices``: this process's devices, for a destination JAX names without them
    (`gate.jaxhooks.guard_text.parse_guard_text`).
    """
    text = str(exc)
    found = _DISALLOWED.search(text)
    if found is None:
        return None
    said = parse_guard_text(text[found.end() :], all_devices)
    direction = Direction.from_label(found["direction"])
    # A read lands on the host: any sharding it names is the source's (as in the map).
    destination = None if direction is Direction.DEVICE_TO_HOST else said.destination
    return Refusal(direction, said.dtype, said.shape, destination)


@contextmanager
def _global_levels(jax: Any, spec: GuardSpec) -> Iterator[None]:
    # The per-direction context managers are thread-local: a thread the step
    # starts would run under the global setting and escape. So the global
    # setting follows the region too.
    saved = {d: getattr(jax.config, name) for d, name in _CONFIG_NAMES.items()}
    saved_all = jax.config.jax_transfer_guard
    try:
        for direction, name in _CONFIG_NAMES.items():
            jax.config.update(name, spec.level(direction).value)
        yield
    finally:
        for direction, name in _CONFIG_NAMES.items():
            jax.config.update(name, saved[direction])
        jax.config.update("jax_transfer_guard", saved_all)


@contextmanager
def guarded(spec: GuardSpec, *, global_too: bool = True) -> Iterator[None]:
    """Run the body under ``spec``'s level in every direction."""
    import jax

    with ExitStack() as stack:
        if global_too:
            stack.enter_context(_global_levels(jax, spec))
        stack.enter_context(jax.transfer_guard_host_to_device(spec.host_to_device.value))
        stack.enter_context(jax.transfer_guard_device_to_host(spec.device_to_host.value))
        stack.enter_context(jax.transfer_guard_device_to_device(spec.device_to_device.value))
        yield


@contextmanager
def full_tracebacks() -> Iterator[None]:
    """Keep jax's own frames in tracebacks while the region runs.

    JAX filters its frames out of tracebacks; the gate needs them to tell an
    explicit ``jax.device_put``/``jax.device_get`` (the frame the user's line
    called) from an implicit transfer, because JAX's message is the same.
    """
    import jax

    saved = jax.config.values["jax_traceback_filtering"]
    try:
        jax.config.update("jax_traceback_filtering", "off")
        yield
    finally:
        jax.config.update("jax_traceback_filtering", saved)


# The public entry points of explicit transfers, as they appear as frames.
EXPLICIT_ENTRY_POINTS = frozenset(
    {"device_put", "device_get", "device_put_sharded", "device_put_replicated"}
)


def explicit_functions() -> tuple[Callable[..., Any], ...]:
    """The explicit-transfer functions this JAX version has (some are deprecated away)."""
    import jax

    found = []
    for name in sorted(EXPLICIT_ENTRY_POINTS):
        try:
            found.append(getattr(jax, name))
        except AttributeError:
            continue
    return tuple(found)


@contextmanager
def guard_kept_by_the_gate(
    is_user_frame: Callable[[str], bool],
    on_loosen: Callable[[str, FrameType], None],
    on_unkept: Callable[[str], None],
) -> Iterator[None]:
    """While a region runs, the policy decides the guard, not the step.

    A step that wraps its code in ``with jax.transfer_guard("allow")`` (or a
    per-direction one, or ``jax.config.update("jax_transfer_guard...")``)
    would turn the gate off for that code. Calls from the user's code are
    ignored here and reported through ``on_loosen(what, frame)``; JAX's own
    calls (and the gate's) go through. A way this JAX has moved out of reach
    is said through ``on_unkept(why)``: a step loosening the guard that way
    would go unseen, so the region cannot prove its own levels held
    (`gate.region.verdict.Gap`).
    """
    import jax

    state_call_fn, update_fn = guard_setters()
    guard_states = {
        id(getattr(jax, name))
        for name in (
            "transfer_guard_host_to_device",
            "transfer_guard_device_to_host",
            "transfer_guard_device_to_device",
        )
    }

    plumbing = {__file__, _interpose_module.__file__}

    def caller() -> FrameType | None:
        """The frame that called the guard function, past the interposition's own frames."""
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and (
            frame.f_code.co_filename in plumbing
            or frame.f_code.co_filename.startswith("<transfer-gate")
        ):
            frame = frame.f_back
        return frame

    def context(original: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        frame = caller()
        if frame is not None and is_user_frame(frame.f_code.co_filename):
            on_loosen(f"jax.transfer_guard({', '.join(map(repr, args))})", frame)
            return nullcontext()
        return original(*args, **kw)

    def state_call(original: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        frame = caller()
        if (
            args
            and id(args[0]) in guard_states
            and frame is not None
            and is_user_frame(frame.f_code.co_filename)
        ):
            on_loosen(f"{args[0].name}({', '.join(map(repr, args[1:]))})", frame)
            return nullcontext()
        return original(*args, **kw)

    def update(original: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        frame = caller()
        name = str(args[1]) if len(args) > 1 else ""
        if (
            name.startswith("jax_transfer_guard")
            and frame is not None
            and is_user_frame(frame.f_code.co_filename)
        ):
            on_loosen(f"jax.config.update({name!r}, ...)", frame)
            return None
        return original(*args, **kw)

    with ExitStack() as stack:
        for target, wrapper, how in (
            (jax.transfer_guard, context, "jax.transfer_guard(...)"),
            (state_call_fn, state_call, "jax.transfer_guard_<direction>(...)"),
            (update_fn, update, 'jax.config.update("jax_transfer_guard...", ...)'),
        ):
            if isinstance(target, FunctionType):
                stack.enter_context(interposed(target, wrapper))
            else:  # this JAX moved it or made it native: nothing to interpose
                on_unkept(f"this JAX's {how} is out of the gate's reach")
        yield
