"""Running each region from the head and from the base, each tree in a worker of its own, and
comparing them.

Each tree's verdicts come from a process that imported only that tree: the head's regions run
in the head's workers, the base's in workers started in the base checkout, under the base's
own copy of the policy for how its code runs (``env:``, ``python_path``, `for_base`) and with
the head's inputs. Whatever a tree does at import or while it runs (an RNG seeded, a warnings
filter, logging, a registry or cache in an installed package, ``sys.settrace``, JAX's options)
stays in its own process: the boundary is the process, not a list of things put back.

Where the device admits two processes (the CPU; a GPU, its memory shared out,
`gate.isolation.device_pool`), both trees' workers stay up side by side, each holding its
tree's region loaded and warmed up, and time it in paired rounds: a base turn and a head turn
on the same core (`gate.region.cores`), the core rotating from round to round, one worker
waiting on its pipe while the other runs (`gate.compare.rounds`). Drift, bursts of load and a
busy core then hit both trees' turns of a round alike, and each round's ratio head/base
cancels them. The rounds are judged after ``timing.rounds`` of them and then at looks further
apart (`gate.compare.timing.looks`); after ``timing.max_rounds`` an open verdict is reported as
inconclusive.

Where it admits one (a TPU chip), the trees run *apart*: every region of a policy from the
head in its worker, which is then stopped, then every region from the base in a worker of the
base's. The device has one process at a time; the step times are two samples measured apart,
compared unpaired, and every report says so (`BaseComparison.apart`).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from gate.compare.acceptance import accepted, base_accept
from gate.compare.base_policy import base_entry, for_base, head_entry, regions_in_base
from gate.compare.communication import compare_sides, program_names
from gate.compare.footprint import in_base
from gate.compare.own_definition import own_definition
from gate.compare.rounds import PairedRounds, Side, timed_block, turn_runs
from gate.compare.worktree import BaseTree
from gate.isolation.cancellation import Cancellation
from gate.isolation.device_pool import DevicePool
from gate.isolation.run_loop import begin, schedulers
from gate.isolation.run_settings import DEFAULT_SETTINGS, RunSettings
from gate.isolation.scheduler import RegionBudgets, Scheduler, TimingCue, worker_environment
from gate.isolation.watcher import RunWatcher
from gate.isolation.worker_start import DeviceBusy
from gate.plan import Plan
from gate.policy.model import CompareRule, Policy, RecompileRule, Region
from gate.results.baseline import accept_base, labelled
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
from gate.results.line_map import IDENTITY, LineMap
from gate.results.line_times import OpTimes
from gate.results.recompile_changes import after_warmup_vs_base
from gate.results.records import RegionResult, RunResult
from gate.witness.footprint import package_paths
from gate.witness.recompiles import startup_recompiles

# Why the trees of a device that admits one process run apart (`BaseComparison.apart`).
ONE_PROCESS = (
    "the device admits one process at a time (a TPU chip), so each tree's worker held it in turn"
)
REFUSED_BESIDE = (
    "the device refused the base's worker beside the head's, so each tree's worker held it in turn"
)
# A base whose module raised as it was imported (a SyntaxError, say): not a renamed step.
_RAISED_ON_IMPORT = re.compile(r"importing '[^']+' raised ")


def run_compared(
    plan: Plan,
    repo_root: Path,
    base: BaseTree,
    *,
    cancel: Cancellation | None = None,
    watcher: RunWatcher | None = None,
    settings: RunSettings = DEFAULT_SETTINGS,
    finished: Callable[[RegionResult], None] | None = None,
    starting: Callable[[Scheduler], None] | None = None,
) -> RunResult:
    """Every region of ``plan`` from the head (``repo_root``), compared with ``base``.

    ``finished`` gets each region's result as soon as both trees are done with it;
    ``starting`` gets the scheduler while the first worker starts, to check the head's
    policies in it (what it raises stops the run). Both trees' workers get ``settings``.
    """
    env = _memory_for_two(dict(os.environ))
    with (
        schedulers(
            plan,
            repo_root,
            cancel=cancel,
            watcher=watcher,
            environ=env,
            settings=settings,
            audited=base.footprint_top is not None,
        ) as workers,
        contextlib.ExitStack() as bases,
    ):
        session = _Session(plan, repo_root, base, cancel, watcher, env, settings, bases)

        def both_starting(scheduler: Scheduler) -> None:
            session.start_base(scheduler)
            if starting is not None:
                starting(scheduler)

        return begin(plan, workers, both_starting, session.compared, finished)


# JAX's settings of how much of a GPU a process takes: one the user set is left as it is.
GPU_MEMORY_SETTINGS = (
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
)
# Each tree's worker's share of a GPU when the user set none: JAX's default preallocates 75%
# in every process, so a second worker would find a quarter of the memory left.
GPU_SHARE = "0.45"


def _memory_for_two(env: dict[str, str]) -> dict[str, str]:
    """``env`` with each worker's share of a GPU set for two workers side by side."""
    pool = DevicePool.for_environment(env)
    if pool is not None and pool.admits_two and not any(k in env for k in GPU_MEMORY_SETTINGS):
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = GPU_SHARE
    return env


@dataclass
class _Session:
    """The trees of one ``run --base``: the base's scheduler beside each of the head's.

    On a host with a worker per TPU chip, regions are compared side by side, each wholly on
    one chip (`gate.isolation.run_loop`); what is decided per policy is decided once.
    """

    plan: Plan
    head_root: Path
    tree: BaseTree
    cancel: Cancellation | None
    watcher: RunWatcher | None
    environ: dict[str, str]
    settings: RunSettings
    stack: contextlib.ExitStack  # stops the base's schedulers as the run ends
    # The base's schedulers for each of the head's, by the head's (its identity) and whether
    # the base's worker runs beside the head's.
    _bases: dict[tuple[int, bool], Scheduler] = field(default_factory=dict)
    # What each region has taken so far in both trees: its timeout_s bounds them all.
    _budgets: RegionBudgets = field(default_factory=RegionBudgets)
    # Why the device refused the base's worker beside the head's, as it said it ("" while it
    # has not): every region compared after that runs apart, on the same device.
    _refused: str = ""
    # Results of regions whose trees ran apart, by policy and region name.
    _ran_apart: dict[tuple[Path, str], RegionResult] = field(default_factory=dict)
    # Regions judged with both workers side by side (or unchanged) before the device refused
    # a second worker: their verdicts stand, and they do not run again apart.
    _side_by_side: set[tuple[Path, str]] = field(default_factory=set)
    _deciding: threading.Lock = field(default_factory=threading.Lock)
    # Policies a region of which ran unheld first and then had to run again (`_Pair.held_again`,
    # shared by every pair): what made it (git-ignored data read, a folder listed) may well be
    # every region's, so the rest of the policy's regions are held from their first run.
    _held_again: set[Path] = field(default_factory=set)

    def start_base(self, scheduler: Scheduler) -> None:
        """The base's worker for the first region, started as the head's first worker starts,
        where the change may reach a region (or a region is always compared) and the device
        is known to take both: it imports JAX while the head's imports and checks the
        policies, so that a first region the base runs does not wait for it. A change to
        prose alone waits for a footprint to need it."""
        for policy, _ in self.plan.first():
            if self._starts_base_early(policy):
                _, base = self._sides(policy, scheduler, beside=True)
                base.scheduler.start_early(base.policy)

    def _starts_base_early(self, policy: Policy) -> bool:
        """Whether ``policy``'s base worker starts before a footprint needs it: the device is
        known to take both, and the change's files may reach a region, or one of its regions
        runs from the base whatever the change (``compare: always``; waiting for it cost the
        first such region the base worker's start, ~1.3 s of a 13 s run on the 2-core
        machine, docs/performance-log.md)."""
        if not self._known_to_admit_two(policy):
            return False
        return self.tree.may_reach_regions or any(
            region.compare is CompareRule.ALWAYS
            for planned, regions in self.plan.steps
            if planned is policy
            for region in regions
        )

    def compared(self, scheduler: Scheduler, policy: Policy, region: Region) -> RegionResult:
        scheduler.budgets = self._budgets
        names = regions_in_base(policy, self.head_root, self.tree.root)
        if names is None or region.name not in names:
            result = scheduler.run(policy, region, tree="head")
            return replace(result, base=BaseComparison(self.tree.describe(), BaseStatus.NEW_REGION))
        if self._admits_two(policy):
            sides = self._sides(policy, scheduler, beside=True)
            if self._starts_base_early(policy):  # another policy's first, or a new worker
                sides[1].scheduler.start_early(sides[1].policy)  # a no-op while one is up
            pair = _Pair(
                region,
                sides,
                self.tree,
                self.cancel,
                at_once=self._on_the_cpu(policy),
                held_again=self._held_again,
            )
            try:
                result = pair.compare(self.head_root)
                self._side_by_side.add((policy.path, region.name))
                return result
            except _NoRoomBeside as refused:
                with self._deciding:  # this region, and every one after it, run apart
                    self._refused = self._refused or refused.why
                # Its head's run goes with its worker: the region runs again from a fresh
                # one, as every region apart does (a program compiled in the first run would
                # otherwise be the second's cache miss).
                scheduler.close()
        key = (policy.path, region.name)
        with self._deciding:
            if key not in self._ran_apart:
                self._run_apart(self._sides(policy, scheduler, beside=False), policy, names)
            return self._ran_apart.pop(key)

    def _admits_two(self, policy: Policy) -> bool:
        """Whether ``policy``'s workers, one per tree, may hold the device at once: on the CPU
        and a GPU, unless the device refused the second (an accelerator the gate did not
        recognise as one that admits a single process)."""
        if self._refused:
            return False
        pool = DevicePool.for_environment(worker_environment(self.environ, policy))
        return pool is None or pool.admits_two

    def _known_to_admit_two(self, policy: Policy) -> bool:
        """Whether ``policy``'s workers are known to share the device: the CPU by name, or
        GPUs. Not an accelerator the gate does not recognise (`_admits_two` tries it): the
        base's worker started early could take it before the head's, which would wait."""
        env = worker_environment(self.environ, policy)
        pool = DevicePool.for_environment(env)
        if pool is not None:
            return pool.admits_two
        return _cpu_by_name(env)

    def _on_the_cpu(self, policy: Policy) -> bool:
        """Whether ``policy``'s workers run on the CPU by name, where each tree's run of a
        region may go at once, on cores of its own (`_Pair.at_once`); not on a device two
        workers share (a GPU), where the base's runs would run on the head's device."""
        env = worker_environment(self.environ, policy)
        return DevicePool.for_environment(env) is None and _cpu_by_name(env)

    def _sides(self, policy: Policy, scheduler: Scheduler, *, beside: bool) -> tuple[Side, Side]:
        base_policy = for_base(policy, self.head_root, self.tree.root)
        base = self._base_scheduler(scheduler, beside=beside)
        return (
            Side("head", policy, scheduler),
            Side("base", base_policy, base),
        )

    def _base_scheduler(self, head: Scheduler, *, beside: bool) -> Scheduler:
        """The scheduler of the base's workers for ``head``'s: ``beside`` it (both hold the
        device at once), or after it (the head's is stopped first); each made once."""
        key = (id(head), beside)
        found = self._bases.get(key)
        if found is None:
            found = Scheduler(
                self.tree.root,
                cancel=self.cancel,
                watcher=self.watcher,
                environ=self.environ,
                settings=self.settings,
                beside=beside,
                moved_paths=self.tree.moved_paths,
                audited=head.audited,  # both trees' steps timed under the hook alike
            )
            found.budgets = self._budgets
            self._bases[key] = self.stack.enter_context(found)
        if not beside:
            self._bases.get((id(head), True), found).close()  # one process on the device
        return found

    def _run_apart(self, sides: tuple[Side, Side], policy: Policy, names: frozenset[str]) -> None:
        """Every region of ``policy`` the base has, from the head's tree in its worker, then
        from the base's in a worker of its own: one process on the device at a time."""
        head, base = sides
        why = f"{REFUSED_BESIDE} ({self._refused})" if self._refused else ONE_PROCESS
        regions = [
            r
            for p, rs in self.plan.steps
            if p is policy
            for r in rs
            if r.name in names and (policy.path, r.name) not in self._side_by_side
        ]
        base.scheduler.close()
        heads = {}
        for region in regions:
            again = self._held_again
            pair = _Pair(region, sides, self.tree, self.cancel, apart=why, held_again=again)
            heads[region.name] = (pair, pair.head_alone(self.head_root))
        head.scheduler.close()
        for region in regions:
            pair, held = heads[region.name]
            self._ran_apart[(policy.path, region.name)] = pair.compare_apart(held, self.head_root)
        base.scheduler.close()
        # A slower step's lines need the head's traced runs, and its worker let the region go
        # when the base's took the device: the head runs each such region again, traced.
        for region in regions:
            pair, _ = heads[region.name]
            if pair.head_traced_later:
                key = (policy.path, region.name)
                self._ran_apart[key] = pair.traced_again(self.head_root)
        head.scheduler.close()


# A region held in a tree's worker: its result, and its outputs on the host (None: it did not
# run to its end).
Held = tuple[RegionResult, StepOutputs | None]


@dataclass
class _Pair:
    """One region from both trees, each in its own worker (`Side.scheduler`)."""

    region: Region
    sides: tuple[Side, Side]  # the head's, the base's
    tree: BaseTree
    cancel: Cancellation | None
    # Why the trees' workers held the device one after the other ("" when side by side).
    apart: str = ""
    renamed: tuple[Renamed, ...] = ()  # what the base ran from its own policy instead
    # Trees apart: each tree's block of turns' medians, and the timed runs in a turn.
    head_block: tuple[float, ...] = ()
    base_block: tuple[float, ...] = ()
    turn_runs: int = 1
    # Both trees on the CPU: the base's run goes beside the head's as soon as the base is
    # known to run (at the start, or once the head's code is imported), the head's timed runs
    # after it has ended (`_beside`).
    at_once: bool = False
    ran_at_once: bool = False  # this region's two runs went at once, from the start or not
    # The policies (their paths) whose regions no longer run unheld first (`_unheld_first`):
    # one of them had to run again. The session's own set (`_Session._held_again`).
    held_again: set[Path] = field(default_factory=set)
    # The head's first run was a plain run's, whose footprint the base then did not have: the
    # base runs, and the head runs again held (`_unheld_first`).
    ran_unheld: bool = False
    # A slower step's op times by line, (head's, base's), once traced (`_traced`); and, trees
    # apart, what its verdict was judged from, to judge it again with the head's traced later
    # (kept for a slower step only: both trees' outputs on the host).
    traced_times: tuple[OpTimes | None, OpTimes | None] | None = None
    judged_from: tuple[Held, Held] | None = None

    @property
    def head_traced_later(self) -> bool:
        """Trees apart, a slower step whose head's traced runs are still to be made: the
        head's worker let its region go when the base's took the device."""
        return (
            self.judged_from is not None
            and self.traced_times is not None
            and (self.traced_times[0] is None)
        )

    def traced_again(self, head_root: Path) -> RegionResult:
        """The verdict judged again with the head's op times by line, from the head's region
        run again, held, in a worker of its own, and traced (the base's worker is gone: one
        process on the device). Only for a slower step, which fails the run anyway: what it
        costs (the device opened once more, the region run again) is paid by no passing run."""
        assert self.judged_from is not None
        assert self.traced_times is not None
        side = self.head
        again, _ = side.scheduler.run_held(side.policy, self.region, side.name)
        times: OpTimes | None
        if again.error is not None:
            message = again.error.message
            times = OpTimes.not_traced(f"the head's region, run again to trace it: {message}")
        else:
            times = side.scheduler.trace_held(side.policy, self.region, tree=side.name)
        missing = OpTimes.not_traced("the head's traced runs measured nothing")
        self.traced_times = (times or missing, self.traced_times[1])
        return self._judged(*self.judged_from, head_root)

    @property
    def head(self) -> Side:
        return self.sides[0]

    @property
    def base(self) -> Side:
        return self.sides[1]

    def compare(self, head_root: Path) -> RegionResult:
        """Both trees' runs, each in its worker, which then holds it for the paired rounds
        (only when the step's time is compared: otherwise each run is let go as it ends)."""
        decided = self._unheld_first(head_root)
        if decided is not None:
            return _not_compared(decided) if decided.error is not None else decided
        base: Held | None = None
        if self.at_once and (
            self.ran_unheld
            or self._base_runs_anyway(head_root)
            or self._own_modules_changed(head_root)
        ):
            head, base = self._beside(head_root, now=True)
        elif self.at_once and self.tree.may_reach_regions:
            head, base = self._beside(head_root, now=False)
        else:
            head = self._run(self.head, self.region)
        if head[0].error is not None:
            return _not_compared(head[0])
        head = self._footprinted(head, head_root)
        if head[0].base is not None:  # unchanged: the base is not run
            return head[0]
        if base is not None and base[0].error is not None:
            # The base's run beside it failed (ran out of timeout_s, say): there is nothing
            # to compare the head's outputs with, and no time left to fetch them.
            return self._judged(head, base, head_root)
        head = self._with_outputs(head)
        if head[0].error is not None:
            return _not_compared(head[0])
        return self._judged(head, self._base_run(head_root) if base is None else base, head_root)

    def _beside(self, head_root: Path, *, now: bool) -> tuple[Held, Held | None]:
        """The head's run, and the base's beside it in its worker on the CPU's other cores:
        the two trees' imports, first calls, warm-ups and watched runs overlap, where one
        after the other they cost the run twice (on the 2-core machine ~40% of `run --base`
        when every region is compared, docs/performance-log.md).

        ``now``: the base's run starts with the head's (the base runs whatever the footprint
        says, `_base_runs_anyway`, `_own_modules_changed`). Otherwise the head says what its
        footprint holds once its code is imported (`Reached`): where the change's code
        touched one of those files (a helper module, a config read at import), the footprint
        can only grow from there, the base will run, and it starts then; where it touched
        none, the base's run is None and the head's footprint at its end decides.

        The head's timed runs, which a stored baseline may judge, wait for the base's run to
        end (`TimingCue`): nothing of the base's runs beside them, and the head's clock stands
        still meanwhile, so a base that is slow or hangs is the base's timeout. The base's own
        timed runs may meet the head's first call: no verdict rests on them (the paired rounds
        judge the step, their runs a turn come from the head's median alone, and only a tree
        run alone times its region unpaired, `compare_apart`)."""
        top = self.tree.footprint_top
        with ThreadPoolExecutor(1, thread_name_prefix="transfer-gate-base") as pool:
            started: list[Future[Held]] = []

            def base_then_cue() -> Held:
                try:
                    return self._base_run(head_root)
                finally:
                    cue.give()

            def start() -> None:
                cue.hold()
                self.ran_at_once = True
                started.append(pool.submit(base_then_cue))

            def reached(paths: tuple[str, ...]) -> None:  # in this thread, as the head runs
                if started:  # heard once: a second first call (the step calls the gate) is not
                    return
                if top is not None and self.tree.changes_any(top / path for path in paths):
                    start()
                else:
                    cue.give()

            cue = TimingCue(None if now else reached)
            if now:
                start()
            try:
                head = self._run(self.head, self.region, cue)
            finally:
                cue.give()  # a head that failed before its timed runs: nothing waits
            return head, (started[0].result() if started else None)

    def head_alone(self, head_root: Path) -> Held:
        """The head's run, and its block of timed turns (`timed_block`), while its worker
        holds the device alone; none for a region the base has unchanged."""
        decided = self._unheld_first(head_root)
        if decided is not None:
            return decided, None
        head = self._run(self.head, self.region)
        if head[0].error is None:
            head = self._footprinted(head, head_root)
        if head[0].error is None and head[0].base is None:
            head = self._with_outputs(head)  # now: the head's worker goes before the base runs
        if head[0].error is None and head[0].base is None and self.region.timing.compare:
            self.turn_runs = turn_runs(self.region.timing.round_runs, head[0])
            block = timed_block(self.head, self.region, self.turn_runs)
            if isinstance(block, RegionError):
                return replace(head[0], error=block), None
            self.head_block = block
        return head

    def compare_apart(self, head: Held, head_root: Path) -> RegionResult:
        """The head's run, made earlier in its worker (`head_alone`), against the base's, run
        now; each tree's block of turns compared unpaired."""
        if head[0].error is not None:
            return _not_compared(head[0])
        if head[0].base is not None:  # unchanged: no base worker starts for it
            return head[0]
        base = self._base_run(head_root)
        if base[0].error is None and self.region.timing.compare:
            block = timed_block(self.base, self.region, self.turn_runs)
            if isinstance(block, RegionError):
                return replace(head[0], base=self._failed(block))
            self.base_block = block
        return self._judged(head, base, head_root)

    def _unheld_first(self, head_root: Path) -> RegionResult | None:
        """Where the change's paths reach no region (prose, comments alone:
        `BaseTree.may_reach_regions`) and the base does not run this one anyway, the head's
        run made as a plain run makes it (`Scheduler.run_footprinted`): let go of as it ends,
        untraced, where a held run keeps the worker waiting for the gate's verdict on its
        footprint and lets go only at the next job (~5 ms a region on the CPU, ~10% of a
        README-only `run --base`, docs/performance-log.md).

        Its result where it decides the region: the base has its footprint unchanged, or it
        failed (nothing is compared). Otherwise None, its worker stopped: the region runs again,
        held, from a fresh worker (a program the first run compiled would be the second's
        cache miss), the base's beside it where the trees go at once (`ran_unheld`); its first
        run's time is not the region's `timeout_s` budget. A region whose footprint holds a
        changed file of prose pays that second run, and so does one that reads what the base's
        checkout lacks (git-ignored data) or lists a folder whose names differ: after the
        first such region, the rest of its policy's are held from the start
        (`_Session._held_again`)."""
        side, top = self.head, self.tree.footprint_top
        if top is None or self.tree.may_reach_regions or side.policy.path in self.held_again:
            return None
        if self._base_runs_anyway(head_root):
            return None
        looked = side.scheduler.run_footprinted(side.policy, self.region, side.name, top)
        if looked.error is not None:
            return looked
        looked, _ = self._footprinted((looked, None), head_root)
        if looked.base is not None:
            return looked
        side.scheduler.close()
        self.ran_unheld = True
        self.held_again.add(side.policy.path)
        return None

    def _run(self, side: Side, region: Region, cue: TimingCue | None = None) -> Held:
        scheduler = side.scheduler
        run = scheduler.run_held if self.region.timing.compare else scheduler.run_for_outputs
        top = self.tree.footprint_top if side is self.head else None
        return run(side.policy, region, side.name, top, cue=cue)

    def _base_runs_anyway(self, head_root: Path) -> bool:
        """Whether the base runs this region whatever the head's footprint will say: no
        footprint is recorded, the region is always compared, or its policy entry is not the
        base's (a footprint covers the entry, `gate.compare.base_policy`)."""
        if self.tree.footprint_top is None or self.tree.top is None or self.tree.head_top is None:
            return True
        if self.region.compare is CompareRule.ALWAYS:
            return True
        policy, name = self.head.policy, self.region.name
        entry = head_entry(policy, head_root, name)
        return not entry or entry != base_entry(policy, head_root, self.tree.root, name)

    def _own_modules_changed(self, head_root: Path) -> bool:
        """Whether the change's code reaches a module the region names (its step's, setup's,
        a boundary's or its custom check's, or a package above one), under the policy's
        python_path or the tree's root: its footprint will hold that file, so the base will run
        it, and may as well start at once (`_beside`). Only a guess, made before the head
        runs: where the footprint then says the base has the region unchanged, the base's run
        is not used (a module imported from elsewhere), and the verdict is the footprint's."""
        region = self.region
        optional = (region.setup, region.checks.custom)
        named = (region.step, *(ref for ref in optional if ref is not None), *region.boundaries)
        roots = (*self.head.policy.python_path, head_root)
        return self.tree.changes_any(package_paths({ref.module for ref in named}, roots))

    def _with_outputs(self, head: Held) -> Held:
        """``head`` with its outputs on the host: a run that recorded its footprint left them
        in its worker (`Job.fetch_later`), to be fetched only for a region the base does not
        have unchanged. A fetch that fails is the head's error, as it was in its run."""
        result, outputs = head
        if outputs is not None or result.error is not None or self.tree.footprint_top is None:
            return head
        side = self.head
        fetched = side.scheduler.fetch_outputs(side.policy, self.region, tree=side.name)
        if isinstance(fetched, RegionError):
            return replace(result, error=fetched), None
        return result, fetched

    def _footprinted(self, head: Held, head_root: Path) -> Held:
        """``head`` with its footprint's policy entry, and, when the base has that footprint
        as it is (`in_base`) and the region may be skipped, the comparison that says so."""
        result, outputs = head
        footprint, base_top, head_top = result.footprint, self.tree.top, self.tree.head_top
        if footprint is None or base_top is None or head_top is None:
            return head
        entry = head_entry(self.head.policy, head_root, self.region.name)
        result = replace(result, footprint=replace(footprint, policy=entry))
        if self._base_runs_anyway(head_root):
            return result, outputs
        has = in_base(footprint, base_top, head_top)
        if has is None:
            return result, outputs
        # The base would run the same code on the same data: its transfer map and programs
        # are the head's own, and judge the head as the base's would, finding for finding (a
        # comment that moved lines moved the head's findings with them); git's line map
        # says what the change did to each one's line.
        result, kept = accept_base(result, result)
        result = _recompiles_vs_base(result, result, self.region, IDENTITY)
        result = labelled(result, self.tree.lines)
        unchanged = BaseComparison(
            self.tree.describe(),
            BaseStatus.UNCHANGED,
            already_in_base=kept,
            same_files=has.files,
            same_code_files=has.same_code,
        )
        return replace(result, base=unchanged), outputs

    def _base_run(self, head_root: Path) -> Held:
        base_region = next(r for r in self.base.policy.regions if r.name == self.region.name)
        try:
            base_result, base_outputs = self._run(self.base, base_region)
        except DeviceBusy as busy:
            if self.apart:  # the head's worker is gone: another process holds the device
                raise
            raise _NoRoomBeside(busy.message) from busy
        error = base_result.error
        if error is not None and error.kind is ErrorKind.IMPORT:
            if _RAISED_ON_IMPORT.search(error.message):
                message = (
                    f"the base's own code failed as it was imported, in the base's worker: "
                    f"{error.message}. The base does not run on its own, so nothing of this "
                    "change is compared; fix the base (or compare with another --base)"
                )
                return replace(base_result, error=replace(error, message=message)), None
            return self._own_definition(base_region, base_result, head_root)
        return base_result, base_outputs

    def _judged(self, head: Held, base: Held, head_root: Path) -> RegionResult:
        from gate.compare.outputs import compare_outputs  # numpy: see `PairedRounds.run`

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
        head_result, kept = accept_base(head_result, base_result, self.tree.lines)
        head_result = _recompiles_vs_base(head_result, base_result, self.region, self.tree.lines)
        timing: TimingComparison | None = None
        boundary_timing: tuple[TimingComparison, ...] = ()
        if self.region.timing.compare and self.apart:
            timing = _unpaired(self.region, self.base_block, self.head_block)
        elif self.region.timing.compare:
            # A base run beside the head's timed its runs beside the head's first call: its
            # median would cut the turns short (`_beside`), so the head's decides.
            alone = (head_result,) if self.ran_at_once else (head_result, base_result)
            runs = turn_runs(self.region.timing.round_runs, *alone)
            rounds = PairedRounds(self.region, self.head, self.base, self.cancel)
            rounds.turn_runs = runs
            failed = rounds.run()
            if failed is not None:
                side, error = failed
                if side is self.base:
                    return replace(head_result, base=self._failed(error))
                return replace(head_result, error=error)
            timing, boundary_timing = rounds.judged()
        if timing is not None and timing.verdict is TimingVerdict.SLOWER:
            if self.apart:  # kept to be judged again once the head is traced (`traced_again`)
                self.judged_from = (head, base)
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
            cost=_cost(base_result, head_result, self.region, self.renamed, self.tree.lines),
            comm=compare_sides(
                base_result, head_result, self.region, self.renamed, self.tree.lines
            ),
            renamed=self.renamed,
            apart=self.apart,
        )
        # The head's `accept:`, less what the base's copy of the policy has already.
        in_base = base_accept(self.head.policy, self.region.name, head_root, self.tree.root)
        comparison, recompiles, notes = accepted(
            comparison, self.head.policy, self.region, in_base, head_result.recompiles
        )
        return replace(
            head_result,
            base=comparison,
            recompiles=recompiles,
            notes=(*head_result.notes, *notes),
        )

    def _traced(self, head: RegionResult, base: RegionResult) -> tuple[RegionResult, RegionResult]:
        """Both with their op times by line, from traced runs of the regions the workers still
        hold: made only for a slower step, the one verdict that lists lines (a trace costs
        ~0.9 s a tree on a TPU, `gate.region.cost_phase`). A region with none keeps none.
        Trees apart, the head's worker is gone by now: its times come later
        (`traced_again`)."""
        if self.traced_times is None:
            head_times = (
                None
                if self.apart
                else self.head.scheduler.trace_held(self.head.policy, self.region, tree="head")
            )
            base_times = self.base.scheduler.trace_held(self.base.policy, self.region, tree="base")
            self.traced_times = (head_times, base_times)
        head_times, base_times = self.traced_times
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


def _cpu_by_name(env: dict[str, str]) -> bool:
    """Whether a worker started with ``env`` is pinned to the CPU (``JAX_PLATFORMS=cpu``)."""
    return env.get("JAX_PLATFORMS", "").strip().lower() == "cpu"


class _NoRoomBeside(Exception):
    """The device refused the base's worker beside the head's: it admits one process."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _with_times(result: RegionResult, times: OpTimes | None) -> RegionResult:
    if times is None or result.cost is None:
        return result
    return replace(result, cost=replace(result.cost, times=times))


def _recompiles_vs_base(
    head: RegionResult, base: RegionResult, region: Region, lines: LineMap
) -> RegionResult:
    """``head`` with its recompiles judged against the base's, paired by git's line map
    (`gate.results.recompile_changes`): a compilation after warm-up the base has as often is
    already in the base; a function that compiled more programs in the first call and
    warm-up than its counterpart in the base fails (the base replaces the same-shapes rule)."""
    if region.recompiles is RecompileRule.ALLOW:
        return head
    judged = startup_recompiles(
        head.startup_programs,
        base.startup_programs,
        region.warmup + 1,
        failing=region.recompiles is RecompileRule.FAIL,
        lines=lines,
    )
    after = after_warmup_vs_base(
        [r for r in head.recompiles if not r.startup],
        [r for r in base.recompiles if not r.startup],
        lines,
    )
    return replace(head, recompiles=(*after, *judged))  # every step before the first call only


def _not_compared(head: RegionResult) -> RegionResult:
    """The head failed on its own: its error says what to fix, and a comparison with a step
    that did not run says nothing more."""
    note = "not compared with the base: the head's run did not finish"
    return replace(head, notes=(*head.notes, note))


def _unpaired(
    region: Region, base: tuple[float, ...], head: tuple[float, ...]
) -> TimingComparison | None:
    """The step times of trees run apart: each tree's block of turns, compared unpaired."""
    if not base or not head:
        return None
    from gate.compare.timing import compare_unpaired  # numpy: see `PairedRounds.run`

    rule = region.timing
    return compare_unpaired(
        base,
        head,
        max_slowdown=rule.max_slowdown,
        on_regression=rule.on_regression,
        on_inconclusive=rule.on_inconclusive,
        against="base",
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
    base: RegionResult,
    head: RegionResult,
    region: Region,
    renamed: tuple[Renamed, ...] = (),
    lines: LineMap | None = None,
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
    return compare_costs(
        base_cost,
        missing if head.cost is None else head.cost,
        region.cost,
        lines=lines,
        region=region.name,
        policy_line=region.line,
    )
