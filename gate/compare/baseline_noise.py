"""Whether stored step times are tight enough to bound the comparisons a later run makes with them.

A run compares its samples with the stored ones (`gate.compare.timing.compare_unpaired`):
"unchanged" needs the ratio's interval inside ``1/f .. f`` for the region's
``timing.baseline_max_slowdown`` ``f``. That interval has to hold the run's own noise, the
stored samples' and the drift between the two jobs (another runner of the same kind, another
day). So the stored samples may spend at most half of that margin (on the log scale): the
distribution-free confidence interval of their median (two order statistics, at
`ALPHA_PASS` each side) must lie within ``f^-1/2 .. f^1/2`` of the median. Samples recorded
on a busy machine spread wider (some runs at the quiet speed, some far slower): a later run
of the same code is then "inconclusive", and a slower one too. More samples narrow the
interval, so `transfer-gate baseline` times such a region again, pooling the samples, and
says in one line where that does not tighten them (`gate.results.timing_baseline`).
"""

from __future__ import annotations

import math

import numpy as np

from gate.compare.stats import Values
from gate.compare.timing import ALPHA_PASS
from gate.results.timing_baseline import TimingNoise

# The share of the comparison's margin (log f) the stored samples' own spread may take.
NOISE_SHARE = 0.5


def median_interval(samples: Values, a: float) -> tuple[float, float] | None:
    """The ends of the median's confidence interval, as ratios to the median (each end at
    level ``a``); None when the samples are too few for one."""
    ordered = np.sort(np.asarray(samples, dtype=np.float64))
    n = ordered.size
    k = _order_statistic(n, a)
    median = float(np.median(ordered))
    if k < 1 or median <= 0:
        return None
    return float(ordered[k - 1]) / median, float(ordered[n - k]) / median


def _order_statistic(n: int, a: float) -> int:
    """The largest k with P(Bin(n, ½) < k) <= a: the k-th smallest of n samples is below
    their median unless k or more fall above it. Summed exactly (n is a few hundred at most)
    rather than through ``scipy.stats``, whose import costs every `run` ~1 s of CPU at start."""
    below, k, total = 0, 0, 2**n
    while k < n:
        below += math.comb(n, k)  # now P(Bin(n, ½) <= k) * 2**n
        if below > a * total:
            break
        k += 1
    return k


def fewest_samples() -> int:
    """The fewest samples whose median has an interval at all: the smallest and the largest
    bound it when all of them falling on one side of it is rarer than `ALPHA_PASS`."""
    return math.ceil(math.log2(1 / ALPHA_PASS))


def noise(samples: Values, max_slowdown: float) -> TimingNoise | None:
    """None when ``samples`` are tight enough to bound a comparison with ``max_slowdown``;
    else how far they spread, for the file and the line that says so."""
    bound = math.exp(NOISE_SHARE * math.log(max_slowdown))
    interval = median_interval(samples, ALPHA_PASS)
    if interval is not None and 1 / bound <= interval[0] and interval[1] <= bound:
        return None
    return TimingNoise(
        low=None if interval is None else interval[0],
        high=None if interval is None else interval[1],
        bound=bound,
        max_slowdown=max_slowdown,
        samples=len(samples),
    )
