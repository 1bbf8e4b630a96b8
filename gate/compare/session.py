"""Running each region from the head and from the base, in one worker, and comparing them.

One process holds the device: a TPU chip admits one, and two processes on one GPU would
split its memory. So one worker imports both trees' code side by side, each tree's modules
kept apart (`gate.policy.trees`), and for each region runs the head, then the base (each
under the head's policy, `gate.compare.base_policy`). It then holds both, loaded and warmed
up, and times them in paired rounds: one base run, then one head run, both on the same core
(`gate.region.cores`), the core rotating from round to round. Drift, bursts of load and a
busy core then hit both runs of a round alike, and each round's ratio head/base cancels
them. The rounds are judged after ``timing.rounds`` of them and then at looks further apart
(`gate.compare.timing.looks`), and the timing stops at the first look that decides; after
``timing.max_rounds`` an open verdict is reported as inconclusive. A look's rounds are one
request to the worker (`gate.compare.rounds`).

Two trees cannot share a process when their modules set JAX's process-wide options
differently at import (``jax.config.update("jax_enable_x64", True)`` in one tree only), or
when a tree has compiled extension modules of its own (a second copy of one may not load
beside the first). Each worker's `Check` of a tree's callables says both; then the trees run
*apart*: every region of the head in a worker, which is then stopped, then every region of
the base in another. The device still has one process at a time; the step times are then two
samples measured apart, compared unpaired, and every report says why (`BaseComparison.apart`).
Two reasons show only as the trees run (`_parting`): a tree ran the other's code (a cache
outside both trees kept it, `gate.region.other_tree_code`), or changed JAX's options as it
ran. The region where one shows, and the policy's regions not compared yet, then run apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from gate.compare.base_policy import for_base, regions_in_base
from gate.compare.communication import compare_sides, program_names
from gate.compare.outputs import compare_outputs
from gate.compare.own_definition import own_definition
from gate.compare.rounds import PairedRounds, Side, turn_runs
from gate.compare.timing import compare_unpaired
from gate.compare.worktree import BaseTree
from gate.isolation.cancellation import Cancellation
from gate.isolation.run_loop import begin, schedulers
from gate.isolation.scheduler import Checked, Scheduler
from gate.isolation.watcher import RunWatcher
from gate.plan import Plan
from gate.policy.model import Policy, RecompileRule, Region
from gate.results.baseline import accept_base
from gate.results.comparison import (
    BaseComparison,
    BaseStatus,
    BoundaryTime,
    Renamed,
    StepOutputs,
    TimingComparison,
    TimingVerdict,
    renamed_text,
)
from gate.results.costs import CostComparison, compare_costs, not_measured
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.line_times import OpTimes
from gate.results.records import RegionResult, RunResult
from gate.witness.recompiles import startup_recompiles


def run_compared(
    plan: Plan,
    repo_root: Path,
    base: BaseTree,
    *,
    cancel: Cancellation | None = None,
    watcher: RunWatcher | None = None,
    environ: Mapping[str, str] | None = None,
    finished: Callable[[RegionResult], None] | None = None,
    starting: Callable[[Scheduler], None] | None = None,
) -> RunResult:
    """Every region of ``plan`` from the head (``repo_root``), compared with ``base``.

    ``finished`` gets each region's result as soon as both trees are done with it;
    ``starting`` gets the scheduler while the first worker starts, to check the head's
    policies in it (what it raises stops the run).
    """
    with schedulers(plan, repo_root, cancel=cancel, watcher=watcher, environ=environ) as workers:
        session = _Session(plan, repo_root, base, cancel)
        return begin(plan, workers, starting, session.compared, finished)


@dataclass
class _Session:
    """The trees of one ``run --base``, and what is known of running them together.

    On a host with a worker per TPU chip, regions are compared side by side, each wholly in
    one worker (`gate.isolation.run_loop`); what is decided per policy is decided once.
    """

    plan: Plan
    head_root: Path
    tree: BaseTree
    cancel: Cancellation | None
    # Per policy: why its trees run apart ("" when they share a worker), once decided.
    _apart: dict[Path, str] = field(default_factory=dict)
    # Results of regions whose trees ran apart, by policy and region name.
    _ran_apart: dict[tuple[Path, str], RegionResult] = field(default_factory=dict)
    # Regions compared with both trees in one worker, by policy and region name.
    _paired: set[tuple[Path, str]] = field(default_factory=set)
    _deciding: threading.Lock = field(default_factory=threading.Lock)

    def compared(self, scheduler: Scheduler, policy: Policy, region: Region) -> RegionResult:
        names = regions_in_base(policy, self.head_root, self.tree.root)
        if names is None or region.name not in names:
            result = scheduler.run(policy, region, tree="head")
            return replace(result, base=BaseComparison(self.tree.describe(), BaseStatus.NEW_REGION))
        with self._deciding:
            if policy.path not in self._apart:
                self._apart[policy.path] = self._why_apart(scheduler, policy)
            if self._apart[policy.path]:
                key = (policy.path, region.name)
                if key not in self._ran_apart:
                    self._run_apart(scheduler, policy, names)
                return self._ran_apart.pop(key)
        pair = _Pair(region, scheduler, self._sides(policy), self.tree, self.cancel)
        result = pair.compare(self.head_root)
        key = (policy.path, region.name)
        if not pair.parting:
            self._paired.add(key)
            return result
        # Found only as the trees ran: this region, and the policy's others not yet compared,
        # run apart; what was compared before the trees met stands.
        with self._deciding:
            self._apart[policy.path] = pair.parting
            if key not in self._ran_apart:
                done = {name for path, name in self._paired if path == policy.path}
                self._run_apart(scheduler, policy, names - done)
            return self._ran_apart.pop(key)

    def _sides(self, policy: Policy) -> tuple[Side, Side]:
        return (
            Side("head", self.head_root, policy),
            Side("base", self.tree.root, for_base(policy, self.head_root, self.tree.root)),
        )

    def _why_apart(self, scheduler: Scheduler, policy: Policy) -> str:
        """Why ``policy``'s regions cannot run from both trees in one worker; "" when they can.

        The head's check ran before anything (`gate.cli.execute`); the base's runs now, in the
        worker that will hold both.
        """
        head = scheduler.checked(policy)
        if head.extensions:
            return _extensions_text("the head", head)
        base_policy = for_base(policy, self.head_root, self.tree.root)
        base = scheduler.check([base_policy], root=self.tree.root)
        if base.extensions:
            return _extensions_text("the base", base)
        if head.config != base.config:
            return _config_text(dict(head.config), dict(base.config))
        return ""

    def _run_apart(self, scheduler: Scheduler, policy: Policy, names: frozenset[str]) -> None:
        """Every region of ``policy`` the base has, from the head's tree in a worker, then
        from the base's in another: one process on the device at a time."""
        why = self._apart[policy.path]
        regions = [r for p, rs in self.plan.steps if p is policy for r in rs if r.name in names]
        scheduler.close()  # it imported both trees' modules; they must not meet
        heads = {r.name: scheduler.run_for_outputs(policy, r, tree="head") for r in regions}
        scheduler.close()
        head_side, base_side = self._sides(policy)
        for region in regions:
            head_result, head_outputs = heads[region.name]
            pair = _Pair(region, scheduler, (head_side, base_side), self.tree, self.cancel)
            self._ran_apart[(policy.path, region.name)] = pair.compare_apart(
                (head_result, head_outputs), self.head_root, why
            )
        scheduler.close()


def _extensions_text(tree: str, checked: Checked) -> str:
    names = ", ".join(checked.extensions[:3]) + (", ..." if len(checked.extensions) > 3 else "")
    return (
        f"{tree} has compiled extension modules of its own ({names}), and a second copy of one "
        "may not load beside the first in one process"
    )


def _config_text(head: dict[str, str], base: dict[str, str]) -> str:
    differ = sorted(name for name in {*head, *base} if head.get(name) != base.get(name))
    shown = "; ".join(
        f"{name}: {head.get(name, 'unchanged')} in the head, {base.get(name, 'unchanged')} in "
        "the base"
        for name in differ[:3]
    )
    return (
        "the trees set JAX's process-wide options differently when imported "
        f"({shown}), and one process has one set of them"
    )


# A region held in a tree's worker: its result, and its outputs on the host (None: it did not
# run to its end).
Held = tuple[RegionResult, StepOutputs | None]


@dataclass
class _Pair:
    """One region from both trees."""

    region: Region
    scheduler: Scheduler
    sides: tuple[Side, Side]  # the head's, the base's
    tree: BaseTree
    cancel: Cancellation | None
    # Why the trees run in workers of their own ("" when one worker holds both).
    apart: str = ""
    # Why the trees must run apart, found as they ran in one worker ("" when nothing was).
    parting: str = ""
    renamed: tuple[Renamed, ...] = ()  # what the base ran from its own policy instead

    @property
    def head(self) -> Side:
        return self.sides[0]

    @property
    def base(self) -> Side:
        return self.sides[1]

    def compare(self, head_root: Path) -> RegionResult:
        """Both trees' runs in the worker, which then holds both for the paired rounds (only
        when the step's time is compared: otherwise each run is let go as it ends)."""
        head = self._run(self.head, self.region)
        if head[0].error is not None:
            return _not_compared(head[0])
        return self._judged(head, self._base_run(head_root))

    def compare_apart(self, head: Held, head_root: Path, why: str) -> RegionResult:
        """The head's run, made earlier in a worker of its own, against the base's, run now."""
        self.apart = why
        if head[0].error is not None:
            return _not_compared(head[0])
        return self._judged(head, self._base_run(head_root))

    def _run(self, side: Side, region: Region) -> Held:
        held = self.region.timing.compare and not self.apart
        run = self.scheduler.run_held if held else self.scheduler.run_for_outputs
        return run(side.policy, region, side.root, side.name)

    def _base_run(self, head_root: Path) -> Held:
        base_region = next(r for r in self.base.policy.regions if r.name == self.region.name)
        base_result, base_outputs = self._run(self.base, base_region)
        if base_result.error is not None and base_result.error.kind is ErrorKind.IMPORT:
            return self._own_definition(base_region, base_result, head_root)
        return base_result, base_outputs

    def _judged(self, head: Held, base: Held) -> RegionResult:
        (head_result, head_outputs), (base_result, base_outputs) = head, base
        if base_result.error is not None:
            return replace(head_result, base=self._failed(base_result.error))
        if head_outputs is None or base_outputs is None:
            # A region that ran to its end hands its outputs over, or errors: a gate bug.
            which = "head" if head_outputs is None else "base"
            fault = gate_fault(f"comparing with the base: the {which}'s outputs never arrived")
            return replace(head_result, error=fault)
        wrong_tree = _outside(base_outputs, self.tree.root)
        if wrong_tree is not None:
            return replace(head_result, base=self._failed(wrong_tree))
        if not self.apart:
            self.parting = _parting(head_outputs, base_outputs)
            if self.parting:  # the session runs the trees apart instead
                return head_result
        head_result, kept = accept_base(head_result, base_result)
        head_result = _startup_vs_base(head_result, base_result, self.region)
        timing: TimingComparison | None = None
        boundary_timing: tuple[TimingComparison, ...] = ()
        if self.region.timing.compare and self.apart:
            timing = _unpaired(self.region, base_result, head_result)
        elif self.region.timing.compare:
            runs = turn_runs(self.region.timing.round_runs, head_result, base_result)
            rounds = PairedRounds(self.region, self.scheduler, self.head, self.base, self.cancel)
            rounds.turn_runs = runs
            failed = rounds.run()
            if failed is not None:
                side, error = failed
                if side is self.base:
                    return replace(head_result, base=self._failed(error))
                return replace(head_result, error=error)
            timing, boundary_timing = rounds.judged()
            if timing is not None and timing.verdict is TimingVerdict.SLOWER:
                head_result, base_result = self._traced(head_result, base_result)
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
            comm=compare_sides(base_result, head_result, self.region, self.renamed),
            renamed=self.renamed,
            apart=self.apart,
        )
        return replace(head_result, base=comparison)

    def _traced(self, head: RegionResult, base: RegionResult) -> tuple[RegionResult, RegionResult]:
        """Both with their op times by line, from traced runs of the regions the worker still
        holds: made only for a slower step, the one verdict that lists lines (a trace costs
        ~0.9 s a tree on a TPU, `gate.region.cost_phase`). A region with none keeps none."""
        head_times, base_times = self.scheduler.trace_held(
            self.head.policy, self.region, (self.head.root, self.base.root), tree="head"
        )
        return _with_times(head, head_times), _with_times(base, base_times)

    def _own_definition(self, region: Region, failed: RegionResult, head_root: Path) -> Held:
        """The base's run of its own definition of ``region``, which ``failed`` could not import.

        A step renamed in the change: the head's policy names what the base's code
        lacks. Without a definition of its own to run, ``failed`` says why there is none.
        """
        assert failed.error is not None
        own = own_definition(self.head.policy, region, head_root, self.tree.root)
        if isinstance(own, str):
            message = (
                f"{failed.error.message}. The base cannot import what the head's policy names "
                f"for this region ({_callables(region)}), and {own}. If it is new in this "
                "change, give the region a new name in the policy: a new region is not compared"
            )
            return replace(failed, error=replace(failed.error, message=message)), None
        self.renamed = own.renamed
        result, outputs = self._run(self.base, own.region)
        if result.error is not None:
            message = (
                f"the head's policy names what the base lacks, so the base ran its own "
                f"{renamed_text(own.renamed)}, and that failed too: {result.error.message}"
            )
            return replace(result, error=replace(result.error, message=message)), None
        return result, outputs

    def _failed(self, error: RegionError) -> BaseComparison:
        return BaseComparison(
            self.tree.describe(),
            BaseStatus.BASE_FAILED,
            base_error=error,
            renamed=self.renamed,
            apart=self.apart,
        )


def _with_times(result: RegionResult, times: OpTimes | None) -> RegionResult:
    if times is None or result.cost is None:
        return result
    return replace(result, cost=replace(result.cost, times=times))


def _startup_vs_base(head: RegionResult, base: RegionResult, region: Region) -> RegionResult:
    """``head`` with its first call and warm-up judged against the base's: a function that
    compiled more programs there than in the base (the base replaces the same-shapes rule)."""
    if region.recompiles is RecompileRule.ALLOW:
        return head
    judged = startup_recompiles(
        head.startup_programs,
        base.startup_programs,
        region.warmup + 1,
        failing=region.recompiles is RecompileRule.FAIL,
    )
    after = tuple(r for r in head.recompiles if not r.startup)
    return replace(head, recompiles=(*after, *judged))  # every step before the first call only


def _not_compared(head: RegionResult) -> RegionResult:
    """The head failed on its own: its error says what to fix, and a comparison with a step
    that did not run says nothing more."""
    note = "not compared with the base: the head's run did not finish"
    return replace(head, notes=(*head.notes, note))


def _unpaired(region: Region, base: RegionResult, head: RegionResult) -> TimingComparison | None:
    """The step times of trees run apart: each tree's own timed runs, compared unpaired."""
    if not base.timing_samples or not head.timing_samples:
        return None
    rule = region.timing
    return compare_unpaired(
        base.timing_samples,
        head.timing_samples,
        max_slowdown=rule.max_slowdown,
        on_regression=rule.on_regression,
        on_inconclusive=rule.on_inconclusive,
        against="base",
    )


def _parting(head: StepOutputs, base: StepOutputs) -> str:
    """Why two trees that ran in one worker must run apart after all; "" when they need not.

    A tree ran the other's code (a cache outside the trees kept a function of the tree that
    ran first), or changed JAX's process-wide options as it ran (an import inside the step,
    a ``jax.config.update`` in setup): the other tree then ran, or would run, under them.
    """
    for tree, other, outputs in (("head", "base", head), ("base", "head", base)):
        if outputs.other_tree:
            return (
                f"the {tree}'s run ran the {other}'s code, {outputs.other_tree}: a cache outside "
                f"both trees (an installed module's functools.lru_cache, say) kept it from the "
                f"{other}'s run"
            )
    for tree, outputs in (("head", head), ("base", base)):
        if outputs.late_config:
            return (
                f"the {tree}'s run changed JAX's process-wide options ({outputs.late_config}), "
                "and one process has one set of them"
            )
    return ""


def _outside(outputs: StepOutputs, base_root: Path) -> RegionError | None:
    """An error when the base's step was imported from outside the base checkout."""
    if outputs.step_file is None:
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


def _cost(
    base: RegionResult, head: RegionResult, region: Region, renamed: tuple[Renamed, ...] = ()
) -> CostComparison | None:
    """XLA's figures, base vs head, under the head's ``cost:`` rule; None when neither side
    has any and no rule asks for them.

    A jitted function the change renamed is compared under the head's name: ``jit(clean)``
    in the base is ``jit(clean2)``'s before, not a function gone and another new.
    """
    if base.cost is None and head.cost is None and region.cost.max_increase is None:
        return None
    missing = not_measured("the cost run did not happen")
    names = program_names(renamed)
    base_cost = missing if base.cost is None else base.cost
    functions = tuple(replace(f, name=names.get(f.name, f.name)) for f in base_cost.functions)
    base_cost = replace(base_cost, functions=functions)
    return compare_costs(base_cost, missing if head.cost is None else head.cost, region.cost)
