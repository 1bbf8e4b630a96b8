"""Slower, faster, unchanged or inconclusive: the verdict on step times, and when to stop timing.

Against ``--base`` (paired rounds, `gate.compare.stats`), with ``δ = log(max_slowdown)`` and
each round's log-ratio ``d``, one-sided Wilcoxon signed-rank tests on the rounds' median
log-ratio θ:

- SLOWER when "θ ≤ δ" is rejected at level ``a_fail``: the change is slower than the
  allowed factor;
- FASTER when "θ ≥ -δ" is rejected at level ``a_pass``;
- UNCHANGED when both "θ ≥ δ" and "θ ≤ -δ" are rejected at ``a_pass`` (two one-sided tests:
  the change is inside the factor both ways);
- otherwise open: more rounds, up to ``timing.max_rounds``; then INCONCLUSIVE, reported as
  a warning, never as a pass.

Equivalently, the ratio's interval (its ends being the same one-sided tests) lies above the
factor, below its inverse, or inside both. "Unchanged" needs positive evidence, as before:
"no evidence of a slowdown" from a few noisy rounds is not "no slowdown".

**Two error rates.** A false failure is what gets a merge gate switched off, and a run
judges many regions, so SLOWER is held to ``ALPHA_FAIL`` (5e-4) per region. Passing a change
of exactly the allowed factor as UNCHANGED is a miss of the smallest slowdown the policy
cares about, in one region that really changed; ``ALPHA_PASS`` (1%) per region is enough
there, and it makes "unchanged" cost a third fewer rounds than the failing level would
(the rounds needed grow with the square of the test's z). A larger change is missed far
less often: a 1.3x change needs the rounds to put it below 1.1x.

**Sequential.** The rounds are looked at after ``timing.rounds`` of them, then each time
their number has grown by a quarter (`looks`), and at ``max_rounds``; the timing stops at the
first look that decides. Each look's tests run at ``a = ALPHA / K`` for the schedule's ``K``
looks (Bonferroni), so over all looks of a region:

- a change at or within the factor is called SLOWER with probability at most ``ALPHA_FAIL``;
- a change at or past the factor is called UNCHANGED with probability at most ``ALPHA_PASS``.

The signed-rank test is distribution-free when, without a change, a round's two trees'
times are exchangeable (the session runs them base, head, head, base on shared cores,
`gate.compare.session`), so the bounds hold for any noise, however skewed, heavy-tailed or
drifting. The tests simulate the rule (`first_decisions`, seeded) and check the rates;
docs/compare.md has the figures (`benchmarks/sequential_rule.py`).

**Per run, not per region.** A run judges many regions; the chance that any of ``m``
unchanged regions fails is at most ``m * ALPHA_FAIL`` (a union bound, whatever the regions'
dependence): 1% for 20 regions. The level is fixed rather than divided by the number of
regions in the run so that no verdict depends on ``--shard`` or ``--region``.

Against a stored baseline (``against="baseline"``) nothing pairs the samples (they come from
another job): the same three-way rule on the Mann-Whitney interval of the ratio, once, with
``timing.baseline_max_slowdown`` (default 1.5), since only a larger factor is told from drift
between jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gate.compare.stats import (
    Floats,
    RatioInterval,
    Values,
    log_ratios,
    mann_whitney_p,
    margin_p_values,
    paired_interval,
    signed_rank_p,
    unpaired_interval,
)
from gate.policy.model import TimingAction
from gate.results.comparison import TimingComparison, TimingVerdict

# Per region: calling a change within the allowed factor slower (20 regions of a run stay
# under 1% together, by the union bound), and passing a change of the factor as unchanged.
ALPHA_FAIL = 5e-4
ALPHA_PASS = 0.01
# Each look comes after a quarter more rounds than the last: looks are cheap, but each costs a
# share of alpha, and equal spacing would spend most of it on looks a round apart.
LOOK_GROWTH = 1.25

# A clock that says 0 (a step faster than its resolution) must still have a logarithm.
_SMALLEST_TIME_S = 1e-9

# Verdict codes of `first_decisions`, for arrays of many simulated regions.
VERDICT_CODES = (
    TimingVerdict.INCONCLUSIVE,
    TimingVerdict.SLOWER,
    TimingVerdict.FASTER,
    TimingVerdict.UNCHANGED,
)


def looks(first: int, most: int) -> tuple[int, ...]:
    """When rounds are judged: after ``first``, then each quarter more, and at ``most``."""
    if not 1 <= first <= most:
        raise ValueError(f"looks: need 1 <= rounds <= max_rounds, not {first} and {most}")
    schedule = [first]
    while schedule[-1] < most:
        schedule.append(min(most, max(schedule[-1] + 1, math.ceil(schedule[-1] * LOOK_GROWTH))))
    return tuple(schedule)


@dataclass(frozen=True)
class Levels:
    """One look's one-sided levels: for SLOWER, and for UNCHANGED and FASTER."""

    fail: float
    passing: float


def look_levels(first: int, most: int) -> Levels:
    """Each look's levels: each ``ALPHA`` shared among the schedule's looks (Bonferroni)."""
    count = len(looks(first, most))
    return Levels(ALPHA_FAIL / count, ALPHA_PASS / count)


def _codes(d: Floats, margin: float, levels: Levels) -> npt.NDArray[np.int8]:
    """Verdict codes (indices of `VERDICT_CODES`) for rounds ``d``, one row per region."""
    p = margin_p_values(d, margin)
    codes = np.zeros(np.shape(p.above), dtype=np.int8)
    codes[p.within < levels.passing] = 3
    codes[p.below < levels.passing] = 2
    codes[p.above < levels.fail] = 1
    return codes


def paired_verdict(d: Values, max_slowdown: float, levels: Levels) -> TimingVerdict:
    """The module docstring's rule, at one look, on one region's round log-ratios ``d``."""
    code = _codes(np.asarray(d, dtype=np.float64), math.log(max_slowdown), levels)
    return VERDICT_CODES[int(code)]


def first_decisions(
    draw: Callable[[int], Floats], schedule: Sequence[int], max_slowdown: float, levels: Levels
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int64]]:
    """The sequential rule on many simulated regions at once: each one's verdict code and rounds.

    ``draw(n)`` gives every region's first ``n`` round log-ratios (one row each; a longer
    draw extends the shorter one). The rule is the gate's: the same tests at the same looks,
    stopping each region at its first decided look.
    """
    last = draw(schedule[-1])
    codes = np.zeros(last.shape[0], dtype=np.int8)
    used = np.full(last.shape[0], schedule[-1], dtype=np.int64)
    open_ = np.ones(last.shape[0], dtype=bool)
    for n in schedule:
        now = _codes(last[open_, :n], math.log(max_slowdown), levels)
        rows = np.flatnonzero(open_)
        decided = now != 0
        codes[rows[decided]] = now[decided]
        used[rows[decided]] = n
        open_[rows[decided]] = False
        if not open_.any():
            break
    return codes, used


def _checked(
    base_samples: Values, head_samples: Values, max_slowdown: float, what: str
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if not base_samples or not head_samples:
        raise ValueError(f"compare_timing: {what}: both samples must be non-empty")
    if not max_slowdown >= 1:
        raise ValueError(f"compare_timing: max_slowdown must be at least 1, not {max_slowdown}")
    base = tuple(max(float(s), _SMALLEST_TIME_S) for s in base_samples)
    head = tuple(max(float(s), _SMALLEST_TIME_S) for s in head_samples)
    return base, head


def _interval_verdict(interval: RatioInterval, max_slowdown: float) -> TimingVerdict:
    """Faster, unchanged or inconclusive, from the interval at the passing level."""
    if interval.high < 1 / max_slowdown:
        return TimingVerdict.FASTER
    if 1 / max_slowdown < interval.low and interval.high < max_slowdown:
        return TimingVerdict.UNCHANGED
    return TimingVerdict.INCONCLUSIVE


def compare_paired(
    base_rounds: Values,
    head_rounds: Values,
    *,
    max_slowdown: float,
    on_regression: TimingAction,
    levels: Levels,
    what: str = "step",
    on_inconclusive: TimingAction = TimingAction.WARN,
) -> TimingComparison:
    """Head against base over paired rounds (one time per tree per round), judged at one look.

    ``levels`` are the look's (`look_levels`); the interval reported is at ``levels.passing``,
    each end. Raises ValueError when a side is empty, the two differ in length, or
    ``max_slowdown`` is below 1.
    """
    base, head = _checked(base_rounds, head_rounds, max_slowdown, what)
    d = log_ratios(base, head)
    verdict = paired_verdict(d, max_slowdown, levels)
    interval = paired_interval(d, levels.passing)
    return TimingComparison(
        against="base",
        verdict=verdict,
        base_median_s=float(np.median(base)),
        head_median_s=float(np.median(head)),
        ratio=interval.estimate,
        ratio_low=interval.low,
        ratio_high=interval.high,
        p_value=float(signed_rank_p(d, 0.0, "two-sided")),
        max_slowdown=max_slowdown,
        failing=failing(verdict, on_regression, on_inconclusive),
        base_samples=base,
        head_samples=head,
        rounds=len(base),
        what=what,
        paired=True,
        level=1 - 2 * levels.passing,
    )


def compare_unpaired(
    base_samples: Values,
    head_samples: Values,
    *,
    max_slowdown: float,
    on_regression: TimingAction,
    against: str,
    what: str = "step",
    on_inconclusive: TimingAction = TimingAction.WARN,
) -> TimingComparison:
    """Head's step times against samples measured apart (the stored baseline), judged once.

    Raises ValueError when either sample is empty or ``max_slowdown`` is below 1.
    """
    base, head = _checked(base_samples, head_samples, max_slowdown, what)
    slower = unpaired_interval(base, head, ALPHA_FAIL).low > max_slowdown
    interval = unpaired_interval(base, head, ALPHA_PASS)
    verdict = TimingVerdict.SLOWER if slower else _interval_verdict(interval, max_slowdown)
    return TimingComparison(
        against=against,
        verdict=verdict,
        base_median_s=float(np.median(base)),
        head_median_s=float(np.median(head)),
        ratio=interval.estimate,
        ratio_low=interval.low,
        ratio_high=interval.high,
        p_value=mann_whitney_p(head, base, "two-sided"),
        max_slowdown=max_slowdown,
        failing=failing(verdict, on_regression, on_inconclusive),
        base_samples=base,
        head_samples=head,
        what=what,
        level=1 - 2 * ALPHA_PASS,
    )


def failing(
    verdict: TimingVerdict, on_regression: TimingAction, on_inconclusive: TimingAction
) -> bool:
    """Whether the verdict fails the region: slower under ``on_regression: fail``, or left
    open by noise under ``on_inconclusive: fail`` (for teams that want "could not tell" to
    block)."""
    if verdict is TimingVerdict.SLOWER:
        return on_regression is TimingAction.FAIL
    return verdict is TimingVerdict.INCONCLUSIVE and on_inconclusive is TimingAction.FAIL


def decided(comparison: TimingComparison) -> bool:
    """Whether more rounds are pointless: the verdict is anything but inconclusive."""
    return comparison.verdict is not TimingVerdict.INCONCLUSIVE
