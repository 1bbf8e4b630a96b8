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

import os
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from gate.compare.base_policy import for_base, regions_in_base
from gate.compare.communication import compare_sides, program_names
from gate.compare.outputs import compare_outputs
from gate.compare.own_definition import own_definition
from gate.compare.rounds import PairedRounds, Side, turn_runs
from gate.compare.worktree import BaseTree
from gate.isolation.cancellation import Cancellation
from gate.isolation.scheduler import TIMING_LOCK, Scheduler, each_region
from gate.isolation.watcher import RunWatcher
from gate.plan import Plan
from gate.policy.model import Policy, Region
from gate.results.baseline import accept_base
from gate.results.comparison import (
    BaseComparison,
    BaseStatus,
    BoundaryTime,
    Renamed,
    StepOutputs,
    TimingComparison,
    renamed_text,
)
from gate.results.costs import CostComparison, compare_costs, not_measured
from gate.results.errors import ErrorKind, RegionError, gate_fault
from gate.results.records import RegionResult, RunResult

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


def run_compared(
    plan: Plan,
    repo_root: Path,
    base: BaseTree,
    *,
    cancel: Cancellation | None = None,
    watcher: RunWatcher | None = None,
    environ: Mapping[str, str] | None = None,
    finished: Callable[[RegionResult], None] | None = None,
    starting: Callable[[], None] | None = None,
) -> RunResult:
    """Every region of ``plan`` from the head (``repo_root``), compared with ``base``.

    ``finished`` gets each region's result as soon as both trees are done with it;
    ``starting`` runs while the first workers start (what it raises stops the run).
    """
    env = shared_device_environment(os.environ if environ is None else environ)
    with (
        tempfile.TemporaryDirectory(prefix="transfer-gate-base-") as scratch,
        Scheduler(repo_root, cancel=cancel, watcher=watcher, environ=env) as head,
        Scheduler(
            base.root, cancel=cancel, watcher=watcher, environ=env, tree="base"
        ) as base_scheduler,
    ):
        # The two workers run each region at once; only their timed runs take turns.
        for scheduler in (head, base_scheduler):
            scheduler.environ[TIMING_LOCK] = os.path.join(scratch, "timing.lock")
        for policy, region in plan.first():  # both trees' workers start side by side
            base_scheduler.start_early(for_base(policy, repo_root, base.root), region)
            head.start_early(policy, region)
        if starting is not None:
            starting()
        # Per policy: the head's policy as the base runs it, and the regions the base has.
        in_base = {
            policy.path: (
                for_base(policy, repo_root, base.root),
                regions_in_base(policy, repo_root, base.root),
            )
            for policy, _ in plan.steps
        }

        def compared(policy: Policy, region: Region) -> RegionResult:
            base_policy, names = in_base[policy.path]
            if names is None or region.name not in names:
                result = head.run(policy, region)
                return replace(result, base=BaseComparison(base.describe(), BaseStatus.NEW_REGION))
            sides = (Side("head", head, policy), Side("base", base_scheduler, base_policy))
            return _Pair(region, *sides, base, cancel, repo_root).compare()

        return each_region(plan, compared, finished)


# A region held in a tree's worker: its result, and its outputs on the host (None: it did not
# run to its end).
Held = tuple[RegionResult, StepOutputs | None]


@dataclass
class _Pair:
    """One region from both trees."""

    region: Region
    head: Side
    base: Side
    tree: BaseTree
    cancel: Cancellation | None
    head_root: Path
    renamed: tuple[Renamed, ...] = ()  # what the base ran from its own policy instead

    def compare(self) -> RegionResult:
        base_region = next(r for r in self.base.policy.regions if r.name == self.region.name)
        (head_result, head_outputs), (base_result, base_outputs) = self._both_run(base_region)
        if head_result.error is not None:
            # The head failed on its own; its error says what to fix, and a
            # comparison with a step that did not run says nothing more.
            note = "not compared with the base: the head's run did not finish"
            return replace(head_result, notes=(*head_result.notes, note))
        if base_result.error is not None and base_result.error.kind is ErrorKind.IMPORT:
            base_result, base_outputs = self._own_definition(base_region, base_result)
        if base_result.error is not None:
            return replace(head_result, base=self._failed(base_result.error))
        if head_outputs is None or base_outputs is None:
            # A held region that ran to its end hands its outputs over, or errors: a gate bug.
            which = "head" if head_outputs is None else "base"
            fault = gate_fault(f"comparing with the base: the {which}'s outputs never arrived")
            return replace(head_result, error=fault)
        wrong_tree = _outside(base_outputs, self.tree.root)
        if wrong_tree is not None:
            return replace(head_result, base=self._failed(wrong_tree))
        head_result, kept = accept_base(head_result, base_result)
        timing: TimingComparison | None = None
        boundary_timing: tuple[TimingComparison, ...] = ()
        if self.region.timing.compare:
            runs = turn_runs(self.region.timing.round_runs, head_result, base_result)
            rounds = PairedRounds(self.region, self.head, self.base, self.cancel, runs)
            failed = rounds.run()
            if failed is not None:
                side, error = failed
                if side is self.base:
                    return replace(head_result, base=self._failed(error))
                return replace(head_result, error=error)
            timing, boundary_timing = rounds.judged()
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
        )
        return replace(head_result, base=comparison)

    def _both_run(self, base_region: Region) -> tuple[Held, Held]:
        """The head's run of the region and the base's, at once, each in its own worker.

        On two cores or more this takes about the time of one: importing, compiling and
        the transfer map of both trees overlap, and their timed runs take turns
        (`gate.region.quiet`). A head that fails makes the base's run wasted work, which
        is only ever the case for a region that fails anyway.
        """
        with ThreadPoolExecutor(1, thread_name_prefix="transfer-gate-head") as pool:
            head = pool.submit(self.head.scheduler.run_held, self.head.policy, self.region)
            try:
                base = self.base.scheduler.run_held(self.base.policy, base_region)
            finally:
                held = head.result()
        return held, base

    def _own_definition(self, region: Region, failed: RegionResult) -> Held:
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
            return replace(failed, error=replace(failed.error, message=message)), None
        self.renamed = own.renamed
        result, outputs = self.base.scheduler.run_held(self.base.policy, own.region)
        if result.error is not None:
            message = (
                f"the head's policy names what the base lacks, so the base ran its own "
                f"{renamed_text(own.renamed)}, and that failed too: {result.error.message}"
            )
            return replace(result, error=replace(result.error, message=message)), None
        return result, outputs

    def _failed(self, error: RegionError) -> BaseComparison:
        return BaseComparison(
            self.tree.describe(), BaseStatus.BASE_FAILED, base_error=error, renamed=self.renamed
        )


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
