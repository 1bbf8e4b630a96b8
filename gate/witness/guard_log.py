"""The guard's ``log`` lines: making sure jaxlib writes them, and reading one.

JAX's guard in ``log`` mode writes one C++ warning per transfer to file
descriptor 2. The lines vanish when ``TF_CPP_MIN_LOG_LEVEL`` is 2 or more when
jaxlib loads, so the gate sets it before importing jax
(`gate.isolation.environment.prepare_environment`);
`gate.witness.transfer_map` reads the lines while a step runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gate.jaxhooks.guard_text import parse_guard_text
from gate.jaxhooks.internals import set_cpp_log_level
from gate.levels import Direction
from gate.results.placement import Placement

# "W1130 14:10:32.989305 2240 guard_lib.cc:125] host-to-device transfer: aval=..."
# The file:line part changes between JAX versions and the fast path may leave
# the description empty, so only the direction is required.
# Only a real glog line counts: "W1130 14:10:32.989305   2240 file.cc:125] host-to-device
# transfer: ...". The step's own stderr text that merely mentions a transfer must not.
_GUARD_LINE = re.compile(
    r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+(?P<tid>\d+) [^\]]*\] "
    r"(?P<direction>host-to-device|device-to-host|device-to-device) transfer"
)


def warnings_level() -> None:
    """Set jaxlib's C++ log level back to warnings, where the guard's lines are.

    An older or newer jaxlib without the call is left as it is: `capture_works`'s
    canary transfer still tells the truth.
    """
    set_cpp_log_level(1)


@dataclass(frozen=True)
class GuardLine:
    """One line the guard logged: one transfer, or one destination device's part of one."""

    direction: Direction
    dtype: str | None
    shape: tuple[int, ...] | None
    native_thread: int | None
    # Over several devices, where the transfer lands (`gate.results.placement`).
    destination: Placement | None = None
    # How many such lines one transfer writes: JAX logs a host value sent to N devices
    # N times, each line naming the whole array (`GuardText.lines_per_transfer`).
    lines_per_transfer: int = 1


def parse_guard_line(line: str, all_devices: int | None = None) -> GuardLine | None:
    """The transfer a log line reports, or None for any other line.

    ``all_devices``: this process's devices, for a destination JAX names without them.
    """
    found = _GUARD_LINE.match(line)
    if found is None:
        return None
    said = parse_guard_text(line[found.end() :], all_devices)
    direction = Direction.from_label(found["direction"])
    if direction is Direction.DEVICE_TO_HOST:
        # A read lands on the host, once per array (JAX 0.12 logs a split array's gather
        # as one line): a sharding the line may name is where it came from, not a
        # destination, and would part it from the detector's sighting of the same read.
        said = replace(said, destination=None, from_sharded_array=False)
    return GuardLine(
        direction,
        said.dtype,
        said.shape,
        int(found["tid"]),
        said.destination,
        said.lines_per_transfer,
    )
