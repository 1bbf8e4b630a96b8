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


# What `ExitCode` means for the commands that run no judged region,
# and each ``--help`` lists only the codes its command returns.
COMMAND_MEANINGS: dict[str, dict[ExitCode, str]] = {
    "baseline": {
        ExitCode.OK: "the baseline was written",
        ExitCode.USAGE: (
            "usage error, invalid policy, or a region errored; the baseline was not written"
        ),
        ExitCode.INTERNAL: _MEANINGS[ExitCode.INTERNAL],
    },
    "validate": {
        ExitCode.OK: "every policy is valid and every callable it names imports",
        ExitCode.REGION_FAILED: (
            "the callables could not be imported where regions run: no worker could start"
        ),
        ExitCode.USAGE: "usage error, invalid policy, or a callable that does not import",
        ExitCode.INTERNAL: _MEANINGS[ExitCode.INTERNAL],
    },
    "merge": {
        ExitCode.OK: "the merged report was written",
        ExitCode.USAGE: "usage error, or an input report that cannot be read or merged",
        ExitCode.INTERNAL: _MEANINGS[ExitCode.INTERNAL],
    },
    "history": {
        ExitCode.OK: "the page and the data were written (with --check: and nothing drifted)",
        ExitCode.REGION_FAILED: (
            "--check: a region's figure grew beyond its policy's drift bound, or a region of "
            "the run before is missing from the newest report"
        ),
        ExitCode.USAGE: (
            "usage error, a report that cannot be read or mixed with the others, or an "
            "invalid policy"
        ),
        ExitCode.INTERNAL: _MEANINGS[ExitCode.INTERNAL],
    },
}


def exit_codes_help(codes: Iterable[ExitCode | DoctorExitCode]) -> str:
    """The ``exit codes:`` table that ends a command's ``--help``."""
    return _table((code.value, code.meaning) for code in codes)


def command_exit_codes_help(command: str) -> str:
    """The ``exit codes:`` table of a `COMMAND_MEANINGS` command."""
    return _table((code.value, meaning) for code, meaning in COMMAND_MEANINGS[command].items())


def _table(rows: Iterable[tuple[int, str]]) -> str:
    return "\n".join(["exit codes:", *(f"  {value}  {meaning}" for value, meaning in rows)])
