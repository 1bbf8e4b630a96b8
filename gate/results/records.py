"""What a run found: frozen records handed from the runner to the reporters.

Reporters only read these; they never re-run anything.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from gate.levels import Direction, GuardSpec
from gate.policy.model import Policy, Region
from gate.results.collective_changes import CommComparison
from gate.results.comparison import BaseComparison, TimingComparison
from gate.results.costs import CostComparison, StepCost
from gate.results.donations import UnusedDonation
from gate.results.errors import RegionError
from gate.results.footprint import Footprint
from gate.results.leaks import StepMemory
from gate.results.machine import Machine
from gate.results.placement import Placement
from gate.user_code import SourceLocation


class Phase(enum.Enum):
    """When during a region a transfer was seen.

    JAX checks some moves (an uncommitted array sent to another device)
    only on a call's first, slow-path execution, so the gate guards the
    first call as well as warmed-up, steady-state calls.
    """

    FIRST_CALL = "first call"
    STEADY_STATE = "steady state"


@dataclass(frozen=True)
class Site:
    """What makes two sightings of a transfer the same finding.

    The line, the direction, the kind, the boundary and thread it happened
    in, which array moved (its dtype and shape; None for an array JAX did
    not describe) and, on a mesh, where it landed: a batch sent replicated
    is another finding than the same batch sent split. The runner's per-run
    counts, the grouping into findings and the baseline's fingerprint all
    key on this one record, so they cannot drift apart.
    """

    direction: Direction
    explicit: bool
    location: SourceLocation | None
    boundary: str | None
    thread: str | None
    dtype: str | None
    shape: tuple[int, ...] | None
    # Over several devices, the sharding a host-to-device or device-to-device transfer
    # landed in; None on one device and for device-to-host.
    destination: Placement | None = None

    @property
    def place(self) -> Site:
        """The same site without the array: where and how, not what."""
        return replace(self, dtype=None, shape=None, destination=None)

    @property
    def described(self) -> bool:
        return self.dtype is not None


def array_text(dtype: str | None, shape: tuple[int, ...] | None) -> str:
    """``float32[8,4]``; ``float32[?]`` when only the dtype is known."""
    dims = ",".join(str(d) for d in shape) if shape is not None else "?"
    return f"{dtype}[{dims}]"


@dataclass(frozen=True)
class Transfer:
    """One transfer the guard reported."""

    direction: Direction
    explicit: bool
    dtype: str | None  # e.g. "float32"; None when JAX did not say
    shape: tuple[int, ...] | None
    location: SourceLocation | None
    phase: Phase
    failing: bool  # whether the region's guard levels make this a failure
    message: str  # JAX's own text (or how the gate saw it), kept for the report body
    boundary: str | None = None  # the declared boundary it happened in
    count: int = 1  # times per step (the most seen in one run of this phase)
    source: str | None = None  # the text of the offending line
    thread: str | None = None  # set when a thread the step started made it
    accepted: bool = False  # listed in the baseline: would fail, but is accepted
    # ``run --base``: the base tree moves the same array at the same place, so this is not new;
    # set together with ``accepted`` (and ``failing`` False).
    in_base: bool = False
    # ``run --base``: what the change did to its line (`gate.results.line_map`), as a
    # reader is told: "changed line", "new line", "moved from a.py:3", "unchanged line; the
    # change at a.py:9 caused it"; "" without a base.
    line_change: str = ""
    # The argument of a jitted call that moved, e.g. "y" or "batch['image']",
    # where the gate could tell for sure (see gate.witness.arguments); else None.
    argument: str | None = None
    # The qualname of the jitted function whose call moved it, when the line called one.
    jitted_call: str | None = None
    # How the host read a fetched value, as the detector saw it ("__float__",
    # "__array__", "__str__", "item", ...), or `gate.results.cause.HOST_CALLBACK_USE`;
    # None when the detector did not see it.
    host_use: str | None = None
    # JAX's fast path logged the move with an empty description, and no
    # described sighting of the same site said which array it was.
    undescribed: bool = False
    # Over several devices: where a host-to-device or device-to-device transfer landed
    # (`Site.destination`), and where a device-to-host read's array lay, as the gate's
    # detector saw it (a split array is gathered whole). None on one device.
    destination: Placement | None = None
    fetched_from: Placement | None = None

    @property
    def site(self) -> Site:
        return Site(
            self.direction,
            self.explicit,
            self.location,
            self.boundary,
            self.thread,
            self.dtype,
            self.shape,
            self.destination,
        )

    @property
    def landed_bytes(self) -> int | None:
        """Bytes that reach the devices (or the host) per occurrence.

        The array's own bytes, times the copies a replicated destination holds: a batch
        sent to ``P()`` over 8 devices lands 8 times, one split 8 ways lands once.
        """
        nbytes = self.nbytes
        if nbytes is None or self.destination is None:
            return nbytes
        return self.destination.landed(nbytes)

    @property
    def nbytes(self) -> int | None:
        """The array's bytes, where JAX said dtype and shape (a mesh logs the global array)."""
        if self.dtype is None or self.shape is None:
            return None
        try:
            import numpy as np

            itemsize = np.dtype(self.dtype).itemsize
        except TypeError:  # bfloat16 and friends without ml_dtypes registered
            itemsize = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}.get(self.dtype, 0)
            if not itemsize:
                return None
        size = 1
        for dim in self.shape:
            size *= dim
        return size * itemsize

    @property
    def kind(self) -> str:
        return "explicit" if self.explicit else "implicit"

    def describe(self) -> str:
        """``host-to-device float32[8]``: direction, dtype and shape."""
        what = self.direction.label
        if self.dtype is not None:
            what += f" {array_text(self.dtype, self.shape)}"
        return what


@dataclass(frozen=True)
class Recompile:
    """A function JAX compiled again after warm-up, at one line of the user's code."""

    function: str  # as JAX names it, e.g. "jit(train_step)"
    location: SourceLocation | None  # the user's call line; None: nothing of theirs ran
    count: int  # compilations over the guarded and timed runs
    runs: int  # how many runs were watched for them
    change: str | None  # what changed, in JAX's words where it said; None when it did not
    failing: bool  # ``recompiles: fail``; False under ``warn``
    source: str | None = None  # the text of the call line
    # A function that compiled more programs in the step's first call and warm-up than it
    # should (`gate.witness.recompiles.startup_recompiles`): ``count`` is its programs there,
    # ``runs`` those calls; ``base_count`` the base's programs (None: no counterpart in the
    # base, or no base, and it compiled again at the same shapes). After warm-up, under
    # ``run --base``, ``base_count`` is the base's compilations at its counterpart
    # (`gate.results.recompile_changes`), None where it has none.
    startup: bool = False
    base_count: int | None = None
    # Where the head's ``accept: {recompiles: ...}`` accepted it, and why; "" where nothing did.
    accepted: str = ""
    # ``run --base``: the base compiles it again too, at least as often (after warm-up), so
    # it is not new; ``failing`` is then False.
    in_base: bool = False
    # ``run --base``: what the change did to its line, as for a transfer ("changed line",
    # "moved from a.py:3", "unchanged line; the change at a.py:9 caused it"); "" without one.
    line_change: str = ""

    @property
    def extra(self) -> int:
        """Compilations more than there should have been: every one after warm-up; in the
        first call and warm-up, those beyond the base's count (or beyond one)."""
        return self.count - (self.base_count or 1) if self.startup else self.count

    def headline(self) -> str:
        """``jit(step) compiled again 22x in 23 runs after warm-up at a.py:12: x: ...``;
        ``jit(step) compiled 2 programs in the first call and warm-up where the base
        compiled 1 at a.py:12: ...`` for a startup one."""
        where = f" at {self.location}" if self.location is not None else ""
        what = f": {self.change}" if self.change else " (JAX did not say what changed)"
        if self.startup:
            than = (
                f"where the base compiled {self.base_count}"
                if self.base_count is not None
                else "at the same shapes"
            )
            return (
                f"{self.function} compiled {self.count} programs in the first call and "
                f"warm-up ({self.runs} calls) {than}{where}{what}"
            )
        than = (
            f" where the base compiled again {self.base_count}x"
            if self.base_count is not None and not self.in_base
            else ""
        )
        return (
            f"{self.function} compiled again {self.count}x in {self.runs} runs after "
            f"warm-up{than}{where}{what}"
        )

    @property
    def beyond_the_base(self) -> bool:
        """More programs in the first call and warm-up than the base's, failing: the kind
        ``accept: {recompiles: ...}`` accepts. A compilation after warm-up is none: every
        later run meets it, with a base or without, as a transfer."""
        return self.failing and self.startup and self.base_count is not None

    def line_note(self) -> str:
        """``run --base``: `` (changed line)``, `` (moved from a.py:3)``; "" without a base."""
        return f" ({self.line_change})" if self.line_change else ""


@dataclass(frozen=True)
class ProgramsCompiled:
    """The programs one function compiled in the step's first call and warm-up (each
    compiles there once; more than once is what a base compares or a weak type explains)."""

    function: str  # as JAX names it, e.g. "jit(train_step)"
    location: SourceLocation | None  # the user's line of its last compile there
    count: int
    change: str | None  # why the last of them compiled, in JAX's words; None: not said
    # Every difference JAX named is a weak type flipping, the shapes and dtypes alike.
    same_shapes: bool = False
    source: str | None = None


@dataclass(frozen=True)
class TimingStats:
    """Step time over the timed runs, in seconds, setup and warm-up excluded."""

    repeats: int
    min_s: float
    p25_s: float
    median_s: float
    p75_s: float
    max_s: float


@dataclass(frozen=True)
class BoundaryCost:
    """Time spent inside one declared boundary during the timed runs."""

    name: str  # the boundary's ``module:qualname``
    calls: int  # over all timed runs
    total_s: float  # over all timed runs
    per_step_s: float  # total_s / timed runs


class CheckName(enum.Enum):
    FINITE = "finite"
    REFERENCE = "reference"
    CUSTOM = "custom"


@dataclass(frozen=True)
class CheckOutcome:
    name: CheckName
    passed: bool
    detail: str  # what was compared and, on failure, what differed


class CoverageJudge(enum.StrEnum):
    """What judged one direction of a region's transfers (`RegionResult.coverage`).

    A ``StrEnum``, so that every report writes the value itself ("device-to-host: gate
    detector", JUnit's ``checked_by`` properties).
    """

    GUARD = "jax guard"
    DETECTOR = "gate detector"
    BOTH = "jax guard + gate detector"
    NOT_CHECKED = "not checked"


def region_key(suite: str, region: str) -> str:
    """``suite.region``: how the report, the baseline, ``--region`` and ``--shard`` name a
    region (a policy's suite, one of its regions)."""
    return f"{suite}.{region}"


@dataclass(frozen=True)
class RegionResult:
    suite: str
    name: str
    policy_path: str
    policy_line: int
    guard: GuardSpec
    transfers: tuple[Transfer, ...] = ()
    error: RegionError | None = None
    timing: TimingStats | None = None
    boundaries: tuple[BoundaryCost, ...] = ()
    checks: tuple[CheckOutcome, ...] = ()
    has_checks: bool = False
    wall_s: float = 0.0
    notes: tuple[str, ...] = ()  # what a reader must know to trust the verdict
    fixed: tuple[str, ...] = ()  # baseline entries that no longer happen
    platform: str = ""  # what JAX ran on, e.g. "cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2"
    # The machine it ran on (read in the worker), which a stored timing keeps; None when the
    # region never reached JAX.
    machine: Machine | None = None
    # Per direction (label), what judged it.
    coverage: tuple[tuple[str, CoverageJudge], ...] = ()
    # Compilations after warm-up (`recompiles: fail` or `warn`; none under `allow`), and
    # functions that compiled more programs than they should in the first call and warm-up.
    recompiles: tuple[Recompile, ...] = ()
    # Programs compiled in the first call and warm-up, per function (what ``--base`` compares).
    startup_programs: tuple[ProgramsCompiled, ...] = ()
    # Every timed run's step time, in seconds, in the order they ran (`timing` summarises them).
    timing_samples: tuple[float, ...] = ()
    # The first call's wall time: compiling (or loading from the run's cache) and the mapped run.
    first_call_s: float | None = None
    # Against the base tree of ``run --base`` (`gate.compare`); None without --base.
    base: BaseComparison | None = None
    # What the region read of its tree (``run --base``'s head); None: not recorded.
    footprint: Footprint | None = None
    # Against the timing ``transfer-gate baseline`` stored; None when not compared.
    timing_vs_baseline: TimingComparison | None = None
    # XLA's figures against those ``transfer-gate baseline`` stored; None when not compared.
    cost_vs_baseline: CostComparison | None = None
    # XLA's accounting of the step's compiled programs (`gate.results.costs`); None: not run.
    cost: StepCost | None = None
    # The step's collectives against those ``transfer-gate baseline`` stored; None: not compared.
    comm_vs_baseline: CommComparison | None = None
    # Donated arguments no output reuses (`gate.results.donations`), judged by ``donation:``.
    donations: tuple[UnusedDonation, ...] = ()
    # The device arrays alive after each run past warm-up, and a leak (`gate.results.leaks`);
    # None: not counted (``memory: {leaks: allow}``, or the region stopped before).
    memory: StepMemory | None = None

    @classmethod
    def of(cls, policy: Policy, region: Region, **fields: Any) -> RegionResult:
        """The result of ``region`` of ``policy``: where it is declared and how it is guarded
        taken from them, every other field from ``fields``."""
        return cls(
            suite=policy.suite,
            name=region.name,
            policy_path=policy.path.as_posix(),
            policy_line=region.line,
            guard=region.guard,
            has_checks=region.checks.any,
            **fields,
        )

    @property
    def classname(self) -> str:
        """``suite.region``, as JUnit's classname, the baseline and ``--region`` name it."""
        return region_key(self.suite, self.name)

    @property
    def failing_transfers(self) -> tuple[Transfer, ...]:
        return tuple(t for t in self.transfers if t.failing)

    @property
    def transfers_failed(self) -> bool:
        return bool(self.failing_transfers)

    @property
    def recompiles_failed(self) -> bool:
        return any(r.failing for r in self.recompiles)

    @property
    def checks_failed(self) -> bool:
        return any(not c.passed for c in self.checks)

    @property
    def donations_failed(self) -> bool:
        return any(d.failing for d in self.donations)

    @property
    def memory_failed(self) -> bool:
        return self.memory is not None and self.memory.failing

    @property
    def comparison_failed(self) -> bool:
        """Slower than the base or the baseline, a result, a cost or a collective beyond it,
        a base that broke."""
        return (
            (self.base is not None and self.base.failing)
            or (self.timing_vs_baseline is not None and self.timing_vs_baseline.failing)
            or (self.cost_vs_baseline is not None and self.cost_vs_baseline.failing)
            or (self.comm_vs_baseline is not None and self.comm_vs_baseline.failing)
        )

    @property
    def passed(self) -> bool:
        return (
            self.error is None
            and not self.transfers_failed
            and not self.checks_failed
            and not self.recompiles_failed
            and not self.donations_failed
            and not self.memory_failed
            and not self.comparison_failed
        )


@dataclass(frozen=True)
class SuiteResult:
    """One policy file's regions."""

    name: str
    policy_path: str
    regions: tuple[RegionResult, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RunResult:
    suites: tuple[SuiteResult, ...]

    @property
    def regions(self) -> tuple[RegionResult, ...]:
        return tuple(r for s in self.suites for r in s.regions)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.regions)
