"""The parsed, validated form of a policy file: what `load_policy` returns.

Frozen dataclasses only; no parsing here (`gate.policy.load`) and no running
(`gate.region.engine`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from gate.levels import GuardSpec
from gate.policy.defaults import default


@dataclass(frozen=True)
class CallableRef:
    """A ``module:qualname`` reference written in a policy."""

    spec: str
    module: str
    qualname: str
    line: int  # 1-based line in the policy file, for error messages; 0: no policy (gate.api)
    # ``path:line`` of the callable's own definition, for a callable handed over without a
    # policy (`gate.api.check_region`): messages point there, as there is no policy line.
    defined_at: str | None = None

    def __str__(self) -> str:
        return self.spec

    def where(self, policy_path: str) -> str | None:
        """Where messages point for this callable: where it is defined, else its policy line."""
        if self.defined_at is not None:
            return self.defined_at
        return f"{policy_path}:{self.line}" if self.line > 0 else None


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


class CollectiveRule(enum.Enum):
    """What a collective the base (or the stored baseline) does not run does to a region
    (the policy's ``collectives:``)."""

    FAIL = "fail"
    WARN = "warn"  # reported, not failing
    ALLOW = "allow"  # listed with the other changes, never failing


class DonationRule(enum.Enum):
    """What a donated argument XLA could not reuse does to a region (``donation:``)."""

    # Reported; fails only where the base (or the stored baseline) reused it: a donation
    # that stopped working, as ``collectives: fail`` fails only a new collective.
    FAIL_NEW = "fail_new"
    FAIL = "fail"  # every unused donation fails
    WARN = "warn"  # reported, not failing
    ALLOW = "allow"  # not looked at


class CompareRule(enum.Enum):
    """When ``run --base`` runs a region from the base too (the policy's ``compare:``)."""

    # Only when the change reached what the head's run read (`gate.results.footprint`).
    CHANGED = "changed"
    ALWAYS = "always"  # every time: the region reads what Python does not see


class LeakRule(enum.Enum):
    """What a step that keeps more device arrays alive after every run does to a region
    (the policy's ``memory: {leaks: ...}``)."""

    FAIL = "fail"
    WARN = "warn"  # reported, not failing
    ALLOW = "allow"  # not counted at all


class TimingAction(enum.Enum):
    """What a timing verdict does to a region: a significant slowdown
    (``timing: {on_regression: ...}``), or one the rounds could not decide (``on_inconclusive``)."""

    FAIL = "fail"
    WARN = "warn"  # reported, not failing


# The schema's defaults (`gate.policy.defaults`) as the records' own types: the records below
# take them from here, and state none of their own.
_ON_REGRESSION = TimingAction(default("timing.on_regression"))
_ON_INCONCLUSIVE = TimingAction(default("timing.on_inconclusive"))
_RECOMPILES = RecompileRule(default("recompiles"))
_COLLECTIVES = CollectiveRule(default("collectives"))
_DONATION = DonationRule(default("donation"))
_LEAKS = LeakRule(default("memory.leaks"))
_COMPARE = CompareRule(default("compare"))


@dataclass(frozen=True)
class TimingRule:
    """How a region's step time is compared (the policy's ``timing:``).

    Two thresholds, because the two comparisons differ in noise: against
    ``--base`` both trees run in the same job, interleaved, on the same
    device; a stored baseline was measured in another job, maybe on another
    runner of the same kind, so only a larger slowdown is told from drift.
    """

    compare: bool = True  # False: ``timing: off``, step time is recorded, never compared
    # Every other default is the schema's (`gate.policy.defaults`); the reasons are here.
    max_slowdown: float = default("timing.max_slowdown")  # against --base
    baseline_max_slowdown: float = default("timing.baseline_max_slowdown")  # against the baseline
    on_regression: TimingAction = _ON_REGRESSION
    # "Could not tell" (noise left the verdict open after the most rounds) warns by default; a
    # team that wants it to block says ``fail``.
    on_inconclusive: TimingAction = _ON_INCONCLUSIVE
    # Paired rounds against --base before the first look, and at most (`gate.compare.timing`).
    # 16: below that, the signed-rank test at a look's level cannot reject anything.
    rounds: int = default("timing.rounds")
    max_rounds: int = default("timing.max_rounds")
    # Timed runs in a tree's turn, at least (`gate.compare.rounds.turn_runs`).
    round_runs: int = default("timing.round_runs")
    boundaries: bool = default("timing.boundaries")  # compare boundary time like step time


@dataclass(frozen=True)
class CostRule:
    """How the compiler's cost accounting is compared (the policy's ``cost:``)."""

    # The largest ratio head/base (or head/baseline) of any cost total that
    # passes; None: every change is reported, none fails.
    max_increase: float | None = None
    # The largest ratio of a work total (flops, transcendentals, bytes accessed) that passes,
    # whether or not ``max_increase`` is set: exact figures, so a default can fail by itself.
    max_work_increase: float = default("cost.max_work_increase")


@dataclass(frozen=True)
class MemoryRule:
    """What the gate does about device memory the step keeps (the policy's ``memory:``)."""

    leaks: LeakRule = _LEAKS


class ChangeKind(enum.StrEnum):
    """What a region's ``accept:`` may accept against ``run --base``: one comparison each."""

    RESULTS = "results"
    COST = "cost"
    TIMING = "timing"
    COLLECTIVES = "collectives"
    DONATIONS = "donations"
    RECOMPILES = "recompiles"  # programs in the first call and warm-up beyond the base's


@dataclass(frozen=True)
class AcceptedChange:
    """One entry of a region's ``accept:``: a change the pull request means to make."""

    kind: ChangeKind
    reason: str  # the reviewer's words, as written
    line: int  # where the entry is in the policy file


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
    recompiles: RecompileRule = _RECOMPILES
    timing: TimingRule = TimingRule()
    cost: CostRule = CostRule()
    collectives: CollectiveRule = _COLLECTIVES
    donation: DonationRule = _DONATION
    memory: MemoryRule = MemoryRule()
    compare: CompareRule = _COMPARE
    accept: tuple[AcceptedChange, ...] = ()  # `gate.policy.acceptance`
    accept_line: int = 0  # where ``accept:`` is written; 0: the region has none


@dataclass(frozen=True)
class DriftRule:
    """How much a region's figures may grow over main's runs (the policy's ``drift:``), read
    by ``transfer-gate history --check`` (`gate.report.history_drift`)."""

    window: int = default("drift.window")
    runs: int = default("drift.runs")  # at each end of the window, for the rank test
    max_step_time: float = default("drift.max_step_time")
    # XLA's counts: exact, so a smaller growth than the noisy time's is told apart.
    max_flops: float = default("drift.max_flops")
    max_bytes_accessed: float = default("drift.max_bytes_accessed")
    max_peak_memory: float = default("drift.max_peak_memory")


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
    drift: DriftRule = DriftRule()


# (where, ref, must be a plain function): one callable a policy names.
NamedCallable = tuple[str, CallableRef, bool]


@dataclass(frozen=True)
class NamedCallables:
    """The callables an invalid policy still names recognisably, and where to import from.

    Here with the model, not with the loader that finds them: a worker receives them to import,
    and a worker never reads YAML (importing the loader, yaml and the schema cost ~33 ms of
    every worker's start).
    """

    path: str  # as problems show it
    python_path: tuple[Path, ...]
    refs: tuple[NamedCallable, ...]
