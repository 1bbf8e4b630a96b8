"""Drift: a figure that grew beyond the policy's bound over a window of runs, no report failing.

``transfer-gate history --check`` (docs/history.md, "Drift"). Each region is read over the
newest ``drift.window`` runs that hold it, and only over those of its newest machine: a time,
and even XLA's counts, say nothing across machines or JAX versions.

- FLOPs, bytes accessed and peak memory are XLA's counts, not samples: they are compared
  exactly, the newest against the window's first.
- Step time is noisy: the medians of the window's first ``drift.runs`` runs and of its
  newest ``drift.runs`` are compared with the Mann-Whitney rank test (`gate.compare.stats`),
  one-sided, shifted by the bound: it drifted when the newest are slower than the first by
  more than the bound at level `ALPHA`. A run's median is the unit, not its timed runs: runs
  of one job share the machine's state, so their samples are not independent of each other.

A region with too few runs on its machine is said to be unchecked, never passed in silence.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gate.compare.stats import mann_whitney_p
from gate.policy.model import DriftRule
from gate.report.history_series import History, Point, RegionSeries, newest_machine
from gate.text import counted

# The rank test's level. Its null hypothesis is already shifted by the bound (the newest runs
# divided by it), so a false alarm needs noise that slows the newest runs by more than the bound,
# not merely some noise; and with 5 runs a side the exact test's smallest p is 1/252 (0.004).
ALPHA = 0.05
# The commits a message names as where a figure rose most.
RISES_SHOWN = 3


@dataclass(frozen=True)
class Rise:
    """A step up between two neighbouring runs: the later one's commit and the ratio."""

    commit: str
    ratio: float


@dataclass(frozen=True)
class Drift:
    """A figure of a region that grew beyond its bound over the window."""

    classname: str
    figure: str  # "step time", "flops", ...
    ratio: float
    bound: float
    first_commit: str
    last_commit: str
    runs: int  # the runs of the window on that machine
    p_value: float | None  # the rank test's, for step time
    rises: tuple[Rise, ...]

    def message(self) -> str:
        """``p.step: step time grew x1.32 over 30 runs (3f2a9c1..8e1b2d4), beyond x1.25 ...``."""
        test = "" if self.p_value is None else f", rank test p={self.p_value:.3g}"
        rises = ", ".join(f"{r.commit[:7]} (x{r.ratio:.2f})" for r in self.rises)
        grew = "grew from 0" if math.isinf(self.ratio) else f"grew x{self.ratio:.2f}"
        return (
            f"{self.classname}: {self.figure} {grew} over {counted(self.runs, 'run')} "
            f"({self.first_commit[:7]}..{self.last_commit[:7]}), beyond the drift bound "
            f"x{self.bound:g}{test}; it rose most at {rises or 'no single commit'}"
        )


@dataclass(frozen=True)
class Unchecked:
    """A figure the window could not judge, and why."""

    classname: str
    figure: str
    why: str

    def message(self) -> str:
        return f"{self.classname}: {self.figure}: {self.why}"


@dataclass(frozen=True)
class DriftResult:
    drifts: tuple[Drift, ...]
    unchecked: tuple[Unchecked, ...]
    regions: int


_EXACT: tuple[tuple[str, Callable[[Point], float | None], Callable[[DriftRule], float]], ...] = (
    ("flops", lambda p: p.flops, lambda r: r.max_flops),
    ("bytes accessed", lambda p: p.bytes_accessed, lambda r: r.max_bytes_accessed),
    (
        "peak memory",
        lambda p: float(p.peak_bytes) if p.peak_bytes is not None else None,
        lambda r: r.max_peak_memory,
    ),
)


def check_drift(history: History, rules: Mapping[str, DriftRule]) -> DriftResult:
    """Every region's drift over its window; ``rules`` by the region's policy path."""
    drifts: list[Drift] = []
    unchecked: list[Unchecked] = []
    for region in history.regions:
        rule = rules[region.policy]
        window = _window(region, rule)
        found, skipped = _time_drift(region.classname, window, rule, history)
        drifts += found
        unchecked += skipped
        for figure, value, bound in _EXACT:
            drifts += _exact_drift(region.classname, figure, window, value, bound(rule), history)
    return DriftResult(tuple(drifts), tuple(unchecked), len(history.regions))


def _window(region: RegionSeries, rule: DriftRule) -> list[Point]:
    """The region's newest ``window`` points, those of its newest machine."""
    newest = region.points[-rule.window :]
    machine = newest_machine(newest)
    return [p for p in newest if p.machine == machine]


def _exact_drift(  # noqa: PLR0917  # one figure's parts, each named at the call
    classname: str,
    figure: str,
    window: Sequence[Point],
    value: Callable[[Point], float | None],
    bound: float,
    history: History,
) -> list[Drift]:
    measured = [(p, v) for p in window if (v := value(p)) is not None]
    if len(measured) < 2:
        return []  # never measured here (peak memory on a CPU, say): nothing to drift
    (first, a), (last, b) = measured[0], measured[-1]
    ratio = _ratio(b, a)
    if ratio <= bound:
        return []
    return [
        Drift(
            classname=classname,
            figure=figure,
            ratio=ratio,
            bound=bound,
            first_commit=history.runs[first.run].commit,
            last_commit=history.runs[last.run].commit,
            runs=len(measured),
            p_value=None,
            rises=_rises(measured, history),
        )
    ]


def _time_drift(
    classname: str, window: Sequence[Point], rule: DriftRule, history: History
) -> tuple[list[Drift], list[Unchecked]]:
    timed = [(p, p.median_s) for p in window if p.median_s is not None and p.median_s > 0]
    if len(timed) < 2 * rule.runs:
        why = (
            f"{counted(len(timed), 'timed run')} on its newest machine in the window, the rank "
            f"test needs {2 * rule.runs} (drift.runs {rule.runs} at each end)"
        )
        return [], [Unchecked(classname, "step time", why)]
    before = [m for _, m in timed[: rule.runs]]
    after = [m for _, m in timed[-rule.runs :]]
    ratio = statistics.median(after) / statistics.median(before)
    # Slower than the bound allows: the newest, divided by the bound, still rank above the first.
    p = mann_whitney_p([m / rule.max_step_time for m in after], before, "greater")
    if p >= ALPHA or ratio <= rule.max_step_time:
        return [], []
    drift = Drift(
        classname=classname,
        figure="step time",
        ratio=ratio,
        bound=rule.max_step_time,
        first_commit=history.runs[timed[0][0].run].commit,
        last_commit=history.runs[timed[-1][0].run].commit,
        runs=len(timed),
        p_value=p,
        rises=_rises(timed, history),
    )
    return [drift], []


def _ratio(new: float, old: float) -> float:
    if old > 0:
        return new / old
    return math.inf if new > 0 else 1.0


def _rises(measured: Sequence[tuple[Point, float]], history: History) -> tuple[Rise, ...]:
    """The largest steps up between neighbouring runs, largest first."""
    steps = [
        Rise(history.runs[point.run].commit, _ratio(value, before))
        for (_, before), (point, value) in itertools.pairwise(measured)
    ]
    # Rounded: equal steps keep their commit order, whatever the floats' last digits say.
    rising = sorted((r for r in steps if r.ratio > 1), key=lambda r: -round(r.ratio, 6))
    return tuple(rising[:RISES_SHOWN])
