"""The gate's exit codes: the one list that `--help`, the README and the tests share."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0  # every region passed
    REGION_FAILED = 1  # a region failed or errored
    USAGE = 2  # usage error or invalid policy: nothing was run
    INTERNAL = 3  # the gate itself broke

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "every region passed",
    ExitCode.REGION_FAILED: "a region failed (implicit transfer, failed check) or errored",
    ExitCode.USAGE: "usage error or invalid policy; nothing was run",
    ExitCode.INTERNAL: "the gate itself broke (a bug: please report it)",
}
