"""The one loop of a run: every region of the plan, in one worker, or one worker per device.

On the CPU, and on a host with one accelerator, one worker at a time runs the regions in
turn. On a host with several TPU chips (`gate.isolation.device_pool`), a worker per chip
runs them side by side, each region wholly on one chip (under ``run --base`` both trees' runs
of it too); the report keeps the plan's order.

A region that errors is that region's error; a gate bug while one runs is that region's
INTERNAL error (the run exits 3) and the other regions are judged. A device held by another
process past the wait for it (`DeviceBusy`) stops the run: the regions judged so far stay,
and one error says who holds the device and what to do, instead of one per region.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gate.isolation.cancellation import Cancellation
from gate.isolation.device_pool import DevicePool
from gate.isolation.environment import worker_environment
from gate.isolation.run_settings import DEFAULT_SETTINGS, RunSettings
from gate.isolation.scheduler import Scheduler
from gate.isolation.watcher import RunWatcher
from gate.isolation.worker_start import DeviceBusy
from gate.plan import Plan
from gate.policy.model import Policy, Region
from gate.results.errors import gate_fault
from gate.results.records import RegionResult, RunResult, SuiteResult
from gate.results.refusals import busy_device

RunRegion = Callable[[Scheduler, Policy, Region], RegionResult]


def side_by_side(plan: Plan, environ: Mapping[str, str]) -> int:
    """How many workers run at once: one per device of the most devices a policy's workers
    share out, one on the CPU."""
    most = 1
    for policy, _ in plan.steps:
        pool = DevicePool.for_environment(worker_environment(environ, policy))
        if pool is not None:
            most = max(most, len(pool.slots))
    return most


@contextlib.contextmanager
def schedulers(
    plan: Plan,
    repo_root: Path,
    *,
    cancel: Cancellation | None,
    watcher: RunWatcher | None,
    environ: Mapping[str, str] | None = None,
    settings: RunSettings = DEFAULT_SETTINGS,
    audited: bool = False,
) -> Iterator[list[Scheduler]]:
    """As many schedulers as workers run at once (`side_by_side`), each stopped on leaving;
    each sends ``settings`` with its jobs; ``audited``: their workers' audit hook listens
    (`Job.audited`)."""
    env = dict(os.environ if environ is None else environ)
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                Scheduler(
                    repo_root,
                    cancel=cancel,
                    watcher=watcher,
                    environ=env,
                    settings=settings,
                    audited=audited,
                )
            )
            for _ in range(side_by_side(plan, env))
        ]


def run_isolated(
    plan: Plan,
    repo_root: Path,
    *,
    cancel: Cancellation | None = None,
    watcher: RunWatcher | None = None,
    finished: Callable[[RegionResult], None] | None = None,
    starting: Callable[[Scheduler], None] | None = None,
    settings: RunSettings = DEFAULT_SETTINGS,
) -> RunResult:
    """Run every region of ``plan``, each in a worker process; never loses one.

    A region whose worker crashes, times out or is cancelled is an error in the result; so is
    a bug in the gate while it ran one (INTERNAL). After ``cancel`` is requested, the regions
    not yet run are CANCELLED errors. ``watcher`` hears each region's stages and its worker's
    output; ``finished`` gets each region's result as soon as it is known. ``starting`` gets the
    first scheduler while its worker starts (what it raises stops the workers and the run).
    """
    with schedulers(plan, repo_root, cancel=cancel, watcher=watcher, settings=settings) as workers:
        return begin(plan, workers, starting, lambda s, p, r: s.run(p, r), finished)


def begin(
    plan: Plan,
    workers: list[Scheduler],
    starting: Callable[[Scheduler], None] | None,
    run: RunRegion,
    finished: Callable[[RegionResult], None] | None,
) -> RunResult:
    """The first worker started early and ``starting`` told, then `each_region`."""
    for policy, _ in plan.first():
        workers[0].start_early(policy)
    try:
        if starting is not None:
            starting(workers[0])
    except DeviceBusy as busy:
        return RunResult((busy_suite(busy, _count(plan)),))
    return each_region(plan, run, workers, finished)


def each_region(
    plan: Plan,
    run: RunRegion,
    workers: list[Scheduler],
    finished: Callable[[RegionResult], None] | None = None,
) -> RunResult:
    """``run`` of every region of ``plan`` on a free scheduler of ``workers``, and ``finished``
    told of each result as it comes; the result in the plan's order."""
    free: queue.SimpleQueue[Scheduler] = queue.SimpleQueue()
    for worker in workers:
        free.put(worker)
    busy: list[DeviceBusy] = []
    told = threading.Lock()

    def one(policy: Policy, region: Region) -> RegionResult | None:
        if busy:
            return None  # the device is held elsewhere: the run stopped
        worker = free.get()
        started = time.monotonic()
        try:
            result = run(worker, policy, region)
        except DeviceBusy as exc:
            busy.append(exc)
            return None
        except Exception as exc:
            error = gate_fault("running this region", exc)
            result = RegionResult.of(policy, region, wall_s=time.monotonic() - started, error=error)
        finally:
            free.put(worker)
        if finished is not None:
            with told:
                finished(result)
        return result

    suites = []
    if len(workers) == 1:  # in this thread, where signals arrive
        for policy, regions in plan.steps:
            results = tuple(r for region in regions if (r := one(policy, region)) is not None)
            suites.append(SuiteResult(policy.suite, policy.path.as_posix(), results))
    else:
        with ThreadPoolExecutor(len(workers), thread_name_prefix="transfer-gate-region") as pool:
            futures = [
                (policy, [pool.submit(one, policy, region) for region in regions])
                for policy, regions in plan.steps
            ]
            for policy, submitted in futures:
                results = tuple(r for f in submitted if (r := f.result()) is not None)
                suites.append(SuiteResult(policy.suite, policy.path.as_posix(), results))
    if busy:
        done = sum(len(s.regions) for s in suites)
        suites.append(busy_suite(busy[0], _count(plan) - done))
    return RunResult(tuple(s for s in suites if s.regions))


def busy_suite(busy: DeviceBusy, not_run: int) -> SuiteResult:
    """The run's one error for a device held by another process."""
    (suite,) = busy_device(busy.message, busy.details, not_run).suites
    return suite


def _count(plan: Plan) -> int:
    return sum(len(regions) for _, regions in plan.steps)
