"""The JSON report's step times: every raw sample of both sides, and the gate's verdict on them.

Documented in docs/reports.md ("Against the base and the stored baseline"). Fields are only
added, as the rest of the report's version 1. Records of the report's schema
(`gate.report.json_report`).
"""

from __future__ import annotations

from gate.documents import Record
from gate.results.comparison import TimingComparison, TimingVerdict


class TimingDoc(Record, frozen=True, kw_only=True):
    """Every raw sample of both sides, and what the gate concluded from them."""

    against: str
    what: str
    verdict: TimingVerdict
    failing: bool
    headline: str
    base_median_s: float
    head_median_s: float
    ratio: float | None
    # Small samples give an unbounded interval (0, inf): null, since JSON has no infinity.
    ratio_low: float | None
    ratio_high: float | None
    p_value: float | None
    max_slowdown: float
    # True: paired rounds, the trees' workers side by side (their ratios judged); false: two
    # samples measured apart (the stored baseline, or trees that ran apart), compared unpaired.
    paired: bool
    rounds: int
    base_samples: tuple[float, ...]
    head_samples: tuple[float, ...]

    @classmethod
    def of(cls, timing: TimingComparison | None) -> TimingDoc | None:
        if timing is None:
            return None
        return cls(
            against=timing.against,
            what=timing.what,
            verdict=timing.verdict,
            failing=timing.failing,
            headline=timing.headline(),
            base_median_s=timing.base_median_s,
            head_median_s=timing.head_median_s,
            ratio=timing.ratio,
            ratio_low=timing.ratio_low,
            ratio_high=timing.ratio_high,
            p_value=timing.p_value,
            max_slowdown=timing.max_slowdown,
            paired=timing.paired,
            rounds=timing.rounds,
            base_samples=timing.base_samples,
            head_samples=timing.head_samples,
        )
