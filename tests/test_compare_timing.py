"""The verdict on two samples of step times: slower, faster, unchanged, inconclusive."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gate.compare.timing import compare_timing, decided, verdict_of
from gate.policy.model import OnRegression
from gate.results.comparison import TimingVerdict


def lognormal(seed: int, median_s: float, noise: float, n: int) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(median_s), noise, n))


def compare(base: list[float], head: list[float], **kwargs: object):  # type: ignore[no-untyped-def]
    options: dict[str, object] = {
        "max_slowdown": 1.10,
        "on_regression": OnRegression.FAIL,
        "against": "base",
    }
    options.update(kwargs)
    return compare_timing(base, head, **options)  # type: ignore[arg-type]


def test_twice_as_slow_is_slower_and_fails() -> None:
    result = compare(lognormal(1, 412e-6, 0.05, 40), lognormal(2, 824e-6, 0.05, 40))
    assert result.verdict is TimingVerdict.SLOWER
    assert result.failing
    assert decided(result)
    assert result.ratio == pytest.approx(2.0, rel=0.05)
    assert result.ratio_low < 2.0 < result.ratio_high
    assert result.p_value < 1e-10


def test_slower_under_warn_is_reported_not_failing() -> None:
    result = compare(
        lognormal(1, 1e-3, 0.05, 20), lognormal(2, 2e-3, 0.05, 20), on_regression=OnRegression.WARN
    )
    assert result.verdict is TimingVerdict.SLOWER
    assert not result.failing


def test_twice_as_fast_is_faster_and_passes() -> None:
    result = compare(lognormal(1, 2e-3, 0.05, 40), lognormal(2, 1e-3, 0.05, 40))
    assert result.verdict is TimingVerdict.FASTER
    assert not result.failing
    assert re.match(
        r"(1\.9[0-9]|2\.[01][0-9])x faster: median 2.0[0-9] ms → 1.0[0-9] ms", result.headline()
    )


def test_identical_distributions_are_unchanged_in_19_of_20_seeds() -> None:
    verdicts = [
        compare(lognormal(2 * s, 412e-6, 0.03, 40), lognormal(2 * s + 1, 412e-6, 0.03, 40)).verdict
        for s in range(20)
    ]
    assert verdicts.count(TimingVerdict.UNCHANGED) >= 19, verdicts
    assert TimingVerdict.SLOWER not in verdicts


def test_tiny_noisy_samples_are_inconclusive() -> None:
    result = compare(lognormal(1, 1e-3, 0.3, 3), lognormal(2, 1.2e-3, 0.3, 3))
    assert result.verdict is TimingVerdict.INCONCLUSIVE
    assert not result.failing
    assert not decided(result)
    assert "too few samples" in result.headline()


def test_a_slowdown_within_noise_is_inconclusive_not_unchanged() -> None:
    # 1.1x true slowdown at 20% noise, 10 + 10: the interval straddles the factor.
    result = compare(lognormal(5, 1e-3, 0.2, 10), lognormal(6, 1.1e-3, 0.2, 10))
    assert result.verdict is TimingVerdict.INCONCLUSIVE
    assert "straddles 1.1x" in result.headline()


def test_the_headline_reads_like_the_issue_says() -> None:
    result = compare(
        lognormal(3, 412e-6, 0.15, 40), lognormal(4, 545e-6, 0.15, 40), rounds=8, what="step"
    )
    assert result.verdict is TimingVerdict.SLOWER
    pattern = (
        r"1\.[0-9]{2}x slower: median [0-9]{3} µs → [0-9]{3} µs, "
        r"p=[0-9](\.[0-9])?e-[0-9]{2}, 40\+40 samples"
    )
    assert re.fullmatch(pattern, result.headline()), result.headline()
    assert (result.rounds, result.what, result.against) == (8, "step", "base")
    assert len(result.base_samples) == len(result.head_samples) == 40


@pytest.mark.parametrize(
    ("p", "ratio", "low", "high", "verdict"),
    [
        (0.001, 1.2, 1.15, 1.25, TimingVerdict.SLOWER),
        (0.001, 0.8, 0.75, 0.85, TimingVerdict.FASTER),
        # Significant but small: the interval rules out the allowed factor.
        (0.001, 1.04, 1.02, 1.06, TimingVerdict.UNCHANGED),
        # Past the factor but not significant: open.
        (0.05, 1.2, 0.95, 1.4, TimingVerdict.INCONCLUSIVE),
        # Not significant, and the interval reaches the factor: open, not "unchanged".
        (0.5, 1.0, 0.92, 1.12, TimingVerdict.INCONCLUSIVE),
        (0.5, 1.0, 0.92, 1.08, TimingVerdict.UNCHANGED),
    ],
)
def test_the_rule(p: float, ratio: float, low: float, high: float, verdict: TimingVerdict) -> None:
    assert verdict_of(p, ratio, low, high, 1.10) is verdict


def test_against_the_baseline_uses_its_own_wider_factor() -> None:
    result = compare(
        lognormal(1, 1e-3, 0.05, 20),
        lognormal(2, 1.3e-3, 0.05, 20),
        max_slowdown=1.5,
        against="baseline",
    )
    # 1.3x is significant but within 1.5x; the interval says so.
    assert result.verdict is TimingVerdict.UNCHANGED
    assert (result.against, result.max_slowdown) == ("baseline", 1.5)


def test_empty_samples_and_a_factor_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        compare([], [1.0])
    with pytest.raises(ValueError, match="at least 1"):
        compare([1.0], [1.0], max_slowdown=0.9)


def test_a_factor_of_one_fails_any_significant_slowdown() -> None:
    result = compare(
        lognormal(1, 1e-3, 0.02, 30), lognormal(2, 1.03e-3, 0.02, 30), max_slowdown=1.0
    )
    assert result.verdict is TimingVerdict.SLOWER
