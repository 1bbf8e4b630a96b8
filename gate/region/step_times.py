"""Summary statistics of step times.

Small GPU steps are noisy: one step of about 0.3 ms was measured anywhere
from 0.22 to 3.6 ms over its runs, and a single slow run moves the mean far
more than the median. So the report leads with robust figures: median and
the interquartile range, never the mean. The samples themselves follow JAX's
advice on benchmarking (compile first, block on the outputs):
https://docs.jax.dev/en/latest/201/profiling.html
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gate.results.records import TimingStats


def summarize(samples_s: Sequence[float]) -> TimingStats:
    """Min, quartiles, median and max of ``samples_s`` (at least one sample)."""
    if not samples_s:
        raise ValueError("no timing samples")
    data = np.asarray(samples_s, dtype=np.float64)
    p25, median, p75 = (float(v) for v in np.percentile(data, [25, 50, 75]))
    return TimingStats(
        repeats=len(samples_s),
        min_s=float(data.min()),
        p25_s=p25,
        median_s=median,
        p75_s=p75,
        max_s=float(data.max()),
    )
