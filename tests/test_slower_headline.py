"""A slower verdict's "most at" line rests on evidence: changed work, or time beyond noise.

Reproduces the optimizer fix of issue 57: the step read 1.20x slower, and the unchanged
forward pass, whose op time drifted with the machine (1.08 ms → 1.25 ms), headed the verdict
over the line whose flops grew 3x (21.8 µs → 146 µs).
"""

from __future__ import annotations

from gate.report.comparison_text import most_grown, slower_lines
from gate.results.comparison import TimingComparison, TimingVerdict
from gate.results.costs import CostComparison
from gate.results.line_times import LineTime, OpTimes, compare_line_times
from gate.results.line_work import LineWork, compare_lines

FORWARD = ("train.py", 23, "y = model(x)")
UPDATE = ("train.py", 31, "updates = optimizer.update(grads)")


def _work(place: tuple[str, int, str], flops: float) -> LineWork:
    path, line, source = place
    return LineWork(path, line, "step", source, flops, flops, 0.0, ("dot f32[64,64]",), 1)


def _time(place: tuple[str, int, str], seconds: float) -> LineTime:
    path, line, source = place
    return LineTime(path, line, "step", source, seconds, ("fusion",))


def _slower(base_s: float, head_s: float) -> TimingComparison:
    return TimingComparison(
        "base", TimingVerdict.SLOWER, base_s, head_s, head_s / base_s, 1.1, 1.3, 1e-4, 1.1,
        failing=True,
    )  # fmt: skip


def _compared(update_flops: float, forward_head_s: float, update_head_s: float) -> CostComparison:
    base_work = (_work(FORWARD, 1e9), _work(UPDATE, 1e6))
    head_work = (_work(FORWARD, 1e9), _work(UPDATE, update_flops))
    base_times = OpTimes((_time(FORWARD, 1.08e-3), _time(UPDATE, 21.8e-6)), 3)
    head_times = OpTimes((_time(FORWARD, forward_head_s), _time(UPDATE, update_head_s)), 3)
    return CostComparison(
        "base",
        (),
        None,
        lines=compare_lines(base_work, head_work),
        times=compare_line_times(base_times, head_times),
    )


def test_the_line_whose_work_grew_heads_the_verdict_not_the_drifting_forward_pass() -> None:
    timing = _slower(1.2e-3, 1.44e-3)
    cost = _compared(3e6, 1.25e-3, 146e-6)
    assert most_grown(timing, cost) == "; most at train.py:31: 21.8 µs → 146 µs"
    # The body still lists where the op time went, the forward pass first.
    assert slower_lines(timing, cost)[0] == "train.py:23: 1.08 ms → 1.25 ms"


def test_a_line_of_unchanged_work_heads_only_beyond_the_traced_runs_drift() -> None:
    timing = _slower(1.2e-3, 2.0e-3)
    # Neither line's work changed; the forward pass drifted, as every line may.
    drifted = _compared(1e6, 1.25e-3, 25e-6)
    assert most_grown(timing, drifted) == ""
    # Its op time grew 2.6x with the same work: beyond twice the drift, it is named.
    slowed = _compared(1e6, 2.8e-3, 21.8e-6)
    assert most_grown(timing, slowed) == "; most at train.py:23: 1.08 ms → 2.80 ms"
