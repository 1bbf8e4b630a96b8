"""How a region's comparison with the base or the stored baseline reads, in every report.

The terminal, the JUnit report and GitHub's summary all take their words from here, so
"1.32x slower (interval 1.25-1.40x, beyond 1.1x): median 412 µs → 545 µs, …" is the same line
in each. Durations are `duration_text`'s, the headline's own, so a body never disagrees with
its message.
"""

from __future__ import annotations

import math
import statistics

from gate.policy.model import ChangeKind
from gate.report.communication_text import (
    comm_comparisons,
    comm_label,
    donation_comparisons,
    donation_label,
    shown,
)
from gate.results.comparison import (
    BaseComparison,
    BaseStatus,
    BoundaryTime,
    ResultComparison,
    ResultStatus,
    TimingComparison,
    TimingVerdict,
    renamed_text,
)
from gate.results.costs import CostComparison
from gate.results.records import RegionResult
from gate.text import accepted_text, duration_text

LINES_SHOWN = 3  # changed lines a log or summary shows under a cost change


def one_line(text: str) -> str:
    # `gate.report.terminal.one_line`, which imports this module: kept here so it need not.
    return " ".join(text.split())


def timing_label(timing: TimingComparison) -> str:
    """``timing vs base``, ``timing vs baseline``, ``boundary pkg.io:save timing vs base``."""
    what = "timing" if timing.what == "step" else f"boundary {timing.what} timing"
    return f"{what} vs {timing.against}"


def timing_line(timing: TimingComparison) -> str:
    """The headline, and what it means when that is not plain from the verdict."""
    text = timing.headline()
    if timing.verdict is TimingVerdict.SLOWER and not timing.failing:
        text += " (a warning: timing.on_regression is warn)"
    elif timing.verdict is TimingVerdict.INCONCLUSIVE and timing.failing:
        text += " (fails: timing.on_inconclusive is fail)"
    elif timing.verdict is TimingVerdict.INCONCLUSIVE:
        # Not a pass dressed as one: the reader must know nothing was proven.
        text += " (a warning, not a pass)"
    return text


def verdict_text(timing: TimingComparison) -> str:
    """One sentence: what the verdict rests on, and whether it fails the region."""
    limit = f"{timing.max_slowdown:g}x"
    if timing.verdict is TimingVerdict.SLOWER:
        consequence = (
            "fails (timing.on_regression: fail)"
            if timing.failing
            else "reported, not failing (timing.on_regression: warn)"
        )
        return f"slower: significant, and beyond the allowed {limit}; {consequence}"
    if timing.verdict is TimingVerdict.FASTER:
        return f"faster: significant, and beyond {limit} the other way"
    if timing.verdict is TimingVerdict.UNCHANGED:
        return f"unchanged: the interval rules out a slowdown of {limit}"
    consequence = (
        "fails (timing.on_inconclusive: fail)"
        if timing.failing
        else "not a pass (timing.on_inconclusive: warn)"
    )
    return (
        f"inconclusive: the interval straddles {limit} even after the most rounds; "
        f"{consequence}: run it on a quieter runner, or raise timing.max_rounds"
    )


def interval_text(timing: TimingComparison, digits: int = 3) -> str:
    """``1.25x-1.4x``; "none (too few samples)" for the unbounded interval of small samples."""
    if not (math.isfinite(timing.ratio_low) and math.isfinite(timing.ratio_high)):
        return "none (too few samples)"
    return f"{timing.ratio_low:.{digits}g}x-{timing.ratio_high:.{digits}g}x"


def sample_summary(samples: tuple[float, ...]) -> str:
    """``median 412 µs, IQR 405 µs-420 µs, 40 samples``."""
    if not samples:
        return "no samples"
    median = statistics.median(samples)
    count = f"{len(samples)} sample" + ("" if len(samples) == 1 else "s")
    if len(samples) < 2:
        return f"median {duration_text(median)}, {count}"
    # "inclusive" is numpy's default (linear) percentile, as the stats elsewhere use.
    low, _, high = statistics.quantiles(samples, n=4, method="inclusive")
    return (
        f"median {duration_text(median)}, IQR {duration_text(low)}-{duration_text(high)}, {count}"
    )


def timing_details(timing: TimingComparison, ref: str | None) -> list[str]:
    """Both sides, the interval, the test and the rounds: a testcase's body."""
    other = f"base {ref}" if ref and timing.against == "base" else timing.against
    lines = [
        f"{timing_label(timing)}: {timing_line(timing)}",
        f"verdict: {verdict_text(timing)}",
        f"{timing.against}: {sample_summary(timing.base_samples)}"
        if timing.base_samples
        else f"{timing.against}: median {duration_text(timing.base_median_s)}",
        f"head: {sample_summary(timing.head_samples)}"
        if timing.head_samples
        else f"head: median {duration_text(timing.head_median_s)}",
        f"ratio, head/{timing.against}: {timing.ratio:.3g}x, "
        f"{timing.level * 100:.4g}% interval {interval_text(timing)}",
        f"p-value of no difference at all ({timing.test}): {timing.p_value:.2g}"
        + (
            " (not what the verdict rests on: a real difference well within "
            f"{timing.max_slowdown:g}x is unchanged, and the interval says how large it is)"
            if timing.verdict is TimingVerdict.UNCHANGED
            else ""
        ),
        f"allowed slowdown: {timing.max_slowdown:g}x",
    ]
    if timing.paired:
        lines.append(
            f"rounds: {timing.rounds}, each one {other} run and one head run on the same core"
        )
    else:
        lines.append(f"rounds: none; the {other} samples were measured in an earlier job")
    return lines


def boundary_time_line(boundary: BoundaryTime) -> str:
    """``pkg.io:save: 150 µs → 155 µs per step``; "not called" on a side that never called it."""

    def side(value: float | None) -> str:
        return duration_text(value) if value is not None else "not called"

    return (
        f"{boundary.name}: {side(boundary.base_per_step_s)} → "
        f"{side(boundary.head_per_step_s)} per step"
    )


def _leaf(path: str) -> str:
    return path or "the output"


def results_line(results: ResultComparison) -> str:
    """``2 leaves differ: ['w'] (…); also ['b']``, or "same within tolerance", or why not."""
    if results.status is ResultStatus.NOT_COMPARED:
        detail = one_line(results.detail)
        return detail if detail.startswith("results not compared") else f"not compared: {detail}"
    if results.status is ResultStatus.MATCHES:
        return one_line(results.detail) or "the same within tolerance"
    differences = results.differences
    if not differences:
        return (one_line(results.detail) or "the results differ") + accepted_text(results.accepted)
    first = differences[0]
    noun = "leaf differs" if len(differences) == 1 else "leaves differ"
    text = f"{len(differences)} {noun}: {_leaf(first.path)} ({one_line(first.detail)})"
    if len(differences) > 1:
        text += "; also " + ", ".join(_leaf(d.path) for d in differences[1:4])
        if len(differences) > 4:
            text += f", and {len(differences) - 4} more"
    return text + accepted_text(results.accepted)


def base_status_line(base: BaseComparison) -> str:
    """``new region, not compared``, ``unchanged: the same code and data as the base (4
    files; 1 differs only in comments or layout)`` or ``the base could not run it: step
    raised: …``."""
    if base.status is BaseStatus.BASE_FAILED and base.base_error is not None:
        error = base.base_error
        return f"{base.status}: {error.kind.value}: {one_line(error.message)}"
    if base.status is BaseStatus.UNCHANGED:
        files = f"{base.same_files} file" + ("" if base.same_files == 1 else "s")
        if base.same_code_files:
            count = base.same_code_files
            files += f"; {count} {'differs' if count == 1 else 'differ'} only in comments or layout"
        return f"{base.status} ({files})"
    return str(base.status)


def own_definition_line(base: BaseComparison) -> str:
    """``compared with the base's step pkg.steps:clean (the head renamed it pkg.steps:clean2)``.

    "" when the base ran the head's policy as it is. Said beside every comparison of a
    renamed step, so a result or timing against another function name is never read as
    one against the same.
    """
    if not base.renamed or base.status is not BaseStatus.COMPARED:
        return ""  # a base that failed says it in its error
    return f"compared with the base's {renamed_text(base.renamed)}"


def apart_line(base: BaseComparison) -> str:
    """Why the trees' workers held the device in turn; "" when they ran side by side."""
    if not base.apart:
        return ""
    return (
        "the trees ran apart, one worker after the other, so their step times are two samples "
        f"compared unpaired: {base.apart}"
    )


def comparison_lines(region: RegionResult) -> list[tuple[str, str]]:
    """``(label, text)`` for each comparison of `region`, in report order."""
    lines: list[tuple[str, str]] = []
    base = region.base
    if base is not None:
        if base.status is not BaseStatus.COMPARED:
            lines.append(("vs base", base_status_line(base)))
        if apart_line(base):
            lines.append(("vs base", apart_line(base)))
        if own_definition_line(base):
            lines.append(("vs base", own_definition_line(base)))
        if base.timing is not None:
            lines.append((timing_label(base.timing), timing_line(base.timing)))
            lines.extend(("slower by line", t) for t in slower_lines(base.timing, base.cost, 3))
        lines.extend((timing_label(t), timing_line(t)) for t in base.boundary_timing)
        if base.results is not None:
            lines.append(("results vs base", results_line(base.results)))
        if base.base_first_call_s is not None and base.head_first_call_s is not None:
            first = (
                f"{duration_text(base.base_first_call_s)} → "
                f"{duration_text(base.head_first_call_s)} (compiling included; not gated)"
            )
            lines.append(("first call vs base", first))
        if base.already_in_base:
            count = base.already_in_base
            noun = "transfer" if count == 1 else "transfers"
            lines.append(("transfers vs base", f"{count} {noun} already in the base, not failing"))
        if base.cost is not None and (base.cost.changed or not base.cost.compared):
            lines.append(("cost vs base", base.cost.headline()))
            lines.extend(_by_line(base.cost, "cost vs base by line"))
    if region.timing_vs_baseline is not None:
        timing = region.timing_vs_baseline
        lines.append((timing_label(timing), timing_line(timing)))
        by_line = slower_lines(timing, region.cost_vs_baseline, 3)
        lines.extend(("slower by line", text) for text in by_line)
    if region.cost_vs_baseline is not None and region.cost_vs_baseline.changed:
        lines.append(("cost vs baseline", region.cost_vs_baseline.headline()))
        lines.extend(_by_line(region.cost_vs_baseline, "cost vs baseline by line"))
    # New collectives are findings at their own lines, unused donations at the policy's
    # (`gate.report.communication_text`).
    lines.extend((comm_label(c), c.headline()) for c in comm_comparisons(region) if shown(c))
    lines.extend((donation_label(d), d.headline()) for d in donation_comparisons(region) if d.shown)
    return lines


def slower_lines(
    timing: TimingComparison, cost: CostComparison | None, most: int | None = None
) -> list[str]:
    """Where a slower step's time went: the lines whose op time grew most, with both times
    (`gate.results.line_times`); or why no line can be named. [] for any other verdict."""
    if timing.verdict is not TimingVerdict.SLOWER or timing.what != "step" or cost is None:
        return []
    if cost.times is None:
        return [f"op time by line not compared: {cost.times_note}"] if cost.times_note else []
    named = cost.times.grown(most, _floor(timing))
    if named:
        return named
    # A step slowed by the host (a sleep, a transfer, dispatch) must not be pinned on an op
    # whose time moved by noise.
    grew = duration_text(timing.head_median_s - timing.base_median_s)
    return [
        f"no line's op time grew by a tenth of the step's {grew} in the traced runs: the time "
        "went outside the programs' ops (the host, dispatch, transfers)"
    ]


# A line is named where its op time grew by at least this share of the step's median growth.
_NAMED_SHARE = 0.1


def _floor(timing: TimingComparison) -> float:
    return _NAMED_SHARE * max(timing.head_median_s - timing.base_median_s, 0.0)


def most_grown(timing: TimingComparison, cost: CostComparison | None) -> str:
    """``; most at model.py:42: 0.41 ms → 1.63 ms`` for a slower step whose op times were
    compared; "" otherwise. What a one-line failure (an annotation, a JUnit message) ends with.

    The line named rests on evidence (`CostComparison.evidenced_times`): its work changed,
    or its op time grew beyond the traced runs' noise. An unchanged forward pass whose time
    drifted with the machine's never heads it; where only such lines grew, none is named
    here (the body still lists where the op time went)."""
    if timing.verdict is not TimingVerdict.SLOWER or timing.what != "step":
        return ""
    if cost is None or cost.times is None:
        return ""
    grown = cost.evidenced_times(_floor(timing))
    return f"; most at {grown[0].text(cost.against)}" if grown else ""


def _by_line(cost: CostComparison, label: str) -> list[tuple[str, str]]:
    """The lines whose work changed most, one entry each (the JUnit case and the JSON report
    list them all): where a reviewer looks first."""
    return [(label, text) for text in cost.line_listing(most=LINES_SHOWN)]


def failing_comparisons(region: RegionResult) -> list[tuple[str, str]]:
    """The `comparison_lines` that fail the region (what annotations and findings list)."""
    failing: list[tuple[str, str]] = []
    base = region.base
    if base is not None:
        if base.status is BaseStatus.BASE_FAILED:
            failing.append(("vs base", base_status_line(base)))
        for timing in (base.timing, *base.boundary_timing):
            if timing is not None and timing.failing:
                most = most_grown(timing, base.cost) + base.accept_edit(ChangeKind.TIMING)
                failing.append((timing_label(timing), timing_line(timing) + most))
        if base.results is not None and base.results.failing:
            text = results_line(base.results)
            if own_definition_line(base):  # where the fix is: the rename changed the result
                text += f" ({own_definition_line(base)})"
            failing.append(("results vs base", text + base.accept_edit(ChangeKind.RESULTS)))
        if base.cost is not None and base.cost.failing:
            text = base.cost.headline() + base.accept_edit(ChangeKind.COST)
            failing.append(("cost vs base", text))
    vs_baseline = region.timing_vs_baseline
    if vs_baseline is not None and vs_baseline.failing:
        most = most_grown(vs_baseline, region.cost_vs_baseline)
        failing.append((timing_label(vs_baseline), timing_line(vs_baseline) + most))
    if region.cost_vs_baseline is not None and region.cost_vs_baseline.failing:
        failing.append(("cost vs baseline", region.cost_vs_baseline.headline()))
    return failing
