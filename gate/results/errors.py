"""Why a region could not be judged: the kinds of error, the record, and the gate's own fault.

A leaf of `gate.results`: the records that hold an error (`records`, `comparison`) import it,
and it imports nothing of theirs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gate.user_code import SourceLocation


class ErrorKind(enum.Enum):
    """Why a region could not be judged."""

    SETUP = "setup raised"
    STEP = "step raised"
    BAD_INPUT = "setup returned something unusable"
    # Setup's outputs do not bind to the step's parameters; the step was not called.
    MISFIT = "setup and step don't fit"
    # A jitted call refused its arguments' shardings, devices or memory kinds.
    SHARDING = "shardings don't match"
    BAD_OUTPUT = "step returned something unusable"
    CHECK = "result check could not run"
    IMPORT = "callable did not import"
    PLATFORM = "wrong platform"
    UNCHECKED = "not checked on this platform"
    POLICY = "invalid policy"
    BASELINE = "unusable baseline"  # the baseline file cannot be used; nothing ran
    BASE = "unusable base"  # `run --base REF` cannot check REF out; nothing ran
    REGION = "no such region"  # `--region NAME` names none of the policies' regions; nothing ran
    # The accelerator is held by another process past the wait for it: the run stopped.
    DEVICE = "device busy"
    INTERNAL = "gate error"
    # The region's worker process was lost (gate.isolation.scheduler); the rest ran in a fresh one.
    CRASH = "worker crashed"
    TIMEOUT = "timed out"
    CANCELLED = "run cancelled"


@dataclass(frozen=True)
class RegionError:
    kind: ErrorKind
    message: str  # one line
    details: str  # traceback or other full text
    location: SourceLocation | None = None


def gate_fault(doing: str, exc: BaseException | None = None) -> RegionError:
    """The gate's own bug while ``doing`` ("running this region"; "" when outside any task):
    an INTERNAL error, which makes ``run`` exit 3, with ``exc``'s traceback for the report."""
    import traceback

    what = f"transfer-gate itself failed{f' while {doing}' if doing else ''}"
    if exc is None:
        message = f"{what}; this is a bug"
        return RegionError(ErrorKind.INTERNAL, message, message)
    return RegionError(
        ErrorKind.INTERNAL,
        f"{what} ({type(exc).__name__}: {exc}); this is a bug",
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )
