"""The gate's exit codes: the one list that `--help`, the README and the tests share."""

from __future__ import annotations

import enum
from collections.abc import Iterable


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
    ExitCode.REGION_FAILED: (
        "a region failed (implicit transfer, failed check, slower than the base, "
        "a changed result) or errored"
    ),
    ExitCode.USAGE: "usage error or invalid policy; nothing was run",
    ExitCode.INTERNAL: "the gate itself broke (a bug: please report it)",
}


class DoctorExitCode(enum.IntEnum):
    """``transfer-gate doctor``'s codes: the same numbers as `ExitCode`, read for a machine."""

    OK = ExitCode.OK
    # The expected accelerator is missing, JAX cannot start, or JAX's versions disagree.
    FAILED = ExitCode.REGION_FAILED
    USAGE = ExitCode.USAGE
    INTERNAL = ExitCode.INTERNAL  # as for `run`: the gate itself broke

    @property
    def meaning(self) -> str:
        return _DOCTOR_MEANINGS[self]


_DOCTOR_MEANINGS = {
    DoctorExitCode.OK: "JAX starts (and has the --expect'ed accelerator)",
    DoctorExitCode.FAILED: (
        "the --expect'ed accelerator is missing, JAX cannot start, or jax, jaxlib and the GPU "
        "plugins disagree with each other or with the --requirements"
    ),
    DoctorExitCode.USAGE: "usage error, or a --requirements file that cannot be read",
    DoctorExitCode.INTERNAL: "doctor itself broke (a bug: please report it)",
}


def exit_codes_help(codes: Iterable[ExitCode | DoctorExitCode]) -> str:
    """The ``exit codes:`` table that ends a command's ``--help``."""
    lines = ["exit codes:"]
    lines += [f"  {code.value}  {code.meaning}" for code in codes]
    return "\n".join(lines)
