"""The vocabulary of JAX's transfer guard: directions, levels, a level per direction.

Below every other module of the gate, and free of any JAX import: the policy parses them,
the witnesses and the region judge with them, the records and reports name them, and
`gate.jaxhooks.guard` maps them onto JAX's context managers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class GuardLevel(enum.Enum):
    """JAX's transfer-guard levels, spelled as JAX spells them."""

    ALLOW = "allow"
    LOG = "log"
    DISALLOW = "disallow"
    LOG_EXPLICIT = "log_explicit"
    DISALLOW_EXPLICIT = "disallow_explicit"

    @property
    def fails_implicit(self) -> bool:
        """True when an implicit transfer at this level fails the region."""
        return self in (GuardLevel.DISALLOW, GuardLevel.DISALLOW_EXPLICIT)

    @property
    def fails_explicit(self) -> bool:
        """True when an explicit transfer (outside a boundary) fails the region."""
        return self is GuardLevel.DISALLOW_EXPLICIT

    @property
    def inside_boundary(self) -> GuardLevel:
        """The level in force while a declared boundary runs.

        A boundary is where explicit transfers are meant to happen, so the
        `*_explicit` levels drop their explicit half there; implicit
        transfers keep the region's level.
        """
        if self is GuardLevel.LOG_EXPLICIT:
            return GuardLevel.LOG
        if self is GuardLevel.DISALLOW_EXPLICIT:
            return GuardLevel.DISALLOW
        return self


class Direction(enum.Enum):
    """Which way a transfer went; the value is the policy key."""

    HOST_TO_DEVICE = "host_to_device"
    DEVICE_TO_HOST = "device_to_host"
    DEVICE_TO_DEVICE = "device_to_device"

    @property
    def label(self) -> str:
        """The spelling JAX uses in its messages, e.g. ``host-to-device``."""
        return self.value.replace("_", "-")

    @classmethod
    def from_label(cls, label: str) -> Direction:
        return cls(label.replace("-", "_"))


@dataclass(frozen=True)
class GuardSpec:
    """One guard level per direction."""

    host_to_device: GuardLevel
    device_to_host: GuardLevel
    device_to_device: GuardLevel

    @classmethod
    def uniform(cls, level: GuardLevel) -> GuardSpec:
        return cls(level, level, level)

    def level(self, direction: Direction) -> GuardLevel:
        if direction is Direction.HOST_TO_DEVICE:
            return self.host_to_device
        if direction is Direction.DEVICE_TO_HOST:
            return self.device_to_host
        return self.device_to_device

    def inside_boundary(self) -> GuardSpec:
        return GuardSpec(
            self.host_to_device.inside_boundary,
            self.device_to_host.inside_boundary,
            self.device_to_device.inside_boundary,
        )

    def describe(self) -> str:
        levels = {self.host_to_device, self.device_to_host, self.device_to_device}
        if len(levels) == 1:
            return self.host_to_device.value
        return ", ".join(f"{d.label}={self.level(d).value}" for d in Direction)
