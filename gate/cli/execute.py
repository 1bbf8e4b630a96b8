"""What `run` and `baseline` share: the policies loaded, planned and run; the baseline file.

Each region runs in a worker process (`gate.isolation.scheduler`); what the
workers print goes to stderr, so stdout keeps only the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from gate.compare.worktree import BaseTree
from gate.files import DEFAULT_POLICIES
from gate.isolation.cancellation import Cancellation
from gate.isolation.run_loop import run_isolated
from gate.isolation.run_settings import DEFAULT_SETTINGS, RunSettings
from gate.isolation.scheduler import Scheduler, WorkerUnavailable
from gate.isolation.watcher import PrefixedOutput, RunWatcher
from gate.plan import Plan, Shard, UnknownRegionError, region_key
from gate.policy.load import (
    callables_of_invalid,
    discover_policy_files,
    load_policy,
)
from gate.policy.model import NamedCallables, Policy
from gate.policy.problems import PolicyError, Problem, display_path
from gate.printable import say
from gate.results.baseline import default_path
from gate.results.records import RegionResult, RunResult
from gate.results.refusals import gate_bug, policy_problems, unknown_region


def load_policies(
    paths: Sequence[str], repo_root: Path, scheduler: Scheduler, *, write_references: bool = False
) -> list[Policy]:
    """Every policy under ``paths``, its callables imported in ``scheduler``'s workers; or one
    PolicyError with every file's problems."""
    policies = read_policies(paths, repo_root, scheduler, write_references=write_references)
    check_imports(policies, scheduler)
    return policies


def read_policies(
    paths: Sequence[str],
    repo_root: Path,
    scheduler: Scheduler | None,
    *,
    write_references: bool = False,
) -> list[Policy]:
    """Every policy under ``paths``, read and validated, its callables not imported yet.

    A PolicyError has every file's problems: when a file is invalid, every file's
    callables are imported and checked too (in ``scheduler``'s workers, or in a scheduler
    of its own), not only after the rest is fixed.
    """
    files = discover_policy_files(paths or [DEFAULT_POLICIES], repo_root)
    read: list[tuple[Path, Policy | PolicyError]] = []
    for file in files:
        try:
            read.append((file, load_policy(file, repo_root, write_references=write_references)))
        except PolicyError as exc:
            read.append((file, exc))
    policies = [policy for _, policy in read if isinstance(policy, Policy)]
    clashes = _clashing_regions(policies)
    if len(policies) == len(read) and not clashes:
        return policies
    problems: list[Problem] = []
    named: list[NamedCallables] = []
    for file, outcome in read:
        if isinstance(outcome, PolicyError):
            problems.extend(outcome.problems)
            found = callables_of_invalid(file, repo_root)
            if found is not None:
                named.append(found)
    with ExitStack() as stack:
        if scheduler is None:
            scheduler = stack.enter_context(Scheduler(repo_root))
        try:
            imported = _imported(policies, scheduler, named)
        except WorkerUnavailable:
            imported = []  # what YAML and the schema found is still the answer
    reported = {(p.path, p.line, p.where) for p in problems}
    problems += [p for p in imported if (p.path, p.line, p.where) not in reported]
    raise PolicyError(_in_file_order(problems + clashes, files, repo_root))


def check_imports(policies: Sequence[Policy], scheduler: Scheduler) -> None:
    """Import every callable the policies name, in the workers their regions will run in (a
    module may pick its device at import: only a worker has it); a PolicyError for those
    that fail. `WorkerUnavailable` when no worker could start to do it."""
    problems = _imported(policies, scheduler)
    if problems:
        raise PolicyError(tuple(problems))


def _imported(
    policies: Sequence[Policy], scheduler: Scheduler, named: Sequence[NamedCallables] = ()
) -> list[Problem]:
    """What fails to import, each policy's callables imported where its regions run.

    Policies whose ``env:`` makes the same worker are checked together, the group of the
    first policy last: its worker is the one the run starts with, and it stays.
    """
    groups: dict[tuple[tuple[str, str], ...], list[Policy]] = {}
    for policy in policies:
        key = tuple(sorted(scheduler.environment(policy).items()))
        groups.setdefault(key, []).append(policy)
    ordered = list(groups.values())[::-1]
    problems: list[Problem] = []
    if named and not ordered:
        problems += scheduler.check([], named=named).problems
    for index, group in enumerate(ordered):
        checked = scheduler.check(group, named=named if index == 0 else ())
        problems += checked.problems
    order = {policy.path.as_posix(): index for index, policy in enumerate(policies)}
    return sorted(problems, key=lambda p: (order.get(p.path, len(order)), p.line or 0))


def _in_file_order(
    problems: Sequence[Problem], files: Sequence[Path], repo_root: Path
) -> tuple[Problem, ...]:
    order = {display_path(file, repo_root): index for index, file in enumerate(files)}
    return tuple(sorted(problems, key=lambda p: (order.get(p.path, len(order)), p.line or 0)))


def _clashing_regions(policies: Sequence[Policy]) -> list[Problem]:
    """Regions that share ``suite.region`` across files.

    The report, the baseline and --region all name a region by
    ``suite.region``; two of them would share a baseline entry and a
    testcase, so one could hide the other.
    """
    first: dict[str, tuple[Policy, int]] = {}
    problems = []
    for policy in policies:
        for index, region in enumerate(policy.regions):
            name = region_key(policy, region)
            seen = first.setdefault(name, (policy, region.line))
            if seen[0] is not policy:
                other, line = seen
                problems.append(
                    Problem(
                        policy.path.as_posix(),
                        region.line,
                        f"regions[{index}]",
                        f"region {name!r} is also defined in {other.path.as_posix()}:{line}; "
                        "give one of the files its own `suite:` name",
                    )
                )
    return problems


@dataclass(frozen=True)
class Selection:
    """What `run` and `baseline` run: the policies, which of their regions, and what changes
    for this run. Read from the command line once (`from_args`); nothing below the command
    sees argparse."""

    paths: tuple[str, ...]  # policy files and folders
    regions: tuple[str, ...] | None = None  # --region NAME ...; None: every region
    shard: Shard | None = None  # --shard K/N
    write_references: bool = False  # run --write-references
    require_platform: str | None = None  # run --require-platform gpu|tpu|cpu

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Selection:
        regions = getattr(args, "region", None)
        return cls(
            paths=tuple(args.paths),
            regions=tuple(regions) if regions else None,
            shard=getattr(args, "shard", None),
            write_references=getattr(args, "write_references", False),
            require_platform=getattr(args, "require_platform", None),
        )


def execute(
    selection: Selection,
    repo_root: Path,
    refused: Callable[[RunResult], None] | None = None,
    *,
    cancel: Cancellation | None = None,
    base: BaseTree | None = None,
    planned: Callable[[Plan], None] | None = None,
    watcher: RunWatcher | None = None,
    finished: Callable[[RegionResult], None] | None = None,
    settings: RunSettings = DEFAULT_SETTINGS,
) -> RunResult:
    """Load, check, plan and run what ``selection`` names; each region against ``base`` if given.

    When the policies are invalid, ``--region`` names no region or the gate breaks,
    ``refused`` gets the result that says so (to report it) before the exception goes on.
    ``planned`` gets the plan before it runs (`run` reads each region's ``timing:`` from it).
    ``watcher`` hears the regions' stages and output (by default each output line goes to
    stderr as ``[suite.region] line``); ``finished`` gets each region's result. ``settings``:
    what the run decided for its workers (`gate.isolation.run_settings`).
    """
    watcher = PrefixedOutput(sys.stderr) if watcher is None else watcher
    try:
        policies = read_policies(
            selection.paths, repo_root, None, write_references=selection.write_references
        )
    except PolicyError as exc:
        if refused is not None:
            refused(policy_problems(exc.problems))
        raise
    required = selection.require_platform
    if required is not None:
        policies = [dataclasses.replace(p, platform=required) for p in policies]
    try:
        plan = Plan.make(policies, selection.regions, selection.shard)
    except UnknownRegionError as exc:
        if refused is not None:
            refused(unknown_region(str(exc)))
        raise
    if plan.shard is not None:
        say(plan.shard.describe())
    if planned is not None:
        planned(plan)

    def imported(scheduler: Scheduler) -> None:
        # In the workers, where the device is; the first one is already starting.
        try:
            check_imports(policies, scheduler)
        except PolicyError as exc:
            if refused is not None:
                refused(policy_problems(exc.problems))
            raise
        except WorkerUnavailable:
            pass  # no worker starts: each region's error says why

    try:
        if base is not None:
            # Here, not at the top: a plain run compares nothing, and the comparison's modules
            # (numpy among them) would cost its process more than the rest of its imports.
            from gate.compare.session import run_compared

            return run_compared(
                plan,
                repo_root,
                base,
                cancel=cancel,
                watcher=watcher,
                finished=finished,
                starting=imported,
                settings=settings,
            )
        return run_isolated(
            plan,
            repo_root,
            cancel=cancel,
            watcher=watcher,
            finished=finished,
            starting=imported,
            settings=settings,
        )
    except PolicyError:
        raise
    except Exception as exc:
        if refused is not None:
            refused(gate_bug(exc))
        raise


def baseline_for(named: str | None, paths: Sequence[str], repo_root: Path) -> tuple[Path, bool]:
    """The baseline file to use (``--baseline``'s, else the one beside ``paths``' policies)
    and whether the user named it."""
    if named:
        return Path(named), True
    return default_path(paths, repo_root, DEFAULT_POLICIES), False


def shown(path: Path, repo_root: Path) -> str:
    """``path`` as the user sees it: relative to the repository when it is inside."""
    try:
        return path.resolve().relative_to(repo_root.resolve()).as_posix()
    except ValueError:
        return str(path)
