"""The parsed, validated form of a policy file: what `load_policy` returns.

Frozen dataclasses only; no parsing here (`gate.policy.load`) and no running
(`gate.region.engine`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from gate.policy.levels import GuardSpec


@dataclass(frozen=True)
class CallableRef:
    """A ``module:qualname`` reference written in a policy."""

    spec: str
    module: str
    qualname: str
    line: int  # 1-based line in the policy file, for error messages

    def __str__(self) -> str:
        return self.spec


@dataclass(frozen=True)
class Checks:
    """Result checks run on a region's outputs after the guarded runs."""

    finite: bool
    reference: Path | None  # absolute; written relative to the policy file
    rtol: float
    atol: float
    custom: CallableRef | None
    # Set by `run --write-references`, never by a policy: this run writes the
    # reference file from the outputs instead of comparing against it.
    write_reference: bool = False

    @property
    def any(self) -> bool:
        return self.finite or self.reference is not None or self.custom is not None


class RecompileRule(enum.Enum):
    """What a compilation after warm-up does to a region (the policy's ``recompiles:``)."""

    FAIL = "fail"
    WARN = "warn"  # reported, not failing
    ALLOW = "allow"  # not watched at all


@dataclass(frozen=True)
class Region:
    """One critical code region: a step run under the guard."""

    name: str
    line: int  # where the region's mapping starts in the policy file
    step: CallableRef
    setup: CallableRef | None
    boundaries: tuple[CallableRef, ...]
    guard: GuardSpec
    warmup: int
    guarded_runs: int
    repeats: int
    timeout_s: float
    checks: Checks
    recompiles: RecompileRule = RecompileRule.FAIL


@dataclass(frozen=True)
class Policy:
    """One policy file, validated."""

    path: Path  # as given on the command line (repo-relative when it can be)
    version: int
    suite: str
    python_path: tuple[Path, ...]  # absolute
    regions: tuple[Region, ...]
    platform: str | None = None  # "cpu", "gpu" or "tpu": the run fails elsewhere
    # Set in the worker before jax is imported (XLA_FLAGS...), sorted by name.
    env: tuple[tuple[str, str], ...] = ()
