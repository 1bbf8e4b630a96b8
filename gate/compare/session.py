"""Running each region from the head and from the base, side by side, and comparing them.

Two schedulers, one per tree, each with its own worker on the same device.
For each region the head runs first, then the base (each under the head's
policy, `gate.compare.base_policy`); both workers then hold the region loaded
and warmed up, and time it in paired rounds: one base run, then one head run,
both on the same core (`gate.region.cores`), the core rotating from round to
round. Drift, bursts of load and a busy core then hit both runs of a round
alike, and each round's ratio head/base cancels them. The rounds are judged
after ``timing.rounds`` of them and then at looks further apart
(`gate.compare.timing.looks`), and the timing stops at the first look that
decides; after ``timing.max_rounds`` an open verdict is reported as inconclusive.

Both workers are alive at once, so on a GPU each may take only part of the
memory: unless the environment or the policy says otherwise, each worker's JAX
preallocates 45% (``XLA_PYTHON_CLIENT_MEM_FRACTION``) instead of its default 75%.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from gate.compare.base_policy import for_base, regions_in_base
from gate.compare.outputs import compare_outputs
from gate.compare.own_definition import own_definition
from gate.compare.stats import log_ratios
from gate.compare.timing import compare_paired, look_levels, looks, paired_verdict
from gate.compare.worktree import BaseTree
from gate.isolation.cancellation import Cancellation
from gate.isolation.scheduler import Scheduler, usable_cpus
from gate.isolation.watcher import RunWatcher
from gate.plan import Plan, region_key
from gate.policy.model import Policy, Region
from gate.results.baseline import accept_base
from gate.results.comparison import (
    BaseComparison,
    BaseStatus,
    BoundaryTime,
    Renamed,
    StepOutputs,
    StepSamples,
    TimingComparison,
    TimingVerdict,
    renamed_text,
)
from gate.results.costs import CostComparison, compare_costs
from gate.results.records import ErrorKind, RegionError, RegionResult, RunResult, SuiteResult

# A turn of a short step is several runs, filling about this long (`turn_runs`), at most
# this many.
TURN_S = 1e-3
MAX_TURN_RUNS = 16
# The reference computation takes ~0.15 ms on a CPU: four runs a turn.
REFERENCE_TURN_RUNS = 4
# A boundary that took no time in a turn still needs a logarithm.
_SMALLEST_S = 1e-9
# The stage the live line shows while the two trees' timed runs alternate.
TIMING_BOTH = "timing against the base"
# Each of the two workers' share of a GPU's memory, when nothing else says.
MEMORY_FRACTION = "0.45"
_MEMORY_SETTINGS = (
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
)


def shared_device_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with each worker's share of the device memory, unless it sets its own."""
    env = dict(environ)
    if not any(key in env for key in _MEMORY_SETTINGS):
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = MEMORY_FRACTION
    return env


@dataclass
class _Side:
    """One tree: its scheduler, the policy it runs regions under, and its times by round."""

    name: str  # "head" or "base"
    scheduler: Scheduler
    policy: Policy
    # One per round: the geometric mean of the tree's two turns in it (each turn's median).
    step_s: list[float] = field(default_factory=list)
    reference_s: list[float] = field(default_factory=list)
    boundary_s: dict[str, list[float]] = field(default_factory=dict)
    _turns: list[StepSamples] = field(default_factory=list)  # this round's, so far

    def take(self, samples: StepSamples) -> None:
        self._turns.append(samples)

    def end_round(self) -> None:
        turns, self._turns = self._turns, []
        _append_round(self.step_s, [t.step_s for t in turns])
        _append_round(self.reference_s, [t.reference_s for t in turns])
        names = sorted({name for t in turns for name, _ in t.boundary_s})
        for name in names:
            values = [dict(t.boundary_s).get(name, ()) for t in turns]
            _append_round(self.boundary_s.setdefault(name, []), values)


def _append_round(to: list[float], turns: list[tuple[float, ...]]) -> None:
    """The round's time from each turn's runs: the geometric mean of the turns' medians."""
    medians = [max(statistics.median(runs), _SMALLEST_S) for runs in turns if runs]
    if medians:
        to.append(statistics.geometric_mean(medians))


def run_compared(
    plan: Plan,
    repo_root: Path,
    base: BaseTree,
    *,
    cancel: Cancellation | None = None,
    watcher: RunWatcher | None = None,
    environ: Mapping[str, str] | None = None,
    finished: Callable[[RegionResult], None] | None = None,
) -> RunResult:
    """Every region of ``plan`` from the head (``repo_root``), compared with ``base``.

    ``finished`` gets each region's result as soon as both trees are done with it.
    """
    env = shared_device_environment(os.environ if environ is None else environ)
    suites = []
    with (
        Scheduler(repo_root, cancel=cancel, watcher=watcher, environ=env) as head,
        Scheduler(
            base.root, cancel=cancel, watcher=watcher, environ=env, tree="base"
        ) as base_scheduler,
    ):
        first = next(((p, rs[0]) for p, rs in plan.steps if rs), None)
        if first is not None:  # both trees' workers start side by side
            base_scheduler.start_early(for_base(first[0], repo_root, base.root), first[1])
        for policy, regions in plan.steps:
            names = regions_in_base(policy, repo_root, base.root)
            base_policy = for_base(policy, repo_root, base.root)
            results = []
            for region in regions:
                if names is None or region.name not in names:
                    result = head.run(policy, region)
                    result = replace(
                        result, base=BaseComparison(base.describe(), BaseStatus.NEW_REGION)
                    )
                else:
                    pair = _Pair(
                        region,
                        _Side("head", head, policy),
                        _Side("base", base_scheduler, base_policy),
                        base,
                        cancel,
                        repo_root,
                    )
                    result = pair.compare()
                results.append(result)
                if finished is not None:
                    finished(result)
            suites.append(SuiteResult(policy.suite, policy.path.as_posix(), tuple(results)))
    return RunResult(tuple(suites))


@dataclass
class _Pair:
    """One region from both trees."""

    region: Region
    head: _Side
    base: _Side
    tree: BaseTree
    cancel: Cancellation | None
    head_root: Path
    renamed: tuple[Renamed, ...] = ()  # what the base ran from its own policy instead
    _turn_runs: int = 1  # timed runs in each tree's turn of a round (`turn_runs`)
    # The cores the rounds rotate over (`gate.region.cores`); () leaves the runs unpinned.
    cpus: tuple[int, ...] = field(default_factory=usable_cpus)

    def compare(self) -> RegionResult:
        head_result = self.head.scheduler.run(self.head.policy, self.region, hold=True)
        head_outputs = self.head.scheduler.outputs
        if head_result.error is not None:
            # The head failed on its own; its error says what to fix, and a
            # comparison with a step that did not run says nothing more.
            note = "not compared with the base: the head's run did not finish"
            return replace(head_result, notes=(*head_result.notes, note))
        base_region = next(r for r in self.base.policy.regions if r.name == self.region.name)
        base_result = self.base.scheduler.run(self.base.policy, base_region, hold=True)
        if base_result.error is not None and base_result.error.kind is ErrorKind.IMPORT:
            base_result = self._own_definition(base_region, base_result)
        base_outputs = self.base.scheduler.outputs
        wrong_tree = _outside(base_outputs, self.tree.root)
        if base_result.error is not None or wrong_tree is not None:
            error = base_result.error or wrong_tree
            assert error is not None
            return replace(head_result, base=self._failed(error))
        head_result, kept = accept_base(head_result, base_result)
        self._turn_runs = turn_runs(self.region.timing.round_runs, head_result, base_result)
        timing: TimingComparison | None = None
        boundary_timing: tuple[TimingComparison, ...] = ()
        if self.region.timing.compare:
            failed = self._rounds()
            if failed is not None:
                side, error = failed
                if side is self.base:
                    return replace(head_result, base=self._failed(error))
                return replace(head_result, error=error)
            timing, boundary_timing = self._judged()
        comparison = BaseComparison(
            self.tree.describe(),
            BaseStatus.COMPARED,
            timing=timing,
            results=compare_outputs(base_outputs, head_outputs, self.region.checks),
            boundaries=_boundary_times(base_result, head_result),
            boundary_timing=boundary_timing,
            already_in_base=kept,
            base_first_call_s=base_result.first_call_s,
            head_first_call_s=head_result.first_call_s,
            cost=_cost(base_result, head_result, self.region, self.renamed),
            renamed=self.renamed,
        )
        return replace(head_result, base=comparison)

    def _own_definition(self, region: Region, failed: RegionResult) -> RegionResult:
        """The base's run of its own definition of ``region``, which ``failed`` could not import.

        A step renamed in the change: the head's policy names what the base's code
        lacks. Without a definition of its own to run, ``failed`` says why there is none.
        """
        assert failed.error is not None
        own = own_definition(self.head.policy, region, self.head_root, self.tree.root)
        if isinstance(own, str):
            message = (
                f"{failed.error.message}. The base cannot import what the head's policy names "
                f"for this region ({_callables(region)}), and {own}. If it is new in this "
                "change, give the region a new name in the policy: a new region is not compared"
            )
            return replace(failed, error=replace(failed.error, message=message))
        self.renamed = own.renamed
        result = self.base.scheduler.run(self.base.policy, own.region, hold=True)
        if result.error is not None:
            message = (
                f"the head's policy names what the base lacks, so the base ran its own "
                f"{renamed_text(own.renamed)}, and that failed too: {result.error.message}"
            )
            return replace(result, error=replace(result.error, message=message))
        return result

    def _failed(self, error: RegionError) -> BaseComparison:
        return BaseComparison(
            self.tree.describe(), BaseStatus.BASE_FAILED, base_error=error, renamed=self.renamed
        )

    def _rounds(self) -> tuple[_Side, RegionError] | None:
        """Paired rounds until a look decides the verdict or the most rounds ran."""
        rule = self.region.timing
        self.head.scheduler.announce(region_key(self.head.policy, self.region), TIMING_BOTH)
        for look in looks(rule.rounds, rule.max_rounds):
            failed = self._paired_rounds(look, reference=False)
            if failed is not None:
                return failed
            if self._cancelled() or self._step_verdict() is not TimingVerdict.INCONCLUSIVE:
                return None
        return None

    def _step_verdict(self) -> TimingVerdict:
        """The step's verdict on the rounds so far: the tests alone, without the interval."""
        rule = self.region.timing
        d = log_ratios(self.base.step_s, self.head.step_s)
        return paired_verdict(d, rule.max_slowdown, look_levels(rule.rounds, rule.max_rounds))

    def _paired_rounds(self, until: int, *, reference: bool) -> tuple[_Side, RegionError] | None:
        """Rounds up to ``until``, each four turns: base, head on one core; head, base on the next.

        The order matters as much as the core: on a shared core a turn right after its own
        tree's runs finds its caches warm, one after the other tree's does not, and the
        second turn on a core finds the shared libraries' code there already. With a fixed
        order that alone made one tree 4-18% "slower" (docs/performance.md). In base, head,
        head, base each tree has one turn of each kind, so such effects cancel in the
        round's ratio, as does a drift that is linear over the round.
        """
        done = len(self.base.reference_s if reference else self.base.step_s)
        runs = REFERENCE_TURN_RUNS if reference else self._turn_runs
        for number in range(done, until):
            first, second = (self._core(2 * number), self._core(2 * number + 1))
            turns = ((self.base, first), (self.head, first), (self.head, second))
            for side, cpu in (*turns, (self.base, second)):
                samples = side.scheduler.sample(
                    side.policy, self.region, runs, cpu=cpu, reference=reference
                )
                if samples.error is not None:
                    return side, samples.error
                side.take(samples)
            self.base.end_round()
            self.head.end_round()
        return None

    def _core(self, half_round: int) -> int | None:
        """The core both trees' turns use in this half of a round; None: not pinned."""
        return self.cpus[half_round % len(self.cpus)] if self.cpus else None

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.requested

    def _timing(
        self, base_s: list[float], head_s: list[float], what: str, max_slowdown: float | None = None
    ) -> TimingComparison:
        rule = self.region.timing
        return compare_paired(
            base_s,
            head_s,
            max_slowdown=rule.max_slowdown if max_slowdown is None else max_slowdown,
            on_regression=rule.on_regression,
            levels=look_levels(rule.rounds, rule.max_rounds),
            what=what,
        )

    def _step_timing(self) -> TimingComparison:
        """The step's verdict on the rounds so far (`gate.compare.timing`)."""
        return self._timing(self.base.step_s, self.head.step_s, "step")

    def _checked_against_reference(self, step: TimingComparison) -> TimingComparison:
        """A slower or faster step, left open when the workers' own speeds could explain it.

        The two workers then time the gate's reference computation (the same program in both)
        in as many paired rounds as the step took. A 2x slower step beside workers 1.2x apart
        is still slower: 2 / 1.2 is past the allowed factor. A 1.3x beside 1.25x is not.
        Only a decided change pays for this, so an unchanged run never does.
        """
        if step.verdict not in (TimingVerdict.SLOWER, TimingVerdict.FASTER):
            return step
        failed = self._paired_rounds(step.rounds, reference=True)
        if failed is not None or not self.base.reference_s:
            return step
        # At a factor of 1: any significant difference between the workers counts.
        reference = self._timing(self.base.reference_s, self.head.reference_s, "reference", 1.0)
        if reference.verdict not in (TimingVerdict.SLOWER, TimingVerdict.FASTER):
            return step
        limit = self.region.timing.max_slowdown
        if not 1 / limit < step.ratio / reference.ratio < limit:
            return step
        reason = (
            f"the head's worker ran the gate's reference computation {reference.ratio:.2f}x "
            "the base's time, so the machine, not the change, may explain it"
        )
        return replace(step, verdict=TimingVerdict.INCONCLUSIVE, failing=False, reason=reason)

    def _judged(self) -> tuple[TimingComparison, tuple[TimingComparison, ...]]:
        step = self._checked_against_reference(self._step_timing())
        if not self.region.timing.boundaries:
            return step, ()
        boundaries = tuple(
            self._timing(self.base.boundary_s[name], values, name)
            for name, values in sorted(self.head.boundary_s.items())
            if len(self.base.boundary_s.get(name, ())) == len(values) > 0
        )
        return step, boundaries


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


def _outside(outputs: StepOutputs | None, base_root: Path) -> RegionError | None:
    """An error when the base's step was imported from outside the base checkout."""
    if outputs is None or outputs.step_file is None:
        return None
    try:
        Path(outputs.step_file).resolve().relative_to(base_root.resolve())
    except ValueError:
        message = (
            f"the base's step was imported from {outputs.step_file}, outside the base checkout "
            "(an installed copy of the head's package, most likely), so the base would be the "
            "head; list the package's folder in the policy's python_path"
        )
        return RegionError(ErrorKind.IMPORT, message, message)
    return None


def _callables(region: Region) -> str:
    """``step steps:clean2, setup steps:make``: what a region imports."""
    parts = [f"step {region.step}"]
    if region.setup is not None:
        parts.append(f"setup {region.setup}")
    parts.extend(f"boundary {b}" for b in region.boundaries)
    return ", ".join(parts)


def _boundary_times(base: RegionResult, head: RegionResult) -> tuple[BoundaryTime, ...]:
    base_costs = {c.name: c.per_step_s for c in base.boundaries}
    head_costs = {c.name: c.per_step_s for c in head.boundaries}
    return tuple(
        BoundaryTime(name, base_costs.get(name), head_costs.get(name))
        for name in sorted({*base_costs, *head_costs})
    )


def _leaf(spec: str) -> str:
    """``clean`` of ``pkg.steps:clean``, ``m`` of ``pkg.steps:Model.m``: what jit names it."""
    return spec.rsplit(":", maxsplit=1)[-1].rsplit(".", maxsplit=1)[-1]


def _cost(
    base: RegionResult, head: RegionResult, region: Region, renamed: tuple[Renamed, ...] = ()
) -> CostComparison | None:
    """XLA's figures, base vs head, under the head's ``cost:`` rule; None if a side has none.

    A jitted function the change renamed is compared under the head's name: ``jit(clean)``
    in the base is ``jit(clean2)``'s before, not a function gone and another new.
    """
    if base.cost is None or head.cost is None:
        return None
    names = {f"jit({_leaf(r.base)})": f"jit({_leaf(r.head)})" for r in renamed if r.head}
    functions = tuple(replace(f, name=names.get(f.name, f.name)) for f in base.cost.functions)
    base_cost = replace(base.cost, functions=functions)
    return compare_costs(base_cost, head.cost, region.cost)
