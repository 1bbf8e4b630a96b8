"""Paired rounds of a region held from both trees, each in its own worker: who runs when, on
which core, judged.

A round is four turns: one tree's, then the other's, on one core; the other's, then the
first's, on the next (which tree opens is a coin flip; `gate.region.cores` pins the running
worker's threads for a turn). Each tree's time in a round is the geometric mean of its two
turns' medians; the round's log-ratio head/base is what `gate.compare.timing` judges, at
looks further and further apart, until a look decides. Each tree's worker times its own
turns (`gate.isolation.protocol.Turns`); the two workers take turns, one waiting on its
pipe while the other runs, and a tree's consecutive turns (the middle two of a round) are
one request.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from gate.isolation.cancellation import Cancellation
from gate.isolation.scheduler import Scheduler, Turn, usable_cpus
from gate.plan import region_key
from gate.policy.model import Policy, Region
from gate.results.comparison import StepSamples, TimingComparison, TimingVerdict
from gate.results.errors import RegionError, gate_fault
from gate.results.records import RegionResult

# A turn of a short step is several runs, filling about this long (`turn_runs`), at most
# this many: each turn also costs pinning the worker's threads to its core and one call of
# setup (its runs share it, `HeldRegion`).
TURN_S = 2e-3
MAX_TURN_RUNS = 32
# A boundary that took no time in a turn still needs a logarithm.
_SMALLEST_S = 1e-9
# The stage the live line shows while the two trees' timed runs alternate.
TIMING_BOTH = "timing against the base"


@dataclass
class Side:
    """One tree: the policy it runs regions under, its worker, and its times by round."""

    name: str  # "head" or "base"
    policy: Policy
    scheduler: Scheduler  # the tree's own worker
    # One per round: the geometric mean of the tree's two turns in it (each turn's median).
    step_s: list[float] = field(default_factory=list)
    boundary_s: dict[str, list[float]] = field(default_factory=dict)
    _turns: list[StepSamples] = field(default_factory=list)  # this round's, so far

    def take(self, samples: StepSamples) -> None:
        self._turns.append(samples)

    def end_round(self) -> None:
        turns, self._turns = self._turns, []
        _append_round(self.step_s, [t.step_s for t in turns])
        names = sorted({name for t in turns for name, _ in t.boundary_s})
        for name in names:
            values = [dict(t.boundary_s).get(name, ()) for t in turns]
            _append_round(self.boundary_s.setdefault(name, []), values)


def _append_round(to: list[float], turns: list[tuple[float, ...]]) -> None:
    """The round's time from each turn's runs: the geometric mean of the turns' medians."""
    medians = [max(statistics.median(runs), _SMALLEST_S) for runs in turns if runs]
    if medians:
        to.append(statistics.geometric_mean(medians))


@dataclass
class PairedRounds:
    """One region's rounds, held from both trees in their workers, and the verdict they give."""

    region: Region
    head: Side
    base: Side
    cancel: Cancellation | None
    turn_runs: int = 1  # timed runs in each tree's turn of a round (`turn_runs`)
    # The cores the rounds rotate over (`gate.region.cores`); () leaves the runs unpinned.
    cpus: tuple[int, ...] = field(default_factory=usable_cpus)
    # Which tree opens each round; seeded with the region's name, so a run is reproducible
    # and no verdict depends on which regions ran before.
    _coin: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._coin = random.Random(f"{self.region.name}:{self.region.step}")

    def run(self) -> tuple[Side, RegionError] | None:
        """Paired rounds until a look decides the verdict or the most rounds ran."""
        # The statistics import numpy: here, so that a `--base` run whose change reaches no
        # region leaves numpy out of the gate's own process, as a plain run does (~0.07 s).
        from gate.compare.timing import looks

        rule = self.region.timing
        self.head.scheduler.announce(region_key(self.head.policy, self.region), TIMING_BOTH)
        for look in looks(rule.rounds, rule.max_rounds):
            failed = self._paired_rounds(look)
            if failed is not None:
                return failed
            if self._cancelled() or self._step_verdict() is not TimingVerdict.INCONCLUSIVE:
                return None
        return None

    def _step_verdict(self) -> TimingVerdict:
        """The step's verdict on the rounds so far: the tests alone, without the interval."""
        from gate.compare.stats import log_ratios  # numpy: see `run`
        from gate.compare.timing import look_levels, paired_verdict

        rule = self.region.timing
        d = log_ratios(self.base.step_s, self.head.step_s)
        return paired_verdict(d, rule.max_slowdown, look_levels(rule.rounds, rule.max_rounds))

    def _paired_rounds(self, until: int) -> tuple[Side, RegionError] | None:
        """Rounds up to ``until``, each four turns: A, B on one core; B, A on the next.

        The order matters as much as the core: on a shared core a turn right after its own
        tree's runs finds its caches warm, one after the other tree's does not, and the
        first turn on a core meets whatever ran there before (the kernel moves it away
        during that turn). With a fixed order that alone made one tree 4-40% "slower"
        (docs/performance-log.md). In A, B, B, A each tree has one turn of each kind; which tree
        is A is a coin flip per round, and the pair of cores rotates by one per round, so
        that neither tree is always first on a given core. Whatever such effects remain,
        a round's ratio is then as likely x as 1/x, which is all the signed-rank test needs.
        """
        schedule: list[tuple[Side, Turn]] = []
        for number in range(len(self.base.step_s), until):
            first, second = self._core(number), self._core(number + 1)
            a, b = (self.base, self.head) if self._coin.random() < 0.5 else (self.head, self.base)
            for side, cpu in ((a, first), (b, first), (b, second), (a, second)):
                schedule.append((side, Turn(self.turn_runs, cpu)))
        if not schedule:
            return None
        timed: list[StepSamples] = []
        for side, turns in _runs_of_one_side(schedule):
            piece = side.scheduler.time_turns(side.policy, self.region, turns, tree=side.name)
            timed.extend(piece)
            if len(piece) < len(turns) or any(s.error is not None for s in piece):
                break
        for index, ((side, _), samples) in enumerate(zip(schedule, timed, strict=False)):
            if samples.error is not None:
                return side, samples.error
            side.take(samples)
            if index % 4 == 3:
                self.base.end_round()
                self.head.end_round()
        if len(timed) < len(schedule):
            return self.head, gate_fault("timing this region: the worker timed fewer turns")
        return None

    def _core(self, index: int) -> int | None:
        """The ``index``-th core of the rotation; None: not pinned."""
        return self.cpus[index % len(self.cpus)] if self.cpus else None

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.requested

    def _timing(self, base_s: list[float], head_s: list[float], what: str) -> TimingComparison:
        from gate.compare.timing import compare_paired, look_levels  # numpy: see `run`

        rule = self.region.timing
        return compare_paired(
            base_s,
            head_s,
            max_slowdown=rule.max_slowdown,
            on_regression=rule.on_regression,
            on_inconclusive=rule.on_inconclusive,
            levels=look_levels(rule.rounds, rule.max_rounds),
            what=what,
        )

    def judged(self) -> tuple[TimingComparison, tuple[TimingComparison, ...]]:
        step = self._timing(self.base.step_s, self.head.step_s, "step")
        if not self.region.timing.boundaries:
            return step, ()
        boundaries = tuple(
            self._timing(self.base.boundary_s[name], values, name)
            for name, values in sorted(self.head.boundary_s.items())
            if len(self.base.boundary_s.get(name, ())) == len(values) > 0
        )
        return step, boundaries


def timed_block(side: Side, region: Region, runs: int) -> tuple[float, ...] | RegionError:
    """A tree's block of turns, for trees whose workers hold the device one after the other:
    as many turns as the tree has in the paired rounds' first look (two a round), each of
    ``runs`` timed runs of the region ``side``'s worker holds, the cores rotating; each turn's
    median. Turns, not the region's own timed runs: both trees' samples are then what paired
    rounds compare, runs back to back on held inputs, where a timed run with fresh inputs also
    holds the wait for them (on a TPU a 1.3x slower step read 1.1x so). Twice the turns did
    not decide more: two processes' offsets (0.96-1.02x between unchanged trees on a TPU v5e)
    bound an unpaired comparison, not the samples' number (docs/performance-log.md)."""
    cpus = usable_cpus()
    count = 2 * region.timing.rounds
    turns = [Turn(runs, cpus[i % len(cpus)] if cpus else None) for i in range(count)]
    timed = side.scheduler.time_turns(side.policy, region, turns, tree=side.name)
    for samples in timed:
        if samples.error is not None:
            return samples.error
    if len(timed) < count:
        return gate_fault("timing this region: the worker timed fewer turns")
    return tuple(max(statistics.median(t.step_s), _SMALLEST_S) for t in timed if t.step_s)


def _runs_of_one_side(schedule: list[tuple[Side, Turn]]) -> list[tuple[Side, list[Turn]]]:
    """``schedule`` cut where the tree changes: each piece one request to that tree's worker."""
    pieces: list[tuple[Side, list[Turn]]] = []
    for side, turn in schedule:
        if pieces and pieces[-1][0] is side:
            pieces[-1][1].append(turn)
        else:
            pieces.append((side, [turn]))
    return pieces


def turn_runs(round_runs: int, *results: RegionResult) -> int:
    """Timed runs per turn: ``round_runs``, or more for a short step, to fill ``TURN_S``.

    Each turn costs a message to a worker and back, and a step of 100 µs times mostly the
    machine's jitter: measured on the 2-core machine under load, single runs of such steps
    gave round ratios 25% apart, so unchanged trees took 100-200 rounds. The median of a
    turn of several runs is far steadier, for the price of a few more short runs. Decided
    from the longer of the two trees' median step times in their own runs, at most
    `MAX_TURN_RUNS`.
    """
    medians = [r.timing.median_s for r in results if r.timing is not None]
    if not medians or max(medians) <= 0:
        return round_runs
    return max(round_runs, min(MAX_TURN_RUNS, math.ceil(TURN_S / max(medians))))
