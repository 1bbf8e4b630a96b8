"""Slower, faster, unchanged or inconclusive: the verdict on two samples of step times.

The rule, with alpha = 0.002 and a 99% interval of the ratio head/base
(`gate.compare.stats`: Mann-Whitney U, Hodges-Lehmann/Moses on log-times):

- SLOWER when p < alpha and the ratio of medians is above ``max_slowdown``;
- FASTER when p < alpha and the ratio is below ``1 / max_slowdown``;
- UNCHANGED when the whole interval lies inside ``(1 / max_slowdown, max_slowdown)``;
- INCONCLUSIVE otherwise: the caller runs more rounds (up to ``timing.max_rounds``),
  then reports it as a warning, never as a pass.

Why not asv's rule (a factor of 1.1 and p < 0.002, with "not significant"
read as "no change")? asv judges every benchmark at every commit of a
history, so it needs a small alpha against a flood of false alarms, and it may
call a noisy benchmark unchanged because nothing is lost by silence. A merge
gate is the other way round: it judges a handful of regions once per PR, and
"no evidence of a slowdown" from 10 noisy samples must not pass as "no
slowdown". So UNCHANGED here needs positive evidence (the interval rules out
the allowed factor both ways). The alpha is asv's all the same, 0.002, and not
the 0.01 the two-sided interval would suggest, because the test's p-value
assumes independent samples and a shared runner breaks that: under load the
two worker processes are slowed in bursts, and on the 2-core development
machine an unchanged 3 ms step came out "1.35x slower, p=0.0076" in a stress
run (three test suites at once). A real 1.3x slowdown gives p far below
either level with 40+40 samples (benchmarks/base_power.py: 20 of 20 caught).
The looks that extra rounds add (up to ``max_rounds / rounds`` of them) raise
the false-failure rate at most that many times alpha (Bonferroni): under 1%.

Against a stored baseline (``against="baseline"``) the same rule runs with
``timing.baseline_max_slowdown`` (default 1.5): the samples come from another
job, maybe another runner of the same kind, with no interleaving, so only a
larger factor is told from drift between machines.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gate.compare.stats import mann_whitney_p, ratio_interval
from gate.policy.model import OnRegression
from gate.results.comparison import TimingComparison, TimingVerdict

ALPHA = 0.002  # the Mann-Whitney test's level (asv's), for slower and faster
CONFIDENCE = 0.99  # the ratio interval's level, for unchanged

# A clock that says 0 (a step faster than its resolution) must still have a logarithm.
_SMALLEST_TIME_S = 1e-9


def verdict_of(
    p_value: float, ratio: float, low: float, high: float, max_slowdown: float
) -> TimingVerdict:
    """The module docstring's rule, on numbers already computed."""
    if p_value < ALPHA and ratio > max_slowdown:
        return TimingVerdict.SLOWER
    if p_value < ALPHA and ratio < 1 / max_slowdown:
        return TimingVerdict.FASTER
    if 1 / max_slowdown < low and high < max_slowdown:
        return TimingVerdict.UNCHANGED
    return TimingVerdict.INCONCLUSIVE


def compare_timing(
    base_samples: Sequence[float],
    head_samples: Sequence[float],
    *,
    max_slowdown: float,
    on_regression: OnRegression,
    against: str,
    rounds: int = 0,
    what: str = "step",
) -> TimingComparison:
    """Head's step times against the base's (or the stored baseline's), judged.

    Raises ValueError when either sample is empty or ``max_slowdown`` is below 1 (at 1,
    any significant slowdown is SLOWER, and nothing can be UNCHANGED).
    """
    if not base_samples or not head_samples:
        raise ValueError(f"compare_timing: {what}: both samples must be non-empty")
    if not max_slowdown >= 1:
        raise ValueError(f"compare_timing: max_slowdown must be at least 1, not {max_slowdown}")
    base = tuple(max(float(s), _SMALLEST_TIME_S) for s in base_samples)
    head = tuple(max(float(s), _SMALLEST_TIME_S) for s in head_samples)
    base_median, head_median = float(np.median(base)), float(np.median(head))
    ratio = head_median / base_median
    p_value = mann_whitney_p(head, base)
    interval = ratio_interval(base, head, confidence=CONFIDENCE)
    verdict = verdict_of(p_value, ratio, interval.low, interval.high, max_slowdown)
    return TimingComparison(
        against=against,
        verdict=verdict,
        base_median_s=base_median,
        head_median_s=head_median,
        ratio=ratio,
        ratio_low=interval.low,
        ratio_high=interval.high,
        p_value=p_value,
        max_slowdown=max_slowdown,
        failing=verdict is TimingVerdict.SLOWER and on_regression is OnRegression.FAIL,
        base_samples=base,
        head_samples=head,
        rounds=rounds,
        what=what,
    )


def decided(comparison: TimingComparison) -> bool:
    """Whether more rounds are pointless: the verdict is anything but inconclusive."""
    return comparison.verdict is not TimingVerdict.INCONCLUSIVE
