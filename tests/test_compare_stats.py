"""The signed-rank and Mann-Whitney machinery, against scipy called directly on seeded draws.

No pasted constants: each expected value is computed here, from scipy or by brute force
over the definition, on draws from a seeded generator.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import processes
import pytest
from scipy import stats

from gate.compare.stats import (
    EXACT_MAX_PAIRS,
    EXACT_MAX_ROUNDS,
    _mann_whitney_method,
    _signed_rank_method,
    log_ratios,
    mann_whitney_p,
    margin_p_values,
    paired_interval,
    signed_rank_p,
    unpaired_interval,
)

MARGIN = math.log(1.1)


@pytest.mark.parametrize("n", [8, 30, EXACT_MAX_ROUNDS, EXACT_MAX_ROUNDS + 1, 150])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_signed_rank_p_is_scipys_with_the_method_named(n: int, alternative: str) -> None:
    d = np.random.default_rng(n).normal(0.05, 0.1, n)
    method = "exact" if n <= EXACT_MAX_ROUNDS else "approx"
    expected = stats.wilcoxon(d - 0.02, alternative=alternative, method=method).pvalue
    assert float(signed_rank_p(d, 0.02, alternative)) == pytest.approx(expected, rel=1e-12)


def test_signed_rank_p_falls_back_to_the_approximation_on_ties() -> None:
    d = np.array([0.1, -0.1, 0.2, 0.3, 0.2, 0.05, 0.4, 0.1])  # tied magnitudes
    expected = stats.wilcoxon(d, alternative="greater", method="approx").pvalue
    assert float(signed_rank_p(d, 0.0, "greater")) == pytest.approx(expected, rel=1e-12)


def test_signed_rank_p_of_many_runs_is_each_runs_own() -> None:
    d = np.random.default_rng(5).normal(0.0, 0.2, (6, 24))
    each = [float(signed_rank_p(row, MARGIN, "greater")) for row in d]
    np.testing.assert_allclose(signed_rank_p(d, MARGIN, "greater"), each, rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_signed_rank_p_is_scipys_on_zeros_ties_and_every_size(seed: int) -> None:
    """Computed without scipy (it is asked at every look and every step of an interval's
    search): the same p-values, exact and approximate, zeros dropped, ties averaged."""
    rng = np.random.default_rng(seed)
    for trial in range(400):
        n = int(rng.integers(1, 80))
        d = rng.normal(0.01, 0.05, size=n)
        if trial % 3 == 0:
            d = np.round(d, 2)  # zeros and tied magnitudes
        shift = float(rng.normal(0.0, 0.02))
        method = _signed_rank_method(d - shift)
        for alternative in ("greater", "less", "two-sided"):
            expected = stats.wilcoxon(d - shift, alternative=alternative, method=method).pvalue
            got = float(signed_rank_p(d, shift, alternative))
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-12, nan_ok=True), (n, method)
    # Many runs at once: with ties (run by run), and without (all at once), exact and not.
    tied = np.round(rng.normal(0.0, 0.05, size=(50, 30)), 2)
    for rows in (tied, rng.normal(0.0, 0.05, size=(50, 16)), rng.normal(0.0, 0.05, (50, 60))):
        method = _signed_rank_method(rows)
        for alternative in ("greater", "less", "two-sided"):
            expected = stats.wilcoxon(rows, alternative=alternative, method=method, axis=-1)
            got = signed_rank_p(rows, 0.0, alternative)
            np.testing.assert_allclose(got, expected.pvalue, rtol=1e-9, atol=1e-15)


def test_the_estimate_is_the_median_of_the_walsh_averages() -> None:
    d = np.random.default_rng(2).normal(0.1, 0.2, 25)
    walsh = [(d[i] + d[j]) / 2 for i in range(d.size) for j in range(i, d.size)]
    assert paired_interval(d, 0.01).estimate == pytest.approx(math.exp(np.median(walsh)))


@pytest.mark.parametrize("seed", range(6))
def test_each_end_of_the_paired_interval_is_where_scipys_one_sided_test_flips(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = rng.normal(rng.normal(0, 0.1), 0.15, int(rng.integers(12, 70)))
    a = 0.01
    interval = paired_interval(d, a)
    low, high = math.log(interval.low), math.log(interval.high)

    method = "exact" if d.size <= EXACT_MAX_ROUNDS else "approx"

    def p(shift: float, alternative: str) -> float:
        return float(stats.wilcoxon(d - shift, alternative=alternative, method=method).pvalue)

    # Just outside the interval a one-sided test rejects; just inside, it does not.
    eps = 1e-9
    assert p(low - eps, "greater") < a <= p(low + eps, "greater")
    assert p(high + eps, "less") < a <= p(high - eps, "less")


@pytest.mark.parametrize("seed", range(40))
def test_the_interval_and_the_margin_tests_never_disagree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = rng.normal(rng.normal(0, 0.15), rng.uniform(0.02, 0.3), int(rng.integers(6, 120)))
    a = float(rng.choice([1e-4, 4e-5, 0.01]))
    interval = paired_interval(d, a)
    p = margin_p_values(d, MARGIN)
    assert (interval.low > 1.1) == bool(p.above < a)
    assert (interval.high < 1 / 1.1) == bool(p.below < a)
    assert (interval.low > 1 / 1.1 and interval.high < 1.1) == bool(p.within < a)


def test_the_paired_interval_covers_the_true_ratio_about_as_often_as_it_says() -> None:
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(300):
        # Skewed noise, the same in both runs of a round: the ratio's log is symmetric.
        noise = rng.lognormal(0, 0.3, (2, 20))
        d = log_ratios(list(1e-3 * noise[0]), list(1.3e-3 * noise[1]))
        interval = paired_interval(d, 0.05)
        covered += interval.low <= 1.3 <= interval.high
    assert 255 <= covered <= 285  # 90% of 300 is 270; binomial sd ~5


def test_too_few_rounds_give_an_unbounded_interval() -> None:
    interval = paired_interval([0.1, 0.2, 0.3], 1e-4)  # the smallest p of 3 rounds is 1/8
    assert (interval.low, interval.high) == (0.0, math.inf)


@pytest.mark.parametrize(("n1", "n2"), [(5, 6), (20, 20), (30, 40)])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_mann_whitney_p_is_scipys_with_the_method_named(n1: int, n2: int, alternative: str) -> None:
    rng = np.random.default_rng(n1 * n2)
    x, y = rng.lognormal(0, 0.1, n1), rng.lognormal(0.05, 0.1, n2)
    method = "exact" if n1 * n2 <= EXACT_MAX_PAIRS else "asymptotic"
    expected = stats.mannwhitneyu(x, y, alternative=alternative, method=method).pvalue
    assert mann_whitney_p(list(x), list(y), alternative) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_mann_whitney_p_is_scipys_on_ties_and_every_size(seed: int) -> None:
    """Computed without scipy (asked at each step of an interval's search): the same
    p-values, exact and asymptotic (continuity- and tie-corrected), every alternative."""
    rng = np.random.default_rng(seed)
    for trial in range(300):
        x = rng.normal(0.0, 1.0, int(rng.integers(1, 40)))
        y = rng.normal(0.3, 1.0, int(rng.integers(1, 40)))
        if trial % 3 == 0:
            x, y = np.round(x, 1), np.round(y, 1)  # ties
        if np.all(x == x[0]) and np.all(y == x[0]):
            continue
        method = _mann_whitney_method(x, y)
        for alternative in ("greater", "less", "two-sided"):
            expected = stats.mannwhitneyu(x, y, alternative=alternative, method=method).pvalue
            got = mann_whitney_p(x, y, alternative)
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), (x.size, y.size, method)


def test_mann_whitney_with_ties_uses_the_tie_corrected_approximation() -> None:
    x, y = [1, 2, 2, 3, 4, 4, 4, 5], [3, 4, 5, 5, 6, 6, 7, 8]
    expected = stats.mannwhitneyu(x, y, method="asymptotic").pvalue
    assert mann_whitney_p(x, y, "two-sided") == pytest.approx(expected, rel=1e-12)


def test_all_values_equal_is_p_one() -> None:
    assert mann_whitney_p([1.0] * 30, [1.0] * 30, "two-sided") == 1.0


def test_the_unpaired_ratio_of_a_sample_scaled_by_two_is_two() -> None:
    base = np.random.default_rng(3).lognormal(-7, 0.05, 40)
    interval = unpaired_interval(list(base), list(2 * base), 5e-4)
    assert interval.estimate == pytest.approx(2.0, rel=1e-12)
    assert interval.low < 2.0 < interval.high
    assert interval.high / interval.low < 1.15


@pytest.mark.parametrize("seed", range(4))
def test_each_end_of_the_unpaired_interval_is_where_scipys_one_sided_test_flips(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base, head = rng.lognormal(0, 0.2, 30), rng.lognormal(0.1, 0.2, 25)
    a = 0.005
    interval = unpaired_interval(list(base), list(head), a)
    b, h = np.log(base), np.log(head)

    def p(shift: float, alternative: str) -> float:
        return float(stats.mannwhitneyu(h - shift, b, alternative=alternative).pvalue)

    low, high = math.log(interval.low), math.log(interval.high)
    assert p(low - 1e-9, "greater") < a <= p(low + 1e-9, "greater")
    assert p(high + 1e-9, "less") < a <= p(high - 1e-9, "less")


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_p([], [1.0], "two-sided")
    with pytest.raises(ValueError, match="positive"):
        unpaired_interval([0.0, 1.0], [1.0, 2.0], 0.01)
    with pytest.raises(ValueError, match="3 base times but 2 head times"):
        log_ratios([1.0, 2.0, 3.0], [1.0, 2.0])


def test_comparing_step_times_imports_no_scipy() -> None:
    """scipy.stats costs ~1 s to import: every test the comparisons make is computed here."""
    code = (
        "import sys\n"
        "from gate.compare.stats import mann_whitney_p, margin_p_values, paired_interval\n"
        "from gate.compare.stats import unpaired_interval\n"
        "d = [0.01 * (i % 7 - 3) + 0.001 * i for i in range(40)]\n"
        "margin_p_values(d, 0.1); paired_interval(d, 0.05)\n"
        "b = [1.0 + 0.01 * i for i in range(20)]\n"
        "unpaired_interval(b, [t + 0.1 for t in b], 0.05)\n"
        "mann_whitney_p([1.0, 2.0, 3.0], [1.5, 2.5], 'two-sided')\n"
        "print('scipy' in sys.modules)\n"
    )
    done = processes.run([sys.executable, "-c", code], timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
