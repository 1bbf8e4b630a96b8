"""Each region's step times against those ``transfer-gate baseline`` stored, on the same machine.

The threshold is the region's ``timing.baseline_max_slowdown`` (default 1.5),
wider than the 1.10 against ``--base``: the stored samples were measured in
another job, perhaps on another runner of the same kind, minutes or weeks
apart and not interleaved with these, so thermal state, neighbours on the
machine and clock drift differ between the two samples as a whole, and the
rank test cannot tell that from the code. A factor of 1.5 is past what such
drift does to a step on one runner model, and well short of the 2-3x a
recompiling or host-bound step costs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gate.plan import Plan, region_key
from gate.policy.model import Region
from gate.results.baseline import NEXT_STEP
from gate.results.baseline_file import StoredBaseline
from gate.results.collective_changes import compare_communication
from gate.results.costs import compare_costs, not_measured
from gate.results.donation_changes import compare_donations
from gate.results.machine import Machine
from gate.results.records import RegionResult, RunResult
from gate.results.timing_baseline import StoredTiming


def planned_regions(plan: Plan) -> dict[str, Region]:
    """Each planned region, by ``suite.region``: its ``timing:`` and ``cost:`` rules."""
    return {
        region_key(policy, region): region for policy, regions in plan.steps for region in regions
    }


def compare_with_baseline(
    run: RunResult, stored: StoredBaseline, rules: Mapping[str, Region], command: str
) -> RunResult:
    """``run`` with each region's `RegionResult.timing_vs_baseline` set, or a note saying why not.

    A region with ``timing: off``, or without samples (it errored, or was refused), is left as
    it is. XLA's figures are compared too (`RegionResult.cost_vs_baseline`), whatever
    ``timing:`` says, when both the stored entry and the run measured them on the same
    machine. ``command`` is `transfer-gate baseline` as this run would call it: a note names it,
    scoped to the region, as the way to record or accept the region's timing.
    """
    suites = []
    for suite in run.suites:
        regions = tuple(
            _judged(region, stored, rules.get(region.classname), command)
            for region in suite.regions
        )
        suites.append(replace(suite, regions=regions))
    return replace(run, suites=tuple(suites))


def timing_command(command: str, region: RegionResult) -> str:
    """The command that records ``region``'s timing alone, as it is now."""
    return f"{command} --region {region.classname} --timing-only"


def _judged(
    region: RegionResult, stored: StoredBaseline, rule: Region | None, command: str
) -> RegionResult:
    if rule is None or region.error is not None or not region.timing_samples:
        return region
    current = region.machine
    if current is None:
        return region
    entry = stored.timing.get(region.classname)
    if entry is not None and entry.machine == current:
        region = _cost_judged(region, entry, rule)
        region = _comm_judged(region, entry, rule)
    elif entry is not None and rule.cost.max_increase is not None:
        # XLA's figures are the platform's own: another machine's are no bound on these.
        region = _noted(region, f"cost not compared: {_elsewhere('cost', entry, current)}")
    if rule.timing.compare:
        region = _timing_judged(region, stored, entry, rule, command)
    if (
        (region.timing_vs_baseline is not None and region.timing_vs_baseline.failing)
        or (region.cost_vs_baseline is not None and region.cost_vs_baseline.failing)
        or (region.comm_vs_baseline is not None and region.comm_vs_baseline.failing)
    ):
        region = _noted(
            region,
            f"{NEXT_STEP}`{timing_command(command, region)}` records this region's step times, "
            "XLA's figures, collectives and unused donations as they are now; it accepts no "
            "transfer",
        )
    return region


def _elsewhere(what: str, entry: StoredTiming, current: Machine) -> str:
    """One line naming both machines, and first what differs between them."""
    differ = ", ".join(entry.machine.differences(current))
    return (
        f"the baseline's {what} was measured on another machine ({differ} differ): "
        f"{entry.machine.describe()}; this run: {current.describe()}"
    )


def _timing_judged(
    region: RegionResult,
    stored: StoredBaseline,
    entry: StoredTiming | None,
    rule: Region,
    command: str,
) -> RegionResult:
    assert region.machine is not None
    record = f"record it on this machine with `{timing_command(command, region)}`"
    if stored.no_timing is not None:
        return _noted(region, f"timing not compared: {stored.no_timing}; {record}")
    if entry is None:
        return _noted(
            region, f"timing not compared: the baseline has no timing for this region; {record}"
        )
    if entry.machine != region.machine:
        return _noted(region, f"timing not compared: {_elsewhere('timing', entry, region.machine)}")
    # Here, not at the top: every run imports this module, and only a region with stored
    # samples from this machine gets this far; the test's module brings numpy.
    from gate.compare.timing import compare_unpaired

    comparison = compare_unpaired(
        entry.samples,
        region.timing_samples,
        max_slowdown=rule.timing.baseline_max_slowdown,
        on_regression=rule.timing.on_regression,
        on_inconclusive=rule.timing.on_inconclusive,
        against="baseline",
    )
    if entry.noisy is not None:
        where = "on a quieter machine" if entry.noisy.low is not None else "with more repeats"
        rerecord = f"re-record it {where} with `{timing_command(command, region)}`"
        said = f"{entry.noisy.describe()}; {rerecord}"
        comparison = replace(comparison, noisy_baseline=said)
    return replace(region, timing_vs_baseline=comparison)


def _cost_judged(region: RegionResult, entry: StoredTiming, rule: Region) -> RegionResult:
    """XLA's figures against the stored ones of the same machine. A side without them is
    left out, unless ``cost.max_increase`` asks for a bound: then it is a comparison that
    could not be checked (`CostComparison.unchecked`), never a silent pass."""
    current = region.cost
    if rule.cost.max_increase is None and (
        entry.cost is None or current is None or not current.measured
    ):
        return region
    stored = (
        not_measured("no cost stored for this region; run `transfer-gate baseline` to record it")
        if entry.cost is None
        else entry.cost.step_cost()
    )
    if current is None:
        current = not_measured("the cost run did not happen")
    compared = compare_costs(
        stored, current, rule.cost, against="baseline", region=rule.name, policy_line=rule.line
    )
    return replace(region, cost_vs_baseline=compared)


def _comm_judged(region: RegionResult, entry: StoredTiming, rule: Region) -> RegionResult:
    """The collectives and unused donations against the stored ones of the same machine. A
    baseline recorded before the gate kept them has none: under ``collectives: fail`` (or a
    ``cost.max_increase``), and ``donation: fail_new`` for a step that leaves a donation
    unused, that is a check that could not be made, never a silent pass."""
    stored_cost = entry.cost.step_cost() if entry.cost is not None else None
    stored = stored_cost.comm if stored_cost is not None else None
    current = region.cost.comm if region.cost is not None else None
    compared = compare_communication(
        stored,
        current,
        rule.collectives,
        rule.cost.max_increase,
        against="baseline",
        missing=_not_stored("collectives") if stored is None else "the cost run did not happen",
    )
    stored_donations = stored_cost.donations if stored_cost is not None else None
    donations = compare_donations(
        stored_donations,
        region.cost.donations if region.cost is not None else None,
        rule.donation,
        against="baseline",
        missing=_not_stored("donations") if stored_donations is None else "",
        base_reused=stored_cost.reused if stored_cost is not None else None,
        head_reused=region.cost.reused if region.cost is not None else None,
    )
    compared = replace(compared, donations=donations)
    said = donations is not None and (
        donations.lost or donations.kept or donations.dropped or not donations.compared
    )
    if not compared.compared and compared.unchecked is None and not said:
        return _noted(region, f"collectives not compared with the baseline: {compared.note}")
    return replace(region, comm_vs_baseline=compared)


def _not_stored(what: str) -> str:
    return f"no {what} stored for this region; run `transfer-gate baseline` to record them"


def _noted(region: RegionResult, note: str) -> RegionResult:
    return replace(region, notes=(*region.notes, note))
