"""Two samples of step times, compared distribution-free: Mann-Whitney U and a ratio interval.

Step times are skewed (a floor set by the work, a long tail from everything
else the machine does), so nothing here assumes normality. The p-value is the
two-sided Mann-Whitney U test: exact for small samples without ties, else the
normal approximation with the tie and continuity corrections (as textbooks and
``scipy.stats.mannwhitneyu`` give it). The interval is of the ratio head/base:
the Hodges-Lehmann shift of the log-times with the Moses order-statistic
interval over all pairwise differences ``log h_i - log b_j``, exponentiated.
A shift of log-time is a factor of time, which is how a slowdown is read, and
the interval is distribution-free: its coverage holds for any continuous
distribution of the same shape on both sides.

numpy only (the gate has no scipy): the normal quantile is found by bisection
on `math.erfc`, the exact distribution of U by counting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

# Both samples this small (n1 * n2 at most this), and no ties: the exact distribution
# of U. Counting it costs O(n1 * n2 * (n1 + n2)) integer additions, nothing at 20 + 20.
EXACT_MAX_PAIRS = 400


@dataclass(frozen=True)
class RatioInterval:
    """The ratio head/base: Hodges-Lehmann estimate and its confidence interval."""

    estimate: float
    low: float  # 0.0 when the samples are too small for the level asked
    high: float  # math.inf likewise


def _normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def normal_quantile(p: float) -> float:
    """The z with P(Z <= z) = p, to 1e-12, by bisection (no scipy)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"normal_quantile: p must be in (0, 1), not {p}")
    low, high = -40.0, 40.0
    while high - low > 1e-12:
        mid = (low + high) / 2
        if 1.0 - _normal_sf(mid) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _as_array(sample: Sequence[float], name: str) -> npt.NDArray[np.float64]:
    values = np.asarray(sample, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"{name}: a non-empty sequence of numbers is needed")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name}: every value must be finite")
    return values


def _ranks(values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], list[int]]:
    """Ranks from 1, ties given their average rank; and the size of each group of ties."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    ranks = np.empty(values.size, dtype=np.float64)
    ties = []
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and ordered[end + 1] == ordered[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        if end > start:
            ties.append(end - start + 1)
        start = end + 1
    return ranks, ties


def u_statistic(first: Sequence[float], second: Sequence[float]) -> float:
    """U of ``first``: pairs (x, y) with x > y, a tie counting one half."""
    x, y = _as_array(first, "first"), _as_array(second, "second")
    ranks, _ = _ranks(np.concatenate([x, y]))
    return float(ranks[: x.size].sum() - x.size * (x.size + 1) / 2)


@lru_cache(maxsize=64)
def _exact_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) orderings give each U = 0 … n1*n2 (no ties).

    The largest value comes from the first sample (it beats all n2 of the
    second: U grows by n2) or from the second (U unchanged), hence
    ``f(i, j)[u] = f(i-1, j)[u-j] + f(i, j-1)[u]``.
    """
    # row[j] holds f(i, j) as a list of counts by u, for the current i.
    row: list[list[int]] = [[1] for _ in range(n2 + 1)]  # f(0, j): only U = 0
    for i in range(1, n1 + 1):
        new: list[list[int]] = [[1]]  # f(i, 0): only U = 0
        for j in range(1, n2 + 1):
            size = i * j + 1
            counts = [0] * size
            for u, c in enumerate(row[j]):  # f(i-1, j), shifted by j
                counts[u + j] += c
            for u, c in enumerate(new[j - 1]):  # f(i, j-1)
                counts[u] += c
            new.append(counts)
        row = new
    return tuple(row[n2])


def _exact_cdf(n1: int, n2: int, u: int) -> float:
    """P(U <= u) under the null, exactly (no ties)."""
    counts = _exact_counts(n1, n2)
    if u < 0:
        return 0.0
    return min(1.0, sum(counts[: u + 1]) / math.comb(n1 + n2, n1))


def mann_whitney_p(first: Sequence[float], second: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test that the two samples share a distribution."""
    x, y = _as_array(first, "first"), _as_array(second, "second")
    n1, n2 = x.size, y.size
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    pairs = n1 * n2
    if not ties and pairs <= EXACT_MAX_PAIRS:
        # The distribution is symmetric: twice the tail beyond the larger of U1 and U2.
        big = round(max(u1, pairs - u1))
        return min(1.0, 2.0 * (1.0 - _exact_cdf(n1, n2, big - 1)))
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    variance = pairs / 12.0 * ((n + 1) - tie_term)
    if variance <= 0:  # every value the same: nothing tells the samples apart
        return 1.0
    z = (abs(u1 - pairs / 2.0) - 0.5) / math.sqrt(variance)
    return min(1.0, 2.0 * _normal_sf(max(z, 0.0)))


def _order_rank(n1: int, n2: int, confidence: float) -> int:
    """k: the interval runs from the k-th smallest pairwise difference to the k-th largest.

    The largest k with P(U <= k-1) <= (1 - confidence) / 2; 0 when even the
    extremes do not reach the level (the interval is then unbounded).
    """
    tail = (1.0 - confidence) / 2.0
    pairs = n1 * n2
    if pairs <= EXACT_MAX_PAIRS:
        counts = _exact_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        k, below = 0, 0
        # The epsilon: (1 - 0.9) / 2 is 0.04999…, and P(U = 0) at 3 + 3 is exactly 1/20.
        while k < pairs and (below + counts[k]) / total <= tail + 1e-12:
            below += counts[k]
            k += 1
        return k  # P(U <= k-1) = below / total <= tail
    sigma = math.sqrt(pairs * (n1 + n2 + 1) / 12.0)
    z = normal_quantile(1.0 - tail)
    return max(0, math.floor(pairs / 2.0 - z * sigma + 0.5))


def ratio_interval(
    base: Sequence[float], head: Sequence[float], confidence: float = 0.99
) -> RatioInterval:
    """The ratio head/base with its ``confidence`` interval (Hodges-Lehmann, Moses).

    Every value must be positive: they are times.
    """
    b, h = _as_array(base, "base"), _as_array(head, "head")
    if np.any(b <= 0) or np.any(h <= 0):
        raise ValueError("ratio_interval: times must be positive")
    differences = np.sort(np.subtract.outer(np.log(h), np.log(b)).ravel())
    estimate = math.exp(float(np.median(differences)))
    k = _order_rank(h.size, b.size, confidence)
    if k < 1:
        return RatioInterval(estimate, 0.0, math.inf)
    low = math.exp(float(differences[k - 1]))
    high = math.exp(float(differences[differences.size - k]))
    return RatioInterval(estimate, low, high)
