"""Step times compared, distribution-free: paired rounds and unpaired samples.

Two designs, two tests:

- ``run --base`` times the two trees in adjacent pairs (a round: one base run, then one head
  run, on the same core, `gate.compare.session`). What is judged is each round's log-ratio
  ``d = log(head) - log(base)``: drift, a burst of load or a slow core hits both runs of a
  pair alike and cancels in ``d``. The test is Wilcoxon's signed-rank test on the ``d``
  (`scipy.stats.wilcoxon`), the estimate the Hodges-Lehmann median of the Walsh averages
  ``(d_i + d_j) / 2``, and the interval the set of shifts the one-sided tests do not reject.
- ``transfer-gate baseline`` stored samples from another job: nothing pairs them with this
  run's, so they are compared as two samples, with the Mann-Whitney U test
  (`scipy.stats.mannwhitneyu`), the two-sample Hodges-Lehmann shift of the log-times and its
  interval (Moses), likewise by inverting the one-sided tests.

Both work on log-times: a shift of log-time is a factor of time, which is how a slowdown is
read. Both are distribution-free: for the paired test the only assumption is that, without a
change, a round's two runs are exchangeable (its ``d`` is as likely ``+x`` as ``-x``), which
is what running them back to back on one core buys; the noise may be skewed, heavy-tailed or
drifting from round to round. `margin_p_values` gives the one-sided p-values the verdict
(`gate.compare.timing`) rests on; it is vectorised so that the tests can simulate the
sequential rule's error rates on many seeded runs at once, with the very code the gate runs.

Each test names its ``method``: exact null distributions while they are cheap and valid
(no zeros, no ties), the normal approximation beyond. Both tests are computed here, as
``scipy.stats.wilcoxon`` and ``scipy.stats.mannwhitneyu`` compute them (the tests check that
they agree): scipy's calls cost ~1 ms each where a comparison asks for hundreds, and
``scipy.stats`` ~1 s to import.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
# Times or log-ratios as the callers have them: a list, a tuple or an array.
Values = Sequence[float] | Floats

# Up to this many rounds the signed-rank test uses its exact null distribution (scipy's own
# "auto" threshold); beyond, the normal approximation, whose error there is far below alpha.
EXACT_MAX_ROUNDS = 50
# Both samples this small (n1 * n2 at most this): the exact Mann-Whitney distribution.
EXACT_MAX_PAIRS = 400


@dataclass(frozen=True)
class RatioInterval:
    """A ratio head/base: its estimate and a confidence interval (0 and inf: unbounded)."""

    estimate: float
    low: float
    high: float


def _as_array(sample: Values, name: str) -> Floats:
    values = np.asarray(sample, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"{name}: a non-empty sequence of numbers is needed")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name}: every value must be finite")
    return values


def _log_times(sample: Values, name: str) -> Floats:
    values = _as_array(sample, name)
    if np.any(values <= 0):
        raise ValueError(f"{name}: times must be positive")
    return np.log(values)


def log_ratios(base: Values, head: Values) -> Floats:
    """Each round's ``log(head / base)``: the paired test's observations."""
    b, h = _log_times(base, "base"), _log_times(head, "head")
    if b.size != h.size:
        raise ValueError(f"paired rounds: {b.size} base times but {h.size} head times")
    return h - b


# -- paired rounds: the signed-rank test -------------------------------------------------


_ALTERNATIVES = ("greater", "less", "two-sided")


def _check_alternative(alternative: str) -> None:
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be greater, less or two-sided, not {alternative!r}")


def _untied(shifted: Floats) -> bool:
    """No zero and no tied magnitude in any run."""
    magnitudes = np.sort(np.abs(shifted), axis=-1)
    return bool(np.all(magnitudes > 0) and not np.any(np.diff(magnitudes, axis=-1) == 0))


def _signed_rank_method(shifted: Floats) -> str:
    """``exact`` for few rounds without zeros or tied magnitudes, else ``approx``."""
    exact = shifted.shape[-1] <= EXACT_MAX_ROUNDS and _untied(shifted)
    return "exact" if exact else "approx"


def signed_rank_p(d: Floats, shift: float, alternative: str) -> Floats:
    """P-value(s) of the signed-rank test that the rounds' median ``d`` is ``shift``.

    ``d`` is one run's rounds (1-D) or many runs' (2-D, one per row): the p-values come
    back in the same shape less the last axis. ``alternative``: ``greater`` (small when the
    median is above ``shift``), ``less``, or ``two-sided``.

    What ``scipy.stats.wilcoxon(d - shift, alternative=..., method=_signed_rank_method(...))``
    gives (zeros dropped, no continuity correction; `tests/test_compare_stats.py` checks that
    they are equal), computed here: a comparison asks for it at every look of every region
    and at each step of its interval's search, and scipy's call costs ~1 ms there (its import
    ~1 s once), all of it while the worker waits for the next turn.
    """
    _check_alternative(alternative)
    shifted = np.asarray(d, dtype=np.float64) - shift
    n = shifted.shape[-1]
    if _untied(shifted):  # always so for measured times: every run at once
        ranks = np.argsort(np.argsort(np.abs(shifted), axis=-1), axis=-1) + 1
        r_plus = np.sum(np.where(shifted > 0, ranks, 0), axis=-1)
        return _signed_rank_p_of(r_plus, n, 0.0, alternative, exact=n <= EXACT_MAX_ROUNDS)
    rows = shifted.reshape(-1, n)
    p = np.array([_signed_rank_tied(row, alternative) for row in rows])
    return np.asarray(p.reshape(shifted.shape[:-1]), dtype=np.float64)


def _signed_rank_tied(d: Floats, alternative: str) -> float:
    """`signed_rank_p` of one run with zeros (dropped) or tied magnitudes (ranks averaged)."""
    nonzero = d[d != 0]
    if nonzero.size == 0:  # nothing but zeros: no test (scipy says nan too; no rule rejects on it)
        return math.nan
    ranks, ties = _average_ranks(np.abs(nonzero))
    r_plus = np.sum(ranks[nonzero > 0])
    return float(_signed_rank_p_of(r_plus, nonzero.size, ties, alternative, exact=False))


def _signed_rank_p_of(
    r_plus: Floats, n: int, ties: float, alternative: str, *, exact: bool
) -> Floats:
    """The p-values of signed-rank statistics ``r_plus`` of ``n`` nonzero rounds: exact (no
    ties), or the normal approximation with ``ties``' term (`_average_ranks`)."""
    if exact:
        cumulative = _signed_rank_cdf(n)  # P(W+ <= k), k = 0 .. n(n+1)/2
        return _exact_p(cumulative, r_plus, alternative)
    variance = n * (n + 1) * (2 * n + 1) / 24.0 - ties / 48.0
    if variance <= 0:
        return np.full(np.shape(r_plus), math.nan)
    z = (r_plus - n * (n + 1) / 4.0) / math.sqrt(variance)
    if alternative == "two-sided":
        return 2.0 * _normal_sf(np.abs(z))
    return _normal_sf(z if alternative == "greater" else -z)


def _exact_p(cumulative: Floats, statistic: Floats | float, alternative: str) -> Floats:
    """From an integer statistic's exact distribution (``cumulative``: P(S <= i)): P(S >= k)
    for ``greater``, P(S <= k) for ``less``, twice the smaller (at most 1) for ``two-sided``."""
    k = np.asarray(np.rint(statistic), dtype=np.int64)
    at_most = cumulative[k]
    at_least = np.where(k > 0, 1.0 - cumulative[np.maximum(k - 1, 0)], 1.0)
    if alternative == "two-sided":
        return np.asarray(np.minimum(1.0, 2.0 * np.minimum(at_least, at_most)))
    return np.asarray(at_least if alternative == "greater" else at_most)


def _normal_sf(z: Floats | float) -> Floats:
    """P(Z > z) for a standard normal Z, elementwise."""
    erfc = np.frompyfunc(math.erfc, 1, 1)
    return np.asarray(0.5 * erfc(np.asarray(z) / math.sqrt(2.0)), dtype=np.float64)


def _average_ranks(values: Floats) -> tuple[Floats, float]:
    """Ranks 1..n of ``values``, tied ones averaged (as scipy's ``rankdata``), and the ties'
    term of the normal approximations' variance: the sum of t³ - t over groups of t tied."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(1, values.size + 1, dtype=np.float64)
    averaged = (np.bincount(inverse, weights=ranks) / counts)[inverse]
    return averaged, float(np.sum(counts.astype(np.float64) ** 3 - counts))


@functools.cache
def _signed_rank_cdf(n: int) -> Floats:
    """P(W+ <= k) for n rounds without zeros or ties: how many subsets of ranks 1..n sum to
    each k, over 2^n."""
    top = n * (n + 1) // 2
    counts = np.zeros(top + 1, dtype=np.float64)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return np.asarray(np.cumsum(counts) / 2.0**n, dtype=np.float64)


@dataclass(frozen=True)
class MarginPValues:
    """One-sided signed-rank p-values of the rounds' median log-ratio against ``±margin``.

    ``above``: that it is at most ``margin`` (small: slower than the margin allows);
    ``below``: that it is at least ``-margin`` (small: faster by more than the margin);
    ``within``: the larger of the two tests that it is at least ``margin`` and at most
    ``-margin`` (small: inside the margin both ways; two one-sided tests, TOST).
    Arrays of the shape of ``d`` less its last axis (floats for one run).
    """

    above: Floats
    below: Floats
    within: Floats


def margin_p_values(d: Floats, margin: float) -> MarginPValues:
    """The one-sided tests the verdict rests on, for rounds ``d`` (one run, or one per row)."""
    below_upper = signed_rank_p(d, margin, "less")  # median < margin
    above_lower = signed_rank_p(d, -margin, "greater")  # median > -margin
    return MarginPValues(
        above=signed_rank_p(d, margin, "greater"),
        below=signed_rank_p(d, -margin, "less"),
        within=np.maximum(below_upper, above_lower),
    )


def _walsh_averages(d: Floats) -> Floats:
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2.0)


def _inverted(
    values: Floats, p_greater: Callable[[float], float], p_less: Callable[[float], float], a: float
) -> tuple[float, float]:
    """The shifts one-sided tests at level ``a`` do not reject, from the sorted ``values``.

    A rank statistic only changes where the shift crosses one of ``values`` (Walsh averages,
    or pairwise differences), so the tests are asked at the midpoints between them, where no
    difference is zero or tied. ``p_greater`` grows with the shift, ``p_less`` falls.
    """
    distinct = np.unique(values)
    cuts = np.concatenate(
        [[distinct[0] - 1.0], (distinct[:-1] + distinct[1:]) / 2.0, [distinct[-1] + 1.0]]
    )
    # Lower end: the last cut where "the shift is at most this" is rejected; the value after it.
    if p_greater(float(cuts[0])) >= a:
        low = -math.inf
    else:
        lo, hi = 0, cuts.size - 1  # rejected at lo, not at hi (p_greater(above all) is 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if p_greater(float(cuts[mid])) < a else (lo, mid)
        low = float(distinct[lo])
    if p_less(float(cuts[-1])) >= a:
        high = math.inf
    else:
        lo, hi = 0, cuts.size - 1  # not rejected at lo (p_less(below all) is 1), rejected at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if p_less(float(cuts[mid])) < a else (mid, hi)
        high = float(distinct[hi - 1])
    return low, high


def paired_interval(d: Values, a: float) -> RatioInterval:
    """The median ratio of paired rounds and its interval, each end a one-sided test at ``a``.

    ``d`` are the rounds' log-ratios (`log_ratios`). The interval's low end is above a
    factor exactly when ``margin_p_values(d, log(factor)).above`` is below ``a`` (the tests
    check that they agree), so the report's interval and the verdict never disagree.
    """
    rounds = _as_array(d, "rounds")
    walsh = _walsh_averages(rounds)
    low, high = _inverted(
        walsh,
        lambda s: float(signed_rank_p(rounds, s, "greater")),
        lambda s: float(signed_rank_p(rounds, s, "less")),
        a,
    )
    return RatioInterval(math.exp(float(np.median(walsh))), math.exp(low), math.exp(high))


# -- unpaired samples: Mann-Whitney --------------------------------------------------------


def _mann_whitney_method(x: Floats, y: Floats) -> str:
    """``exact`` for small samples without ties, else ``asymptotic`` (with the tie correction)."""
    if x.size * y.size > EXACT_MAX_PAIRS:
        return "asymptotic"
    return "exact" if np.unique(np.concatenate([x, y])).size == x.size + y.size else "asymptotic"


def mann_whitney_p(first: Values, second: Values, alternative: str) -> float:
    """P-value of the Mann-Whitney U test that ``first`` and ``second`` share a distribution.

    ``greater``: small when ``first`` tends to be larger; ``less``; ``two-sided``. What
    ``scipy.stats.mannwhitneyu(first, second, alternative=..., method=_mann_whitney_method(...))``
    gives (continuity-corrected, tie-corrected; `tests/test_compare_stats.py` checks that they
    are equal), computed here: a comparison with the stored baseline asks for it at each step
    of its interval's search, and importing ``scipy.stats`` costs ~1 s.
    """
    x, y = _as_array(first, "first"), _as_array(second, "second")
    if np.all(x == x[0]) and np.all(y == x[0]):  # every value the same: nothing to tell apart
        return 1.0
    _check_alternative(alternative)
    n1, n2 = x.size, y.size
    ranks, ties = _average_ranks(np.concatenate([x, y]))
    u1 = float(np.sum(ranks[:n1])) - n1 * (n1 + 1) / 2.0
    u2 = n1 * n2 - u1
    u, sides = {"greater": (u1, 1), "less": (u2, 1)}.get(alternative, (max(u1, u2), 2))
    if _mann_whitney_method(x, y) == "exact":
        cumulative = _mann_whitney_cdf(min(n1, n2), max(n1, n2))  # P(U <= k)
        p = float(_exact_p(cumulative, u, "greater"))  # P(U >= u)
    else:
        n = n1 + n2
        spread = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))))
        p = float(_normal_sf((u - n1 * n2 / 2.0 - 0.5) / spread))
    return min(max(p * sides, 0.0), 1.0)


@functools.cache
def _mann_whitney_cdf(m: int, n: int) -> Floats:
    """P(U <= k) for samples of m and n values without ties: how many of the C(m+n, m)
    orderings give each U, by U's recurrence over the largest value's sample."""
    table: dict[tuple[int, int], Floats] = {}
    for i in range(m + 1):
        for j in range(n + 1):
            if i == 0 or j == 0:
                table[i, j] = np.ones(1, dtype=np.float64)
                continue
            # The largest value is the first sample's (U grows by j) or the second's.
            counts = np.zeros(i * j + 1, dtype=np.float64)
            first, second = table[i - 1, j], table[i, j - 1]
            counts[j : j + first.size] += first
            counts[: second.size] += second
            table[i, j] = counts
    counts = table[m, n]
    return np.asarray(np.cumsum(counts) / counts.sum(), dtype=np.float64)


def unpaired_interval(base: Values, head: Values, a: float) -> RatioInterval:
    """The ratio head/base of two unpaired samples: Hodges-Lehmann shift of log-times, Moses.

    Each end of the interval is a one-sided Mann-Whitney test at level ``a``.
    """
    b, h = _log_times(base, "base"), _log_times(head, "head")
    differences = np.sort(np.subtract.outer(h, b).ravel())
    low, high = _inverted(
        differences,
        lambda s: mann_whitney_p(h - s, b, "greater"),
        lambda s: mann_whitney_p(h - s, b, "less"),
        a,
    )
    return RatioInterval(math.exp(float(np.median(differences))), math.exp(low), math.exp(high))
