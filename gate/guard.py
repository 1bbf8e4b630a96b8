"""JAX's transfer guard, entered and left exactly as a region needs it.

Everything here restores JAX's state in ``finally``: the gate runs many
regions in one process and must not leak a level from one into the next.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from gate.guard_levels import Direction, GuardSpec

# JAX's wording, e.g. "INVALID_ARGUMENT: Disallowed host-to-device transfer:
# aval=ShapedArray(float32[8]), dst_sharding=...". Matched loosely on purpose:
# only the direction is required, dtype and shape are extras when present.
_DISALLOWED = re.compile(
    r"Disallowed (?P<direction>host-to-device|device-to-host|device-to-device)"
)
_AVAL = re.compile(r"aval=ShapedArray\((?P<dtype>[a-z0-9_]+)\[(?P<shape>[0-9, ]*)\]")

_CONFIG_NAMES = {
    Direction.HOST_TO_DEVICE: "jax_transfer_guard_host_to_device",
    Direction.DEVICE_TO_HOST: "jax_transfer_guard_device_to_host",
    Direction.DEVICE_TO_DEVICE: "jax_transfer_guard_device_to_device",
}


@dataclass(frozen=True)
class Violation:
    """What JAX's message says about a disallowed transfer."""

    direction: Direction
    dtype: str | None
    shape: tuple[int, ...] | None


def parse_violation(exc: BaseException) -> Violation | None:
    """The disallowed transfer ``exc`` reports, or None if it is another error."""
    text = str(exc)
    found = _DISALLOWED.search(text)
    if found is None:
        return None
    aval = _AVAL.search(text)
    dtype = shape = None
    if aval is not None:
        dtype = aval["dtype"]
        dims = aval["shape"].replace(" ", "")
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    return Violation(Direction.from_label(found["direction"]), dtype, shape)


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
