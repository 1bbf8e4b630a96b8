"""The testcases a region's collectives and donations give in the JUnit report.

Present only when there is something to say, so a single-device region's report is what
it always was:

- ``<region>: collectives`` (``collectives vs baseline``), when compared: the comparison,
  every change in its body; a failure when the step's bytes grew past ``cost.max_increase``,
  an error when a check could not be made;
- ``<region>: new all-gather over 'data' at model.py:42``, one per new collective under
  ``collectives: fail`` (failing) or ``warn`` (passing, said in system-out), at the
  collective's own line: the PR tools annotate the line whose spec made it;
- ``<region>: donation``, when a donated argument is not reused, or one the base (or the
  stored baseline) donated and reused is no longer donated, at the policy line: a failure
  under ``donation: fail``, or for one the other side reused under ``fail_new``; an error
  when that comparison could not be made.
"""

from __future__ import annotations

from gate.policy.model import ChangeKind
from gate.report.communication_text import (
    accept_edit,
    collective_fix,
    comm_comparisons,
    comm_findings,
    comm_label,
    donation_comparisons,
    donation_label,
    inventory_lines,
    shown,
)
from gate.report.junit_cases import Case, Outcome, declared, policy_case, timing_next_step
from gate.results.collective_changes import NEW, CollectiveChange, CommComparison
from gate.results.donations import DONATION_FIX, DROPPED_FIX
from gate.results.records import RegionResult


def communication_cases(region: RegionResult) -> list[Case]:
    """The collectives' and donations' testcases of ``region`` (none for an errored region)."""
    if region.error is not None:
        return []
    cases = []
    for comm in comm_comparisons(region):
        # A step without collectives on either side has nothing to say: its report stays as is.
        if shown(comm) or comm.failing or comm.base_bytes or comm.head_bytes:
            cases.append(_comparison_case(region, comm))
        cases.extend(
            _new_case(region, comm, change)
            for change in comm.changes
            if change.change == NEW and (change.failing or change.warning)
        )
    compared = donation_comparisons(region)
    if region.donations or any(d.unchecked or d.dropped for d in compared):
        cases.append(_donation_case(region))
    return cases


def _comparison_case(region: RegionResult, comm: CommComparison) -> Case:
    lines = [f"{comm_label(comm)}: {comm.headline()}"]
    if comm.bytes_line():
        lines.append(comm.bytes_line())
    lines.extend(f"- {change.line(_policy(region))}" for change in comm.changes)
    lines.extend(inventory_lines(region))
    body = "\n".join(lines) + "\n\n" + declared(region) + timing_next_step(region, comm.against)
    outcome = None
    if comm.unchecked is not None:
        outcome = Outcome("error", "collectives-not-checked", comm.headline(), body)
    elif comm.bytes_failing:
        message = comm.bytes_line() + accept_edit(region, ChangeKind.COLLECTIVES, comm.against)
        outcome = Outcome("failure", "collectives", message, body)
    name = "collectives" if comm.against == "base" else f"collectives vs {comm.against}"
    return policy_case(region, f"{region.name}: {name}", body, outcome)


def _new_case(region: RegionResult, comm: CommComparison, change: CollectiveChange) -> Case:
    assert change.head is not None
    sample = change.head.sample
    where = change.location
    place = str(where) if where is not None else sample.function
    against = "" if comm.against == "base" else f" vs {comm.against}"
    name = f"{region.name}: new {sample.kind} {sample.over()} at {place}{against}"
    lines = [change.line(_policy(region))]
    if change.source:
        lines.append(f"    {change.source}")
    lines += [
        f"in {sample.function}; JAX's op: {sample.op_name or '(none)'}",
        f"fix: {collective_fix(change)}",
    ]
    body = "\n".join(lines) + "\n\n" + declared(region) + timing_next_step(region, comm.against)
    edit = accept_edit(region, ChangeKind.COLLECTIVES, comm.against)
    outcome = (
        Outcome("failure", "collective", change.line(_policy(region)) + edit, body)
        if change.failing
        else None
    )
    file, line = (where.path, where.line) if where else (region.policy_path, region.policy_line)
    return Case(name, region.classname, file, line, None, body, outcome)


def _donation_case(region: RegionResult) -> Case:
    findings = [
        f
        for f in comm_findings(region)
        if f.what in ("unused donation", "dropped donation", "donations")
    ]
    lines = [f"- {f.text}" for f in findings]
    lines.extend(
        f"{donation_label(d)}: {d.headline()}" for d in donation_comparisons(region) if d.shown
    )
    fixes = [DROPPED_FIX] if any(f.what == "dropped donation" for f in findings) else []
    fixes += [DONATION_FIX] if any(f.what == "unused donation" for f in findings) else []
    body = "\n".join(lines) + "".join(f"\nfix: {fix}" for fix in fixes) + "\n\n"
    body += declared(region)
    unchecked = [f for f in findings if f.what == "donations"]
    # A dropped donation first: the head's change removed it, where a lost one stopped fitting.
    failing = [f for f in findings if f.failing and f.what == "dropped donation"]
    failing += [f for f in findings if f.failing and f.what == "unused donation"]
    outcome = None
    if unchecked:
        outcome = Outcome("error", "donations-not-checked", unchecked[0].text, body)
    elif failing:
        message = failing[0].text
        if len(failing) > 1:
            dropped = fixes[0] == DROPPED_FIX
            lead = "donations lost" if dropped else "donated arguments are not reused"
            message = f"{len(failing)} {lead}: {message}"
        for fix in (DONATION_FIX, DROPPED_FIX):  # the accept edit, where it has one
            if failing[0].fix.startswith(fix):
                message += failing[0].fix.removeprefix(fix)
        outcome = Outcome("failure", "donation", message, body)
    return policy_case(region, f"{region.name}: donation", body, outcome)


def _policy(region: RegionResult) -> str:
    return f"{region.policy_path}:{region.policy_line}"


def communication_properties(region: RegionResult) -> dict[str, str]:
    """``<region>.comm.bytes_per_step``, ``.comm.<kind>.runs``, ``.donations.unused``, ..."""
    properties: dict[str, str] = {}
    prefix = f"{region.name}."
    comm = region.cost.comm if region.cost is not None else None
    if comm is not None and comm.measured:
        properties[prefix + "comm.bytes_per_step_per_device"] = str(comm.bytes_per_step)
        properties[prefix + "comm.collectives"] = str(len(comm.collectives))
        for kind, runs, size in comm.by_kind():
            properties[f"{prefix}comm.{kind}.runs_per_step"] = str(runs)
            properties[f"{prefix}comm.{kind}.bytes_per_step_per_device"] = str(size)
    if region.donations:
        properties[prefix + "donations.unused"] = str(len(region.donations))
    for compared in comm_comparisons(region):
        key = f"{prefix}vs_{compared.against}.collectives."
        properties[key + "new"] = str(sum(1 for c in compared.changes if c.change == NEW))
        properties[key + "failing"] = str(compared.collectives_failing).lower()
        if compared.donations is not None and compared.donations.compared:
            lost = str(len(compared.donations.lost))
            properties[f"{prefix}vs_{compared.against}.donations.lost"] = lost
            dropped = str(len(compared.donations.dropped))
            properties[f"{prefix}vs_{compared.against}.donations.dropped"] = dropped
    return properties
