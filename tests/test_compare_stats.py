"""Mann-Whitney U and the ratio interval, against textbook tables and scipy's numbers.

The scipy values were computed once offline (scipy 1.17.1,
``scipy.stats.mannwhitneyu(x, y, alternative="two-sided")``) and pasted here:
the gate itself has no scipy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.compare.stats import (
    _order_rank,
    mann_whitney_p,
    normal_quantile,
    ratio_interval,
    u_statistic,
)


def test_u_counts_the_pairs_the_first_sample_wins_ties_as_half() -> None:
    assert u_statistic([3.0, 4.0], [1.0, 2.0]) == 4.0
    assert u_statistic([1.0, 2.0], [3.0, 4.0]) == 0.0
    assert u_statistic([2.0], [2.0]) == 0.5


def test_exact_p_for_small_samples_without_ties() -> None:
    # scipy: method "auto" picks the exact distribution here.
    x = [1.1, 2.3, 3.5, 4.2, 5.9]
    y = [2.0, 6.1, 7.4, 8.8, 9.3, 10.5]
    assert mann_whitney_p(x, y) == pytest.approx(0.05194805194805195, rel=1e-12)
    # Completely separated 3 + 3: 2 of the C(6, 3) = 20 orderings are as extreme.
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    assert mann_whitney_p([1, 2, 3], [1.5, 2.5, 3.5]) == pytest.approx(0.7)


@pytest.mark.parametrize(("n1", "n2"), [(8, 8), (20, 20), (4, 7)])
def test_exact_p_is_the_same_whichever_sample_comes_first(n1: int, n2: int) -> None:
    rng = np.random.default_rng(0)
    x, y = list(rng.normal(0, 1, n1)), list(rng.normal(0.8, 1, n2))
    assert mann_whitney_p(x, y) == pytest.approx(mann_whitney_p(y, x), rel=1e-12)


def test_normal_approximation_with_ties_matches_scipy() -> None:
    x = [1, 2, 2, 3, 4, 4, 4, 5]
    y = [3, 4, 5, 5, 6, 6, 7, 8]
    assert mann_whitney_p(x, y) == pytest.approx(0.012439175316984458, rel=1e-9)


def test_normal_approximation_for_large_samples_matches_scipy() -> None:
    rng = np.random.default_rng(7)
    x, y = rng.lognormal(0, 0.1, 30), rng.lognormal(0.05, 0.1, 30)
    # 30 * 30 pairs: past EXACT_MAX_PAIRS, so the normal approximation, as scipy's "auto".
    assert mann_whitney_p(list(x), list(y)) == pytest.approx(0.0005561109783724005, rel=1e-9)


def test_all_values_equal_is_p_one() -> None:
    assert mann_whitney_p([1.0] * 30, [1.0] * 30) == 1.0


def test_normal_quantile() -> None:
    assert normal_quantile(0.995) == pytest.approx(2.5758293035489004, abs=1e-9)
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="p must be in"):
        normal_quantile(1.0)


@pytest.mark.parametrize(
    ("n1", "n2", "confidence", "k"),
    [
        # Textbook tables of the Mann-Whitney critical value U_crit (reject when U <= U_crit),
        # two-sided: the interval's order statistic is U_crit + 1.
        (10, 10, 0.95, 23 + 1),
        (10, 10, 0.99, 16 + 1),
        (5, 5, 0.95, 2 + 1),
        (20, 20, 0.95, 127 + 1),
        # Normal approximation: floor(800 - 2.5758 * sqrt(1600 * 81 / 12) + 0.5).
        (40, 40, 0.99, 532),
        # Too small for 99%: even the extremes (P = 1/20 each side) do not reach it.
        (3, 3, 0.99, 0),
        (3, 3, 0.90, 1),
    ],
)
def test_order_rank_of_the_moses_interval(n1: int, n2: int, confidence: float, k: int) -> None:
    assert _order_rank(n1, n2, confidence) == k


def test_ratio_of_a_sample_scaled_by_two_is_two() -> None:
    rng = np.random.default_rng(3)
    base = rng.lognormal(-7, 0.05, 40)
    interval = ratio_interval(list(base), list(2 * base))
    assert interval.estimate == pytest.approx(2.0, rel=1e-12)
    assert interval.low < 2.0 < interval.high
    assert interval.high / interval.low < 1.1


def test_ratio_interval_of_tiny_samples_spans_the_extremes_or_is_unbounded() -> None:
    base, head = [1.0, 2.0, 4.0], [2.0, 3.0, 8.0]
    wide = ratio_interval(base, head, confidence=0.90)
    assert (wide.low, wide.high) == pytest.approx((2.0 / 4.0, 8.0 / 1.0))
    open_ = ratio_interval(base, head, confidence=0.99)
    assert (open_.low, open_.high) == (0.0, math.inf)


def test_ratio_interval_covers_the_true_ratio_about_as_often_as_it_says() -> None:
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(200):
        base, head = rng.lognormal(0, 0.2, 15), 1.3 * rng.lognormal(0, 0.2, 15)
        interval = ratio_interval(list(base), list(head), confidence=0.90)
        covered += interval.low <= 1.3 <= interval.high
    assert 170 <= covered <= 195  # 90% of 200 is 180; binomial sd ~4


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_p([], [1.0])
    with pytest.raises(ValueError, match="positive"):
        ratio_interval([0.0, 1.0], [1.0, 2.0])
