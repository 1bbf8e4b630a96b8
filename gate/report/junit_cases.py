"""The testcases a region gives in the JUnit report: names, places, messages and bodies.

`gate.report.junit` turns these records into XML and checks the XML against
them, so the suite's counts and the ``<testcase>`` nodes come from one list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gate.levels import Direction, GuardSpec
from gate.policy.model import ChangeKind
from gate.report.communication_text import accept_edit
from gate.report.terminal import (
    format_boundary,
    format_check,
    format_recompile,
    format_timing,
    one_line,
    recompile_fix,
    transfer_location,
)
from gate.results.baseline import next_step
from gate.results.costs import CostComparison
from gate.results.errors import ErrorKind, RegionError
from gate.results.findings import Finding, group
from gate.results.hints import hint_for, hint_for_error
from gate.results.records import RegionResult, Transfer


@dataclass(frozen=True)
class Outcome:
    """A failure, error or skip for one testcase, before it reaches junit-xml."""

    tag: Literal["failure", "error", "skipped"]
    kind: str  # the element's `type` attribute
    message: str
    body: str


@dataclass(frozen=True)
class Case:
    """One testcase; the suite's counts and the XML both come from these."""

    name: str
    classname: str
    file: str
    line: int
    elapsed_s: float | None
    stdout: str
    outcome: Outcome | None


def policy_case(region: RegionResult, name: str, stdout: str, outcome: Outcome | None) -> Case:
    """A testcase of ``region`` that points at its entry in the policy file."""
    return Case(
        name, region.classname, region.policy_path, region.policy_line, None, stdout, outcome
    )


def declared(region: RegionResult) -> str:
    """The line that ends a testcase's body: where the region is declared."""
    return f"Region declared at {region.policy_path}:{region.policy_line}\n"


def timing_next_step(region: RegionResult, against: str) -> str:
    """What ends a failure against the stored baseline's timing, cost or collectives: the
    command that accepts it (`gate.results.baseline.next_step`); "" against the base."""
    accept = next_step(region, "timing") if against == "baseline" else None
    return f"{accept}\n" if accept else ""


# Errors of the run, not of a region: their testcase is named after what broke.
_REFUSALS = frozenset({ErrorKind.POLICY, ErrorKind.BASELINE, ErrorKind.BASE, ErrorKind.REGION})
_RUN_LEVEL_ERRORS = _REFUSALS | {ErrorKind.INTERNAL, ErrorKind.DEVICE}


def region_cases(region: RegionResult) -> list[Case]:
    """The testcases of ``region``: its transfers, and its result checks when it declares any."""
    policy_file, policy_line = region.policy_path, region.policy_line
    # junit-xml omits `time` when it is 0; rounding to the millisecond keeps
    # the suite's summed `time` out of scientific notation (1e-05), which
    # some readers reject.
    elapsed = round(region.wall_s, 3)
    system_out = _system_out(region)

    if region.error is not None:
        error = region.error
        # A cancelled region did nothing wrong: point at its policy entry, not at
        # whatever line happened to be running when the run was stopped.
        where = None if error.kind is ErrorKind.CANCELLED else error.location
        # An invalid policy, or a gate bug outside any region, is not about a
        # region's transfers: name the testcase after what broke ("policy",
        # "gate"). A gate bug while a region ran keeps the region's testcase.
        run_level = error.kind in _RUN_LEVEL_ERRORS and (
            error.kind in _REFUSALS or not region.policy_path
        )
        name = region.name if run_level else f"{region.name}: transfers"
        cases = [
            Case(
                name,
                region.classname,
                where.path if where is not None else policy_file,
                where.line if where is not None else policy_line,
                elapsed,
                system_out,
                Outcome(
                    "error",
                    error.kind.name.lower(),
                    _error_message(error),
                    _error_body(region, error),
                ),
            )
        ]
        if region.has_checks:
            cases.append(
                Case(
                    f"{region.name}: result checks",
                    region.classname,
                    policy_file,
                    policy_line,
                    None,
                    "",
                    Outcome(
                        "error",
                        "not-run",
                        f"result checks not run: {_error_message(error)}",
                        f"The region stopped before its result checks could run:\n"
                        f"{_error_message(error)}\n"
                        f"See the '{region.name}: transfers' testcase for the details.\n",
                    ),
                )
            )
        return cases

    failing = [f for f in group(region.transfers) if f.failing]
    if failing:
        first = failing[0].location
        file, line = (first.path, first.line) if first is not None else (policy_file, policy_line)
        outcome: Outcome | None = Outcome(
            "failure", "transfer", _transfers_message(failing), _transfers_body(region)
        )
    else:
        file, line, outcome = policy_file, policy_line, None
    cases = [
        Case(
            f"{region.name}: transfers", region.classname, file, line, elapsed, system_out, outcome
        )
    ]
    if region.recompiles:
        cases.append(_recompiles_case(region))

    if region.has_checks:
        check_lines = "\n".join(format_check(c) for c in region.checks) or "no checks ran"
        failed = [c for c in region.checks if not c.passed]
        check_outcome = (
            Outcome(
                "failure",
                "result-check",
                _checks_message(region),
                f"{check_lines}\n\n{declared(region)}",
            )
            if failed
            else None
        )
        cases.append(
            Case(
                f"{region.name}: result checks",
                region.classname,
                policy_file,
                policy_line,
                None,
                check_lines + "\n",
                check_outcome,
            )
        )
    if region.base is not None and region.base.cost is not None:
        cases.append(_cost_case(region, region.base.cost, "cost"))
    if region.cost_vs_baseline is not None:
        cases.append(_cost_case(region, region.cost_vs_baseline, "cost vs baseline"))
    return cases


def _cost_case(region: RegionResult, cost: CostComparison, label: str) -> Case:
    """XLA's figures against the base: present only when compared, so other reports keep theirs.

    Fails when a total grew beyond ``cost: {max_increase}`` or a work total beyond
    ``max_work_increase`` (then it points at the line whose work grew), is an error when that rule
    could not be checked (a side unmeasured, a total one side lacks); otherwise it lists
    every change in its system-out.
    """
    changes = "\n".join(f"- {line}" for line in cost.listing())
    listing = f"{cost.headline()}\n" + (f"{changes}\n" if changes else "")
    outcome = None
    if cost.failing:
        body = f"{listing}\n{declared(region)}{timing_next_step(region, cost.against)}"
        message = cost.headline() + accept_edit(region, ChangeKind.COST, cost.against)
        if cost.unchecked is not None:
            outcome = Outcome("error", "cost-not-checked", message, body)
        else:
            outcome = Outcome("failure", "cost", message, body)
            # The annotation goes where a reviewer must look: the new constant's line, or
            # where the work grew.
            grown = cost.grown_line({c.metric for c in cost.changes if c.failing})
            places = [(c.path, c.line) for c in cost.new_constants if c.path]
            if grown is not None and grown.shown.path:
                places.append((grown.shown.path, grown.shown.line))
            if places:
                name = f"{region.name}: {label}"
                return Case(name, region.classname, *places[0], None, listing, outcome)
    return policy_case(region, f"{region.name}: {label}", listing, outcome)


def _recompiles_case(region: RegionResult) -> Case:
    """Its own testcase, as result checks have: a slow step is not a transfer on a line.

    Present only when something compiled after warm-up, so a clean region's report
    is what it always was; a ``warn`` region's case passes and says it in system-out.
    """
    entries = []
    for recompile in region.recompiles:
        entries.append(f"- {format_recompile(recompile, region)}")
        if recompile.source:
            entries.append(f"    {recompile.source}")
    listing = "\n".join(entries) + f"\nfix: {recompile_fix(region.recompiles)}\n"
    failing = [r for r in region.recompiles if r.failing]
    first = (failing or list(region.recompiles))[0].location
    file, line = (first.path, first.line) if first else (region.policy_path, region.policy_line)
    outcome = None
    if failing:
        # The first is the most severe (after warm-up, every step), where the case points.
        message = format_recompile(failing[0], region)
        if len(failing) > 1:
            message += f" (+{len(failing) - 1} more in this testcase's body)"
        body = f"{listing}\n{declared(region)}"
        outcome = Outcome("failure", "recompile", message, body)
    return Case(f"{region.name}: recompiles", region.classname, file, line, None, listing, outcome)


def _transfers_message(failing: list[Finding]) -> str:
    """``implicit host-to-device transfer float32[8] at a.py:12, 3x per step`` (+ the rest).

    The first is the most severe (`gate.results.findings.group`'s order), the line the
    testcase's ``file``/``line`` point at; the message names up to four, then says how many
    more there are and where they are listed."""
    # ``run --base``: whether its line is part of this change (`Finding.line_change`).
    message = failing[0].headline() + failing[0].line_change()
    if len(failing) > 1:
        lines = {f.where() for f in failing}
        shown = []
        for finding in failing[1:4]:
            # Two directions or arrays at one line read as two entries of the same place.
            same_place = finding.where() == failing[0].where() or len(lines) < len(failing)
            shown.append(
                f"{finding.what()} at {finding.where()}" if same_place else finding.where()
            )
        more = len(failing) - 4
        # A PR tool shows the message alone: say where the lines it leaves out are.
        tail = f", and {more} more (every one in this testcase's body)" if more > 0 else ""
        head = (
            f"{len(failing)} lines move data"
            if len(lines) == len(failing)
            else f"{len(failing)} transfers at {len(lines)} line{'s' if len(lines) > 1 else ''}"
        )
        message = f"{head}: {message}; also {', '.join(shown)}{tail}"
    return message


def _transfers_body(region: RegionResult) -> str:
    findings = group(region.transfers)
    failing = [f for f in findings if f.failing]
    lines = len({f.location for f in failing})
    head = (
        f"{_count(len(failing), 'line')} with failing transfers"
        if lines == len(failing)
        # One line moving several arrays: one entry per array.
        else f"{_count(len(failing), 'failing transfer')} at {_count(lines, 'line')}"
    )
    parts = [
        f"{head}, most severe first:\n" + "\n".join(_finding_entry(f, region) for f in failing)
    ]
    others = [f for f in findings if not f.failing]
    if others:
        parts.append(
            f"{_count(len(others), 'other line')} moving data (logged or allowed, not failing):\n"
            + "\n".join(_finding_entry(f, region) for f in others)
        )
    parts.append(_details(region))
    # What accepts them, where a stored baseline judged them: the body's last word.
    accept = next_step(region, "transfers")
    return "\n\n".join([*parts, accept] if accept else parts)


def _finding_entry(finding: Finding, region: RegionResult) -> str:
    transfer = finding.sample_with_shape()
    function = finding.location.function if finding.location is not None else "?"
    where = transfer_location(transfer, region)
    levels = region.guard.inside_boundary() if finding.boundary is not None else region.guard
    verdict = "FAILS" if finding.failing else "allowed"
    if finding.sample.in_base:  # `run --base`: the base tree moves it too, so it is not new
        verdict = "allowed: already in the base"
    lines = [
        f"- {where} in {function}: {finding.kind} {finding.what()} — {finding.counts()}"
        f"{finding.line_change()}"
    ]
    if finding.source:
        lines.append(f"    {finding.source}")
    if finding.scope():
        lines.append(f"  {finding.scope()}")
    if finding.placement():
        lines.append(f"  {_lands(finding, transfer)}")
    lines.append(f"  guard level: {levels.level(finding.direction).value} ({verdict})")
    if finding.location is None:
        lines.append("  (no frame of your code found; the location is the region's policy entry)")
    jax_lines = transfer.message.splitlines() or ["(no message)"]
    lines.append(f"  seen by: {jax_lines[0]}")
    lines.extend(f"       {rest}" for rest in jax_lines[1:])
    lines.append(f"  fix: {hint_for(transfer)}")
    return "\n".join(lines)


def _lands(finding: Finding, transfer: Transfer) -> str:
    """``lands: replicated to 8 devices, P() (mesh 'data': 8): 32768 bytes a transfer``."""
    placement = finding.destination or transfer.fetched_from
    mesh = f" (mesh {placement.mesh})" if placement is not None and placement.mesh else ""
    verb = "lands" if finding.destination is not None else "read"
    landed = transfer.landed_bytes
    size = f": {landed} bytes a transfer" if landed is not None else ""
    if landed is not None and transfer.nbytes is not None and landed != transfer.nbytes:
        size += f" ({landed // transfer.nbytes} copies of {transfer.nbytes})"
    return f"{verb}: {finding.placement()}{mesh}{size}"


def _system_out(region: RegionResult) -> str:
    """Every transfer seen, then the region's details: what EnricoMi shows for any case."""
    if not region.transfers:
        return _details(region)
    entries = "\n".join(_finding_entry(f, region) for f in group(region.transfers))
    return f"{entries}\n\n{_details(region)}"


def _details(region: RegionResult) -> str:
    """Guard levels, transfer counts, timing and boundary costs: closes every body."""
    lines = [f"Guard levels: {_guard_levels(region.guard)}"]
    inside = region.guard.inside_boundary()
    if inside != region.guard:
        lines.append(f"  inside declared boundaries: {_guard_levels(inside)}")
    findings = group(region.transfers)
    failing = sum(1 for f in findings if f.failing)
    if region.error is not None:
        # An unfinished region's silence proves nothing; never let it read as clean.
        lines.append(
            f"Lines moving data: not determined, the region did not finish "
            f"({len(findings)} seen before it stopped)"
        )
    elif findings:
        lines.append(f"Lines moving data: {len(findings)} ({failing} failing)")
    else:
        lines.append("Lines moving data: none")
    if region.fixed:
        lines.append("Accepted in the baseline but no longer seen:")
        lines.extend(f"- {entry}" for entry in region.fixed)
    if region.timing is not None:
        lines.append(f"Step time: {format_timing(region.timing)}")
    else:
        lines.append("Step time: not measured")
    if region.boundaries:
        lines.append("Boundary costs:")
        lines.extend(f"- {format_boundary(b)}" for b in region.boundaries)
    else:
        lines.append("Boundary costs: no boundaries declared")
    if region.platform:
        lines.append(f"Platform: {region.platform}")
    if region.coverage:
        judged = "; ".join(f"{label}: {judge}" for label, judge in region.coverage)
        lines.append(f"Checked by: {judged}")
    lines.extend(f"Note: {note}" for note in region.notes)
    lines.append(f"Wall time: {region.wall_s:.3f} s")
    lines.append(f"Region declared at {region.policy_path}:{region.policy_line}")
    return "\n".join(lines) + "\n"


def _guard_levels(guard: GuardSpec) -> str:
    return ", ".join(f"{d.label}={guard.level(d).value}" for d in Direction)


def _error_message(error: RegionError) -> str:
    return f"{error.kind.value}: {one_line(error.message)}"


def _error_body(region: RegionResult, error: RegionError) -> str:
    parts = [_error_message(error)]
    fix = hint_for_error(error)
    if fix is not None:
        parts.append(f"fix: {fix}")
    if error.location is not None:
        parts.append(f"at {error.location} in {error.location.function}")
    if error.details.strip():
        parts.append(error.details.rstrip("\n"))
    if region.transfers:
        parts.append(
            "Transfers seen before the error:\n"
            + "\n".join(_finding_entry(f, region) for f in group(region.transfers))
        )
    parts.append(_details(region))
    # What accepts them, where a stored baseline judged them: the body's last word.
    accept = next_step(region, "transfers")
    return "\n\n".join([*parts, accept] if accept else parts)


def _checks_message(region: RegionResult) -> str:
    failed = [c for c in region.checks if not c.passed]
    if len(failed) == 1:
        return f"result check failed: {failed[0].name.value}: {one_line(failed[0].detail)}"
    names = ", ".join(c.name.value for c in failed)
    return f"{len(failed)} result checks failed: {names}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
