"""The testcases a region's comparison with the base (or the stored baseline) gives in JUnit.

Present only when the region has a comparison, so every other region's
testcases are what they always were. All at the region's policy line: a
slower step or a changed result is not the fault of one line of code.

An inconclusive timing, results not compared and a new region are
``<skipped>``: the PR tools count and show skipped apart from passed
(mikepenz/action-junit-report's summary since its PR #909, dorny/test-reporter
too), so "nothing was proven" never reads as a green pass; nor does it fail
the check, which only the gate's own verdict (its exit code) may do.
"""

from __future__ import annotations

from gate.policy.model import ChangeKind
from gate.report.communication_text import accept_edit
from gate.report.comparison_text import (
    base_status_line,
    boundary_time_line,
    most_grown,
    one_line,
    own_definition_line,
    results_line,
    slower_lines,
    timing_details,
    timing_label,
)
from gate.report.junit_cases import Case, Outcome, declared, policy_case, timing_next_step
from gate.results.comparison import (
    BaseComparison,
    BaseStatus,
    ResultComparison,
    ResultStatus,
    TimingComparison,
    TimingVerdict,
)
from gate.results.records import RegionResult


def comparison_cases(region: RegionResult) -> list[Case]:
    """``<region>: timing``, ``: results vs base``, ``: vs base``, ``: timing vs baseline``."""
    cases: list[Case] = []
    base = region.base
    if base is not None:
        if base.status is BaseStatus.NEW_REGION:
            cases.append(_new_region_case(region, base))
        elif base.status is BaseStatus.UNCHANGED:
            cases.append(_unchanged_case(region, base))
        elif base.status is BaseStatus.BASE_FAILED:
            cases.append(_base_failed_case(region, base))
        if base.timing is not None:
            cases.append(_timing_case(region, f"{region.name}: timing", base.timing, base))
        for timing in base.boundary_timing:
            name = f"{region.name}: {timing_label(timing)}"
            cases.append(_timing_case(region, name, timing, base))
        if base.results is not None:
            cases.append(_results_case(region, base, base.results))
    if region.timing_vs_baseline is not None:
        name = f"{region.name}: timing vs baseline"
        cases.append(_timing_case(region, name, region.timing_vs_baseline, None))
    return cases


def _timing_case(
    region: RegionResult, name: str, timing: TimingComparison, base: BaseComparison | None
) -> Case:
    lines = timing_details(timing, base.base if base is not None else None)
    if base is not None and own_definition_line(base):
        lines.append(own_definition_line(base))
    if base is not None and timing.what == "step" and base.boundaries:
        lines.append(f"Boundary time per step, base → head ({base.base}):")
        lines.extend(f"- {boundary_time_line(b)}" for b in base.boundaries)
    cost = base.cost if base is not None else region.cost_vs_baseline
    by_line = slower_lines(timing, cost)
    if by_line:
        lines.append(f"Op time by line, {timing.against} → head, from the profiler's traced runs:")
        lines.extend(f"- {text}" for text in by_line)
    body = "\n".join(lines) + "\n\n" + declared(region)
    if timing.failing:
        body += timing_next_step(region, timing.against)
    outcome: Outcome | None = None
    if timing.failing:
        # The line whose time grew most goes in the message: the annotation a reviewer sees.
        message = timing.headline() + most_grown(timing, cost)
        message += accept_edit(region, ChangeKind.TIMING, timing.against)
        outcome = Outcome("failure", "timing", message, body)
    elif timing.verdict is TimingVerdict.INCONCLUSIVE:
        outcome = Outcome("skipped", "inconclusive", timing.headline(), body)
    # Unchanged, faster, or a slowdown under `on_regression: warn`: a pass, and system-out
    # (which EnricoMi's action shows) says which, the warning included.
    return policy_case(region, name, body, outcome)


def _results_case(region: RegionResult, base: BaseComparison, results: ResultComparison) -> Case:
    name = f"{region.name}: results vs base"
    head = f"results vs base {base.base}: {results_line(results)}"
    if own_definition_line(base):
        head += f"\n{own_definition_line(base)}"
    if results.status is ResultStatus.NOT_COMPARED:
        body = f"{head}\n\n{declared(region)}"
        return policy_case(
            region, name, body, Outcome("skipped", "not-compared", results_line(results), body)
        )
    lines = [head]
    if results.differences:
        lines.append("Leaves that differ (pytree path: what differs):")
        lines.extend(
            f"- {d.path or '(the output)'}: {one_line(d.detail)}" for d in results.differences
        )
    if results.detail.strip() and one_line(results.detail) != results_line(results):
        lines.append(one_line(results.detail))
    body = "\n".join(lines) + "\n\n" + declared(region)
    outcome = None
    if results.failing:
        message = f"results differ from the base: {results_line(results)}"
        message += base.accept_edit(ChangeKind.RESULTS)
        outcome = Outcome("failure", "result-diff", message, body)
    return policy_case(region, name, body, outcome)


def _new_region_case(region: RegionResult, base: BaseComparison) -> Case:
    body = (
        f"The base {base.base} has no region '{region.name}': nothing to compare the head "
        f"with. The head is judged as usual.\n\n{declared(region)}"
    )
    return policy_case(
        region,
        f"{region.name}: vs base",
        body,
        Outcome("skipped", "new-region", str(base.status), body),
    )


def _unchanged_case(region: RegionResult, base: BaseComparison) -> Case:
    """A pass: the base would have run the same code on the same data, so it was not run."""
    body = (
        f"{base_status_line(base)}: every file the head's run read has a byte-identical copy "
        f"in {base.base}, and the region's policy entry is the same, so the base was not run "
        f"(`compare: always` runs it anyway).\n\n{declared(region)}"
    )
    return policy_case(region, f"{region.name}: vs base", body, None)


def _base_failed_case(region: RegionResult, base: BaseComparison) -> Case:
    message = base_status_line(base)
    parts = [f"{message}\n\nThe base is {base.base}; the head was still judged on its own."]
    error = base.base_error
    if error is not None:
        if error.location is not None:
            parts.append(f"at {error.location} in {error.location.function} (in the base tree)")
        if error.details.strip():
            parts.append(error.details.rstrip("\n"))
    parts.append(declared(region))
    body = "\n\n".join(parts)
    kind = f"base-{error.kind.name.lower()}" if error is not None else "base-failed"
    return policy_case(region, f"{region.name}: vs base", "", Outcome("error", kind, message, body))


def comparison_properties(region: RegionResult) -> dict[str, str]:
    """The comparison's numbers, ``<region>.vs_base.…`` and ``<region>.vs_baseline.…``."""
    properties: dict[str, str] = {}
    base = region.base
    if base is not None:
        prefix = f"{region.name}.vs_base."
        properties[prefix + "ref"] = base.base
        properties[prefix + "status"] = base.status.name.lower()
        for timing in (base.timing, *base.boundary_timing):
            if timing is not None:
                what = "timing" if timing.what == "step" else f"boundary[{timing.what}].timing"
                properties.update(_timing_properties(prefix + what + ".", timing))
        if base.results is not None:
            properties[prefix + "results.status"] = str(base.results.status)
            properties[prefix + "results.differences"] = str(len(base.results.differences))
        for r in base.renamed:
            key = f"renamed.{r.role}" + (f"[{r.base or r.head}]" if r.role == "boundary" else "")
            properties[prefix + key] = f"{r.base} -> {r.head or '(none)'}"
        if base.already_in_base:
            properties[prefix + "transfers.already_in_base"] = str(base.already_in_base)
        if base.apart:
            properties[prefix + "apart"] = base.apart
    if region.timing_vs_baseline is not None:
        prefix = f"{region.name}.vs_baseline.timing."
        properties.update(_timing_properties(prefix, region.timing_vs_baseline))
    return properties


def _timing_properties(prefix: str, timing: TimingComparison) -> dict[str, str]:
    return {
        prefix + "verdict": timing.verdict.value,
        prefix + "failing": str(timing.failing).lower(),
        prefix + "base_median_s": repr(timing.base_median_s),
        prefix + "head_median_s": repr(timing.head_median_s),
        prefix + "ratio": repr(timing.ratio),
        prefix + "ratio_low": repr(timing.ratio_low),
        prefix + "ratio_high": repr(timing.ratio_high),
        prefix + "p_value": repr(timing.p_value),
        prefix + "samples": f"{len(timing.base_samples)}+{len(timing.head_samples)}",
        prefix + "rounds": str(timing.rounds),
    }
