"""What a region's head run looks like against its base: frozen records the reporters read.

Two kinds of "before": the base tree of ``run --base REF``, run in the same
job (`gate.compare`), and the timing stored by ``transfer-gate baseline`` in an
earlier job. Both end in the same `TimingComparison`; only ``against`` says
which, because the thresholds and the reader's trust differ.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from gate.policy.model import AcceptedChange, ChangeKind
from gate.results.collective_changes import CommComparison
from gate.results.costs import CostComparison
from gate.results.errors import RegionError
from gate.text import accepted_text, duration_text


class TimingVerdict(enum.StrEnum):
    """What two samples of step times say. A ``str``, so reports write the value itself."""

    SLOWER = "slower"  # significant, and beyond the allowed slowdown
    FASTER = "faster"  # significant, and beyond the same factor the other way
    UNCHANGED = "unchanged"  # the interval rules out a change as large as the allowed one
    INCONCLUSIVE = "inconclusive"  # noise leaves it open even after the most rounds


@dataclass(frozen=True)
class TimingComparison:
    """Head's step times against the base's (or the stored baseline's)."""

    against: str  # "base" or "baseline", as the report names the other side
    verdict: TimingVerdict
    base_median_s: float
    head_median_s: float
    # head / base: the Hodges-Lehmann estimate, of the rounds' ratios when ``paired``, else of
    # the two samples' (`gate.compare.stats`)
    ratio: float
    ratio_low: float  # the ratio's confidence interval, at ``level``
    ratio_high: float
    p_value: float  # two-sided, of no difference: signed-rank when ``paired``, else Mann-Whitney U
    max_slowdown: float  # the threshold this comparison used
    failing: bool  # slower, and the policy says ``on_regression: fail``
    base_samples: tuple[float, ...] = ()
    head_samples: tuple[float, ...] = ()
    rounds: int = 0  # paired rounds run (0 against a stored baseline)
    what: str = "step"  # "step", or the boundary's name when a boundary is compared
    # Why the verdict was left open though the samples differ ("the two workers ran the
    # reference computation at different speeds, ..."); "" when the samples alone decided.
    reason: str = ""
    # Rounds of one base run and one head run back to back (``--base``), judged by their
    # ratios; False: two samples measured apart (the stored baseline).
    paired: bool = False
    level: float = 0.0  # the interval's confidence
    # The stored baseline's samples were too noisy to bound this comparison when recorded
    # (`gate.results.timing_baseline.TimingNoise`): said beside the verdict, with the fix.
    noisy_baseline: str = ""
    # Where the head's policy accepts this change, and why (`gate.compare.acceptance`): then
    # ``failing`` is False, and every report says it was accepted. "" when it is not.
    accepted: str = ""

    @property
    def test(self) -> str:
        """The test behind ``p_value``, as the reports name it."""
        if self.paired:
            return "Wilcoxon signed-rank on the rounds' ratios, two-sided"
        return "Mann-Whitney U, two-sided"

    def sizes(self) -> str:
        """``32 paired rounds on one core`` (paired) or ``40+20 samples``.

        The paired rounds run both trees on one core, so their medians are not the timed
        runs' (the region's row, all cores): the words say which figure this is."""
        if self.paired:
            rounds = f"{self.rounds} paired round" + ("" if self.rounds == 1 else "s")
            return f"{rounds} on one core"
        return f"{len(self.base_samples)}+{len(self.head_samples)} samples"

    def interval(self) -> str:
        """``interval 1.25-1.40x``, the ratio's at ``level``; unbounded for tiny samples."""
        if math.isinf(self.ratio_high) or math.isinf(self.ratio_low):
            return "no interval: too few samples"
        return f"interval {self.ratio_low:.2f}-{self.ratio_high:.2f}x"

    def headline(self) -> str:
        """``1.32x slower (interval 1.25-1.40x, beyond 1.1x): median 412 µs → 545 µs, 32 paired
        rounds on one core``.

        Every verdict carries the interval it rests on. No p-value: the one of "no
        difference at all" is small for a change well inside the factor, and beside
        "unchanged" it reads as a difference (it is in the testcase's body, named).
        """
        factor = f"{self.max_slowdown:g}x"
        if self.verdict is TimingVerdict.SLOWER:
            lead = f"{self.ratio:.2f}x slower ({self.interval()}, beyond {factor})"
        elif self.verdict is TimingVerdict.FASTER:
            faster = f"{1 / self.ratio:.2f}x faster" if self.ratio > 0 else "faster"
            lead = f"{faster} ({self.ratio:.2f}x, {self.interval()})"
        elif self.verdict is TimingVerdict.UNCHANGED:
            lead = f"unchanged ({self.ratio:.2f}x, {self.interval()}, within {factor})"
        elif self.reason:
            lead = f"inconclusive ({self.ratio:.2f}x, {self.reason})"
        elif math.isinf(self.ratio_high):  # the samples are too small for the interval's level
            lead = f"inconclusive ({self.ratio:.2f}x, too few samples for an interval)"
        elif self.ratio_low > self.max_slowdown:  # past the factor, short of what failing needs
            lead = (
                f"inconclusive ({self.ratio:.2f}x, {self.interval()}: past {factor}, "
                "not yet beyond doubt)"
            )
        else:
            # Open at one end or both: the slowdown's factor, or the speed-up's (1/factor).
            edge = factor if self.ratio_high >= self.max_slowdown else f"1/{factor}"
            lead = f"inconclusive ({self.ratio:.2f}x, {self.interval()} straddles {edge})"
        noisy = f"; the baseline is noisy: {self.noisy_baseline}" if self.noisy_baseline else ""
        return (
            f"{lead}: median {duration_text(self.base_median_s)} → "
            f"{duration_text(self.head_median_s)}, {self.sizes()}{noisy}"
            f"{accepted_text(self.accepted)}"
        )


@dataclass(frozen=True)
class LeafDifference:
    """One output leaf whose head value is not the base's within the region's tolerance."""

    path: str  # the leaf's pytree path, e.g. "['params']['w']"; "" for a bare array output
    detail: str  # "3 of 64 values differ, max abs diff 0.5, max rel diff 0.1 (rtol=…, atol=…)"


class ResultStatus(enum.StrEnum):
    """What the head's outputs are against the base's. A ``str``: reports write the value."""

    MATCHES = "matches"  # every leaf within the region's tolerance
    DIFFERS = "differs"  # a leaf beyond it, or one side's leaves are not the other's
    # The two trees did not compute from the same inputs (setup is random, or differs between
    # them), so there was nothing to compare; ``detail`` says why. Never a gate fault: a gate
    # that cannot fetch the outputs is an internal error of the region, not this.
    NOT_COMPARED = "not compared"


@dataclass(frozen=True)
class ResultComparison:
    """Head's outputs against the base's, leaf by leaf, from setup's (deterministic) inputs."""

    status: ResultStatus
    detail: str
    differences: tuple[LeafDifference, ...] = ()
    accepted: str = ""  # where the head's policy accepts the difference, and why; "" if not

    @property
    def failing(self) -> bool:
        return self.status is ResultStatus.DIFFERS and not self.accepted


class BaseStatus(enum.StrEnum):
    """How far the comparison with the base got for one region."""

    COMPARED = "compared"
    NEW_REGION = "new region, not compared"  # the base's policy has no such region
    BASE_FAILED = "the base could not run it"  # the comparison is an error; the head is judged
    # Every file the head's run read has a byte-identical copy in the base, and the policy
    # entry is the same: the base would run the same code on the same data (`Footprint`).
    UNCHANGED = "unchanged: the same code and data as the base"


@dataclass(frozen=True)
class BoundaryTime:
    """A boundary's time per step, base and head (from each tree's timed runs)."""

    name: str
    base_per_step_s: float | None  # None: the base never called it
    head_per_step_s: float | None


@dataclass(frozen=True)
class Renamed:
    """A callable the base ran from its own policy because it lacks the one the head's names.

    A step (or setup, or boundary) renamed in the change: the head's policy names
    the new name, which the base's code does not have, so the base ran the name
    its own copy of the policy file gives the same region (`gate.compare.own_definition`).
    """

    role: str  # "step", "setup" or "boundary"
    base: str  # the base's ``module:qualname``; "" when the base's policy has none there
    head: str  # the head's in the same place; "" when the head's policy has none there


def renamed_text(renamed: tuple[Renamed, ...]) -> str:
    """``step pkg.steps:clean (the head renamed it pkg.steps:clean2)``, each place joined."""
    return "; ".join(
        f"definition without the head's new {r.role} {r.head}"
        if not r.base
        else f"{r.role} {r.base} (the head renamed it {r.head})"
        if r.head
        else f"{r.role} {r.base} (not in the head's policy)"
        for r in renamed
    )


@dataclass(frozen=True)
class BaseComparison:
    """One region of the head against the same region run from the base tree."""

    base: str  # "HEAD~1 (1a2b3c4)": the ref as given and the commit it named
    status: BaseStatus
    timing: TimingComparison | None = None  # None: `timing: off`, or not compared
    results: ResultComparison | None = None
    boundaries: tuple[BoundaryTime, ...] = ()
    boundary_timing: tuple[TimingComparison, ...] = ()  # `timing: {boundaries: true}`
    base_error: RegionError | None = None  # BASE_FAILED: what the base's run said
    already_in_base: int = 0  # transfers accepted because the base has them too
    # Each tree's first call (compiling included), for the report: never gated, since one
    # sample of it says nothing about noise.
    base_first_call_s: float | None = None
    head_first_call_s: float | None = None
    cost: CostComparison | None = None  # XLA's figures, base vs head (`compare_costs`)
    comm: CommComparison | None = None  # the collectives, base vs head
    # What the base ran from its own policy instead of the head's names (a rename); () when
    # it ran the head's policy as it is.
    renamed: tuple[Renamed, ...] = ()
    # Why the two trees' workers held the device one after the other, and their step times
    # were compared unpaired ("the device admits one process at a time ..."); "" when the
    # workers ran side by side and timed them in paired rounds.
    apart: str = ""
    # UNCHANGED: how many files of the head's footprint the base has, and how many of them
    # as the same code only, their comments or layout changed (`gate.compare.footprint`).
    same_files: int = 0
    same_code_files: int = 0
    # The head's ``accept:`` entries that accepted a change here (`gate.compare.acceptance`).
    accepted: tuple[AcceptedChange, ...] = ()
    # The exact edit that accepts each kind of change, for the failing ones' messages.
    to_accept: tuple[tuple[ChangeKind, str], ...] = ()

    def accept_edit(self, kind: ChangeKind) -> str:
        """``; to accept it, add `accept: {results: …}` to region …``; "" where none applies."""
        edit = dict(self.to_accept).get(kind, "")
        return f"; {edit}" if edit else ""

    @property
    def failing(self) -> bool:
        if self.status is BaseStatus.BASE_FAILED:
            return True
        timings = (self.timing, *self.boundary_timing)
        return (
            any(t is not None and t.failing for t in timings)
            or (self.results is not None and self.results.failing)
            or (self.cost is not None and self.cost.failing)
            or (self.comm is not None and self.comm.failing)
        )


@dataclass(frozen=True)
class StepOutputs:
    """What a region run from one tree hands the comparison: its outputs on the host.

    ``leaves`` are the array leaves of one run's outputs, fetched explicitly
    after the timed runs, with their pytree paths; ``setup_digest`` is a hash
    of setup's array leaves, the same over two calls, or None when two calls
    gave different inputs (then outputs cannot be compared).
    """

    leaves: tuple[tuple[str, Any], ...]  # (path, numpy array)
    setup_digest: str | None
    setup_leaves: int = 0  # how many array leaves setup's digest covers
    # Where the step's module was imported from: a base run must import the base's code, not
    # the head's (installed into site-packages, say).
    step_file: str | None = None


@dataclass(frozen=True)
class StepSamples:
    """One round's timed runs of a held region (`gate.region.held`)."""

    step_s: tuple[float, ...]
    boundary_s: tuple[tuple[str, tuple[float, ...]], ...] = ()  # per boundary, per run
    error: RegionError | None = None  # the step raised during the round
