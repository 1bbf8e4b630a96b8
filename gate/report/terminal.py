"""The run as a CI log shows it: one line per region, the findings, then a count line.

The human-readable pieces (durations, timing, boundary costs, one finding)
live here and the JUnit writer reuses them, so a log and a report say the
same thing in the same words.
"""

from __future__ import annotations

from collections.abc import Sequence

from gate.policy.model import ChangeKind
from gate.report.communication_text import CommFinding, acted_on
from gate.report.comparison_text import comparison_lines, failing_comparisons
from gate.report.memory_text import leak_line, memory_column
from gate.results.findings import Finding, group
from gate.results.hints import hint_for, hint_for_error
from gate.results.leaks import LEAK_FIX, Leak
from gate.results.records import (
    BoundaryCost,
    CheckOutcome,
    CoverageJudge,
    Recompile,
    RegionResult,
    RunResult,
    TimingStats,
    Transfer,
)
from gate.text import counted, duration_text

_GREEN = "\x1b[32m"
_RED = "\x1b[31m"
_BOLD_RED = "\x1b[1;31m"
_RESET = "\x1b[0m"


def format_timing(timing: TimingStats) -> str:
    """``median 1.23 ms (min …, p25 …, p75 …, max …; 20 repeats)``."""
    repeats = f"{timing.repeats} repeat" + ("" if timing.repeats == 1 else "s")
    return (
        f"median {duration_text(timing.median_s)} "
        f"(min {duration_text(timing.min_s)}, p25 {duration_text(timing.p25_s)}, "
        f"p75 {duration_text(timing.p75_s)}, max {duration_text(timing.max_s)}; {repeats})"
    )


def format_boundary(cost: BoundaryCost) -> str:
    """``pkg.io:save: 20 calls, 3.10 ms total, 155 µs per step``."""
    calls = f"{cost.calls} call" + ("" if cost.calls == 1 else "s")
    return (
        f"{cost.name}: {calls}, {duration_text(cost.total_s)} total, "
        f"{duration_text(cost.per_step_s)} per step"
    )


def format_check(check: CheckOutcome) -> str:
    """``FAIL reference: max abs diff 0.3 > 1e-05``."""
    verdict = "pass" if check.passed else "FAIL"
    return f"{verdict} {check.name.value}: {one_line(check.detail)}"


def format_finding(transfer: Transfer) -> str:
    """``implicit host-to-device float32[8] (first call)``: what moved, and when."""
    text = f"{transfer.kind} {transfer.describe()}"
    if transfer.boundary is not None:
        text += f" in boundary {transfer.boundary}"
    elif transfer.explicit:
        text += " outside a declared boundary"
    return f"{text} ({transfer.phase.value})"


def transfer_location(transfer: Transfer, region: RegionResult) -> str:
    """``path:line`` of the transfer; the region's policy entry when no user frame was found."""
    if transfer.location is not None:
        return str(transfer.location)
    return f"{region.policy_path}:{region.policy_line}"


RECOMPILE_FIX = (
    "make each jitted call see the same shapes, dtypes and static values every step (pad or "
    "bucket batches, pass arrays rather than Python scalars), and create jax.jit wrappers once, "
    "at import, never inside the step"
)


# The usual causes of a changed static value, each with its own fix: the words the change
# says (`gate.witness.recompiles.explain`) pick it. The first that fits is given.
_RECOMPILE_CAUSES = (
    (
        ("optax/", "TrainState", "GradientTransformation"),
        "make the optax optimizer once, at import (TX = optax.adamw(1e-3)), and build each "
        "TrainState or nnx.Optimizer from that one object: a new optimizer made in setup or "
        "in the step never equals the last, and the TrainState carries it as a static field",
    ),
    (
        ("functools.partial",),
        "make the partial once and reuse it (at import, or from a functools.cache'd factory): "
        "a partial equals only itself, so one made per object or per call is new each step",
    ),
    (
        ("bound method",),
        "pass a function made once, not a bound method of an object made again each step "
        "(model.apply of a new model): a bound method equals another only on the same object",
    ),
    (
        ("a new function object",),
        "define the function once, at module level, and pass what it closes over as an "
        "argument: a closure or lambda made inside a function is a new object each time",
    ),
    (
        ("has no __eq__",),
        "make that object once and reuse it, or give its class value equality "
        "(@dataclasses.dataclass(frozen=True)): an object without __eq__ equals only itself",
    ),
)


def recompile_fix(recompiles: Sequence[Recompile]) -> str:
    """The fix for these recompiles' cause: an optimizer, a partial, a bound method, a closure
    made again each step; else `RECOMPILE_FIX`."""
    changes = " ".join(r.change or "" for r in recompiles)
    for words, fix in _RECOMPILE_CAUSES:
        if any(word in changes for word in words):
            return fix
    return RECOMPILE_FIX


def format_recompile(recompile: Recompile, region: RegionResult) -> str:
    """``steps.py:12: jit(step) compiled again 4x in 4 runs after warm-up: x: ...``."""
    where = recompile.location or f"{region.policy_path}:{region.policy_line}"
    warned = not (recompile.failing or recompile.accepted or recompile.in_base)
    verdict = "warning (recompiles: warn): " if warned else ""
    text = recompile.headline().replace(f" at {recompile.location}", "")
    # ``run --base``: what the change did to its line, as a transfer's says.
    text += recompile.line_note()
    if recompile.in_base:
        text += "; already in the base"
    elif recompile.accepted:
        text += f"; accepted at {recompile.accepted}"
    elif recompile.beyond_the_base and region.base is not None:
        # Against the base: the edit that accepts it ends it, as every comparison's does.
        text += region.base.accept_edit(ChangeKind.RECOMPILES)
    return f"{where}: {verdict}{text}"


def one_line(text: str) -> str:
    """`text` with its line breaks and tabs turned into single spaces."""
    return " ".join(text.split())


def format_summary(
    run: RunResult,
    color: bool = False,
    *,
    quiet: bool = False,
    verbose: bool = False,
    shown_live: bool = False,
) -> str:
    """What a CI log shows for `run`; the last line is exactly ``N passed, N failed``.

    Regions that errored count as failed. `color` adds ANSI colours to the
    verdicts (pass it only when writing to a TTY); the count line is never
    coloured so tools can read it. `quiet` leaves out the rows of regions that
    passed; `verbose` lists every transfer of every region, the accepted and the
    allowed too, and the cost changes that fail nothing. `shown_live`: the rows and their
    findings were just written to the same terminal (`progress_lines`), so each finding is
    said once: the summary names the regions that failed and counts. No trailing newline.
    """
    regions = run.regions
    if shown_live:
        lines = _recap(regions)
    else:
        lines = _rows_and_findings(regions, quiet=quiet, verbose=verbose, color=color)
    platforms = sorted({r.platform for r in regions if r.platform})
    if platforms:
        lines.insert(0, f"platform: {'; '.join(platforms)}")
        unchecked = sorted(
            {d for r in regions for d, judge in r.coverage if judge is CoverageJudge.NOT_CHECKED}
        )
        if unchecked:
            lines.insert(1, f"NOT CHECKED on this platform: {', '.join(unchecked)} transfers")
    passed = sum(1 for region in regions if region.passed)
    if lines:
        lines.append("")
    lines.append(f"{passed} passed, {len(regions) - passed} failed")
    return "\n".join(lines)


def _rows_and_findings(
    regions: tuple[RegionResult, ...], *, quiet: bool, verbose: bool, color: bool
) -> list[str]:
    """Each region's row and comparisons (the failing ones' only, ``quiet``), then the
    findings of every region that has any."""
    # Aligned on the rows shown: -q hides the passing ones.
    width = max((len(r.classname) for r in regions if not (quiet and r.passed)), default=0)
    lines = []
    for region in regions:
        if quiet and region.passed:
            continue
        lines.append(_region_line(region, width, color))
        # The comparison with the base or the stored baseline, one line each, under its row.
        lines.extend(f"  {label}: {text}" for label, text in shown_comparisons(region, verbose))
    findings = [line for region in regions if has_findings(region) for line in _findings(region)]
    if verbose:
        findings.extend(line for region in regions for line in _passing_findings(region))
    if findings:
        lines.append("")
        lines.extend(findings)
    return lines


def _recap(regions: tuple[RegionResult, ...]) -> list[str]:
    """After the live rows: which regions failed, by name only (their lines are above)."""
    failed = [r.classname for r in regions if not r.passed]
    return [f"failed: {', '.join(failed)} (what to fix is under each row above)"] if failed else []


def has_findings(region: RegionResult) -> bool:
    """Whether ``region`` has lines under its name: it failed, or a note, a recompile, a
    collective or donation acted on, or a leak is said of it."""
    return bool(
        not region.passed
        or region.notes
        or region.recompiles
        or acted_on(region)
        or _leak(region) is not None
    )


def shown_comparisons(region: RegionResult, verbose: bool = False) -> list[tuple[str, str]]:
    """`comparison_lines`, less a cost change that fails nothing unless ``verbose``: XLA's
    figures move a little with most edits, and a line that changes no verdict is noise. One
    the policy's ``accept:`` accepts is shown: it is the change the pull request means."""
    quiet_costs = {
        against
        for against, cost in (
            ("base", region.base.cost if region.base is not None else None),
            ("baseline", region.cost_vs_baseline),
        )
        if cost is not None and cost.compared and not cost.failing and not cost.accepted
    }
    if verbose or not quiet_costs:
        return comparison_lines(region)
    hidden = {f"cost vs {against}{by}" for against in quiet_costs for by in ("", " by line")}
    return [(label, text) for label, text in comparison_lines(region) if label not in hidden]


def progress_line(done: int, total: int, region: RegionResult, color: bool = False) -> str:
    """``[3/20] FAIL  train.step  1 failing line  median 412 µs``: one region as it finishes.

    Written while later regions still run, so a long run shows where it is
    (`gate.cli.run`); the same row the summary prints, with the count in front.
    """
    count = f"[{done}/{total}]"
    return (
        f"{count:>{2 * len(str(total)) + 3}} {_region_line(region, len(region.classname), color)}"
    )


def progress_lines(
    done: int, total: int, region: RegionResult, color: bool = False, verbose: bool = False
) -> list[str]:
    """`progress_line`, then what the summary says under that region: its comparison lines
    and its findings (the lines to fix, notes, warnings); ``verbose`` adds the transfers that
    pass and the cost changes that fail nothing."""
    lines = [progress_line(done, total, region, color)]
    lines.extend(f"  {label}: {text}" for label, text in shown_comparisons(region, verbose))
    if has_findings(region):
        # The row above already names the region, and the comparisons are just above.
        lines.extend(_findings(region, comparisons=False)[1:])
    if verbose:
        lines.extend(_passing_findings(region)[1:])
    return lines


def _verdict(region: RegionResult, color: bool) -> str:
    if region.error is not None:
        word, colour = "ERROR", _BOLD_RED
    elif region.passed:
        word, colour = "PASS", _GREEN
    else:
        word, colour = "FAIL", _RED
    padded = f"{word:<5}"
    if not color:
        return padded
    # Colour the word only, so the padding keeps the columns aligned.
    return f"{colour}{word}{_RESET}{padded[len(word) :]}"


def _region_line(region: RegionResult, width: int, color: bool) -> str:
    head = f"{_verdict(region, color)} {region.classname:<{width}}"
    if region.error is not None:
        return f"{head}  {region.error.kind.value}: {one_line(region.error.message)}"

    findings = group(region.transfers)
    failing = sum(1 for f in findings if f.failing)
    # One line moving three arrays is three findings but one line to fix.
    lines = len({f.location for f in findings if f.failing})
    transfers = f"{lines} failing line" + ("" if lines == 1 else "s")
    if failing > lines:
        transfers += f" ({failing} arrays)"
    in_base = sum(1 for f in findings if f.sample.in_base)
    accepted = sum(1 for f in findings if f.sample.accepted and not f.sample.in_base)
    others = len(findings) - failing - accepted - in_base
    passing = [
        *([f"{accepted} accepted by the baseline"] if accepted else []),
        *([f"{in_base} already in the base"] if in_base else []),
        *([f"{others} allowed"] if others else []),
    ]
    transfers += "".join(f" (+{part})" for part in passing)
    failed = _what_failed(region)
    if region.passed or lines or not failed:
        columns = [", ".join([transfers, *failed])]
    else:
        # A row that fails says what failed ("1 recompile, 1 collective"), never "0 failing
        # lines"; the transfers that pass keep a column of their own.
        columns = [", ".join(failed)]
        if passing:
            columns.append("transfers: " + ", ".join(passing))
    if region.recompiles:
        count = sum(r.extra for r in region.recompiles)
        word = "recompiled" if region.recompiles_failed else "recompiled (warn)"
        if not region.recompiles_failed and all(r.in_base for r in region.recompiles):
            word = "recompiled (already in the base)"
        columns.append(f"{word} {count}x")
    if region.has_checks:
        failed_checks = [c.name.value for c in region.checks if not c.passed]
        if failed_checks:
            columns.append("checks failed: " + ", ".join(failed_checks))
        else:
            columns.append(f"checks ok ({len(region.checks)})")
    if region.timing is not None:
        columns.append(f"median {duration_text(region.timing.median_s)}")
    if region.cost is not None and region.cost.headline():
        columns.append(region.cost.headline())  # XLA's count: exact where the median is not
    columns.extend(_comm_columns(region))
    leaks = memory_column(region)
    if leaks is not None:
        columns.append(leaks)
    if region.boundaries:
        per_step = sum(b.per_step_s for b in region.boundaries)
        columns.append(f"boundaries {duration_text(per_step)}/step")
    return f"{head}  " + "  ".join(columns)


def _what_failed(region: RegionResult) -> list[str]:
    """``1 recompile``, ``1 collective``, ``timing vs base``: what fails ``region`` besides
    its transfer lines, counted in the words of its findings."""
    comm = [f for f in acted_on(region) if f.failing]
    kinds = {
        "recompile": sum(1 for r in region.recompiles if r.failing),
        "collective": sum(1 for f in comm if f.what == "new collective"),
        "communication check": sum(1 for f in comm if f.what == "collectives"),
        "unused donation": sum(1 for f in comm if f.what == "unused donation"),
        "dropped donation": sum(1 for f in comm if f.what == "dropped donation"),
        "donation check": sum(1 for f in comm if f.what == "donations"),
        "result check": sum(1 for c in region.checks if not c.passed),
    }
    parts = [counted(n, kind) for kind, n in kinds.items() if n]
    return parts + [label for label, _ in failing_comparisons(region)]


def _comm_columns(region: RegionResult) -> list[str]:
    """``comm 41.5 kB/step`` (per device), and the donations no output reuses."""
    columns = []
    comm = region.cost.comm if region.cost is not None else None
    if comm is not None and comm.headline():
        columns.append(comm.headline())
    if region.donations:
        unused = counted(len(region.donations), "unused donation")
        columns.append(unused + (" (warn)" if any(d.warning for d in region.donations) else ""))
    return columns


def _comm_line(finding: CommFinding, policy: str) -> str:
    source = f"   {finding.source}" if finding.source else ""
    return f"{finding.line(policy)}{source}"


def _passing_findings(region: RegionResult) -> list[str]:
    """``-v``: the transfers that do not fail the region, each with why not."""
    passing = [f for f in group(region.transfers) if not f.failing]
    verb = "passes" if len(passing) == 1 else "pass"
    head = f"{region.classname}: {counted(len(passing), 'transfer line')} that {verb}:"
    lines = [head] if passing else []
    for finding in passing:
        if finding.sample.in_base:
            why = "already in the base"
        elif finding.sample.accepted:
            why = "accepted by the baseline"
        elif finding.sample.boundary is not None:
            why = f"in boundary {finding.sample.boundary}"
        else:
            why = "allowed by the guard level"
        where = transfer_location(finding.sample, region)
        lines.append(f"  {where}: {finding.kind} {finding.what()}, {finding.counts()} ({why})")
    return lines


def format_region_failure(region: RegionResult) -> str:
    """One failing region as a test failure shows it (`gate.format_failure`).

    The first line is the verdict and the first ``file:line`` that fails the region, as
    pytest's one-line summary shows only that; then the region's row and findings as the
    run's summary prints them; the platform last. No count line: the test runner counts.
    """
    verdict = "ERROR" if region.error is not None else "FAIL"
    failing = _failing_lines(region)
    first = failing[0] if failing else f"{region.policy_path}:{region.policy_line}: passed"
    lines = [
        f"transfer-gate: {verdict} {first}",
        _region_line(region, len(region.classname), False),
    ]
    lines.extend(f"  {label}: {text}" for label, text in comparison_lines(region))
    lines.extend(["", *_findings(region), ""])
    if region.platform:
        lines.append(f"platform: {region.platform}")
    unchecked = [d for d, judge in region.coverage if judge is CoverageJudge.NOT_CHECKED]
    if unchecked:
        lines.append(f"NOT CHECKED on this platform: {', '.join(sorted(unchecked))} transfers")
    return "\n".join(lines).rstrip("\n")


def _failing_lines(region: RegionResult) -> list[str]:
    """``path:line: what`` for each thing that fails ``region``, in the findings' order."""
    policy = f"{region.policy_path}:{region.policy_line}"
    if region.error is not None:
        where = str(region.error.location) if region.error.location is not None else policy
        return [f"{where}: {region.error.kind.value}: {one_line(region.error.message)}"]
    return [
        *(_transfer_line(f, region) for f in group(region.transfers) if f.failing),
        *(_recompile_line(r, region) for r in region.recompiles if r.failing),
        *(_check_line(c, policy) for c in region.checks if not c.passed),
        *(_comm_line(f, policy) for f in acted_on(region) if f.failing),
        *(leak_line(region, leak) for leak in [_leak(region)] if leak and leak.failing),
        *(f"{policy}: {label}: {text}" for label, text in failing_comparisons(region)),
    ]


def _leak(region: RegionResult) -> Leak | None:
    return region.memory.leak if region.memory is not None else None


def _transfer_line(finding: Finding, region: RegionResult) -> str:
    where = transfer_location(finding.sample, region)
    scope = f" {finding.scope()}" if finding.scope() else ""
    source = f"   {finding.source}" if finding.source else ""
    return f"{where}: {finding.kind} {finding.what()}{scope}, {finding.counts()}{source}"


def _recompile_line(recompile: Recompile, region: RegionResult) -> str:
    source = f"   {recompile.source}" if recompile.source else ""
    return f"{format_recompile(recompile, region)}{source}"


def _check_line(check: CheckOutcome, policy: str) -> str:
    return f"{policy}: result check failed: {check.name.value}: {one_line(check.detail)}"


def _findings(region: RegionResult, *, comparisons: bool = True) -> list[str]:
    """What to fix in ``region``, under its name; ``comparisons``: its failing comparisons too."""
    lines = [f"{region.classname}:"]
    policy = f"{region.policy_path}:{region.policy_line}"
    if region.error is not None:
        lines.extend(f"  {line}" for line in _failing_lines(region))
        fix = hint_for_error(region.error)
        if fix is not None:
            lines.append(f"  fix: {fix}")
        lines.extend(f"  note: {one_line(note)}" for note in region.notes)
        return lines
    failing = [f for f in group(region.transfers) if f.failing]
    lines.extend(f"  {_transfer_line(finding, region)}" for finding in failing)
    # One hint per kind of finding, not one per line: the same fix reads once.
    hints = dict.fromkeys(hint_for(f.sample) for f in failing)
    lines.extend(f"  fix: {hint}" for hint in hints)
    lines.extend(f"  {_recompile_line(recompile, region)}" for recompile in region.recompiles)
    if region.recompiles:
        lines.append(f"  fix: {recompile_fix(region.recompiles)}")
    comm = acted_on(region)
    lines.extend(f"  {_comm_line(finding, policy)}" for finding in comm)
    lines.extend(f"  fix: {fix}" for fix in dict.fromkeys(f.fix for f in comm if f.fix))
    leak = _leak(region)
    if leak is not None:
        lines.extend([f"  {leak_line(region, leak)}", f"  fix: {LEAK_FIX}"])
    lines.extend(f"  note: {one_line(note)}" for note in region.notes)
    lines.extend(f"  {_check_line(c, policy)}" for c in region.checks if not c.passed)
    if comparisons:
        lines.extend(f"  {policy}: {label}: {text}" for label, text in failing_comparisons(region))
    return lines
