"""The verdict on step times, and the sequential rule's error rates, simulated with seeds.

The simulations run the gate's own rule (`first_decisions`: the same tests at the same looks)
on many seeded regions at once; nothing is timed. The figures in docs/compare.md come from
the same draws (`benchmarks/sequential_rule.py` prints them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest

from gate.compare.stats import Floats, paired_interval
from gate.compare.timing import (
    ALPHA_FAIL,
    ALPHA_PASS,
    VERDICT_CODES,
    compare_paired,
    compare_unpaired,
    decided,
    first_decisions,
    look_levels,
    looks,
    paired_verdict,
)
from gate.policy.model import TimingAction, TimingRule
from gate.report.comparison_text import timing_line, verdict_text
from gate.results.comparison import TimingVerdict

RULE = TimingRule()
SCHEDULE = looks(RULE.rounds, RULE.max_rounds)
LEVELS = look_levels(RULE.rounds, RULE.max_rounds)
SLOWER, FASTER, UNCHANGED = (VERDICT_CODES.index(v) for v in ("slower", "faster", "unchanged"))


def lognormal(seed: int, median_s: float, noise: float, n: int) -> list[float]:
    return list(np.random.default_rng(seed).lognormal(np.log(median_s), noise, n))


def paired(
    base_s: float, head_s: float, noise: float, n: int, seed: int = 0
) -> tuple[list[float], list[float]]:
    """``n`` rounds: each round's load (shared by its two runs) and each run's own noise."""
    rng = np.random.default_rng(seed)
    shared = rng.lognormal(0, 0.3, n)
    return (
        list(base_s * shared * rng.lognormal(0, noise, n)),
        list(head_s * shared * rng.lognormal(0, noise, n)),
    )


def compare(base: list[float], head: list[float], **kwargs: object):  # type: ignore[no-untyped-def]
    options: dict[str, object] = {
        "max_slowdown": 1.10,
        "on_regression": TimingAction.FAIL,
        "levels": LEVELS,
    }
    options.update(kwargs)
    return compare_paired(base, head, **options)  # type: ignore[arg-type]


def test_the_looks_grow_by_a_quarter_and_end_at_the_most_rounds() -> None:
    assert looks(16, 200) == (16, 20, 25, 32, 40, 50, 63, 79, 99, 124, 155, 194, 200)
    assert looks(3, 5) == (3, 4, 5)
    assert looks(7, 7) == (7,)
    assert look_levels(16, 200).fail == pytest.approx(ALPHA_FAIL / 13)
    assert look_levels(16, 200).passing == pytest.approx(ALPHA_PASS / 13)
    with pytest.raises(ValueError, match="rounds <= max_rounds"):
        looks(10, 5)


def test_the_default_first_look_can_decide() -> None:
    # At a look's failing level, 16 rounds all past the factor are just enough to reject.
    assert 2.0**-RULE.rounds < LEVELS.fail


def test_twice_as_slow_is_slower_and_fails() -> None:
    result = compare(*paired(412e-6, 824e-6, 0.05, 16))
    assert result.verdict is TimingVerdict.SLOWER
    assert result.failing
    assert decided(result)
    assert result.ratio == pytest.approx(2.0, rel=0.05)
    assert result.ratio_low > 1.1
    assert (result.paired, result.rounds) == (True, 16)


def test_slower_under_warn_is_reported_not_failing() -> None:
    result = compare(*paired(1e-3, 2e-3, 0.05, 20), on_regression=TimingAction.WARN)
    assert result.verdict is TimingVerdict.SLOWER
    assert not result.failing


def test_twice_as_fast_is_faster_and_passes() -> None:
    result = compare(*paired(2e-3, 1e-3, 0.02, 20, seed=1))
    assert result.verdict is TimingVerdict.FASTER
    assert not result.failing
    assert re.match(
        r"(1\.9[0-9]|2\.[01][0-9])x faster \(0\.[0-9]{2}x, interval [0-9.]+-[0-9.]+x\): "
        r"median [0-9.]+ ms → [0-9.]+ ms",
        result.headline(),
    )


def test_load_shared_by_a_round_cancels() -> None:
    # Every round's load varies by 30% (shared by its two runs), each run by 3%: the rounds'
    # ratios see only the 3%.
    result = compare(*paired(412e-6, 412e-6, 0.03, 40, seed=2))
    assert result.verdict is TimingVerdict.UNCHANGED
    assert 1 / 1.1 < result.ratio_low < result.ratio_high < 1.1


def test_few_noisy_rounds_are_inconclusive_with_the_reason() -> None:
    result = compare(*paired(1e-3, 1.1e-3, 0.3, 16, seed=3))
    assert result.verdict is TimingVerdict.INCONCLUSIVE
    assert not result.failing
    assert not decided(result)
    assert re.search(r"interval [0-9.]+-[0-9.]+x straddles 1.1x", result.headline())


def test_could_not_tell_fails_only_where_the_policy_says_on_inconclusive_fail() -> None:
    rounds = paired(1e-3, 1.1e-3, 0.3, 16, seed=3)
    blocking = compare(*rounds, on_inconclusive=TimingAction.FAIL)
    assert blocking.verdict is TimingVerdict.INCONCLUSIVE
    assert blocking.failing
    assert timing_line(blocking).endswith("(fails: timing.on_inconclusive is fail)")
    assert "fails (timing.on_inconclusive: fail)" in verdict_text(blocking)
    warned = compare(*rounds)  # the default, warn
    assert not warned.failing
    assert timing_line(warned).endswith("(a warning, not a pass)")
    # A decided verdict is untouched by the key.
    unchanged = compare(
        *paired(412e-6, 412e-6, 0.03, 40, seed=2), on_inconclusive=TimingAction.FAIL
    )
    assert unchanged.verdict is TimingVerdict.UNCHANGED
    assert not unchanged.failing
    unpaired = compare_unpaired(
        lognormal(5, 1e-3, 0.5, 4),
        lognormal(6, 1.1e-3, 0.5, 4),
        max_slowdown=1.5,
        on_regression=TimingAction.FAIL,
        on_inconclusive=TimingAction.FAIL,
        against="baseline",
    )
    assert unpaired.verdict is TimingVerdict.INCONCLUSIVE
    assert unpaired.failing


def test_too_few_rounds_say_so() -> None:
    result = compare(*paired(1e-3, 2e-3, 0.01, 5))
    assert result.verdict is TimingVerdict.INCONCLUSIVE
    assert "too few samples" in result.headline()


def test_the_headline_reads_rounds_when_paired_and_samples_when_not() -> None:
    result = compare(*paired(412e-6, 545e-6, 0.05, 20, seed=4), what="step")
    pattern = (
        r"1\.[0-9]{2}x slower \(interval 1\.[0-9]{2}-1\.[0-9]{2}x, beyond 1\.1x\): "
        r"median [0-9]{3} µs → [0-9]{3} µs, 20 paired rounds on one core"
    )
    assert re.fullmatch(pattern, result.headline()), result.headline()
    assert result.test.startswith("Wilcoxon signed-rank")
    unpaired = compare_unpaired(
        lognormal(1, 1e-3, 0.05, 30),
        lognormal(2, 2e-3, 0.05, 20),
        max_slowdown=1.5,
        on_regression=TimingAction.FAIL,
        against="baseline",
    )
    assert unpaired.headline().endswith("30+20 samples")
    assert unpaired.test.startswith("Mann-Whitney")
    assert not unpaired.paired
    assert unpaired.level == pytest.approx(1 - 2 * ALPHA_PASS)


@pytest.mark.parametrize("seed", range(30))
def test_the_verdict_is_the_intervals(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base, head = paired(1e-3, 1e-3 * rng.uniform(0.8, 1.3), rng.uniform(0.02, 0.2), 40, seed)
    result = compare(base, head)
    low, high = result.ratio_low, result.ratio_high  # at the passing level
    failing_low = paired_interval(np.log(head) - np.log(base), LEVELS.fail).low
    expected = (
        TimingVerdict.SLOWER
        if failing_low > 1.1
        else TimingVerdict.FASTER
        if high < 1 / 1.1
        else TimingVerdict.UNCHANGED
        if low > 1 / 1.1 and high < 1.1
        else TimingVerdict.INCONCLUSIVE
    )
    assert result.verdict is expected


def test_a_factor_of_one_fails_any_significant_slowdown_and_never_says_unchanged() -> None:
    result = compare(*paired(1e-3, 1.03e-3, 0.01, 30, seed=5), max_slowdown=1.0)
    assert result.verdict is TimingVerdict.SLOWER
    same = compare(*paired(1e-3, 1e-3, 0.01, 30, seed=6), max_slowdown=1.0)
    assert same.verdict is TimingVerdict.INCONCLUSIVE


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        compare([], [1.0])
    with pytest.raises(ValueError, match="at least 1"):
        compare([1.0], [1.0], max_slowdown=0.9)
    with pytest.raises(ValueError, match="2 base times but 1 head times"):
        compare([1.0, 1.0], [1.0])


def test_against_the_baseline_uses_its_own_wider_factor() -> None:
    result = compare_unpaired(
        lognormal(1, 1e-3, 0.05, 20),
        lognormal(2, 1.3e-3, 0.05, 20),
        max_slowdown=1.5,
        on_regression=TimingAction.FAIL,
        against="baseline",
    )
    # 1.3x is significant but within 1.5x; the interval says so.
    assert result.verdict is TimingVerdict.UNCHANGED
    assert (result.against, result.max_slowdown) == ("baseline", 1.5)
    twice = compare_unpaired(
        lognormal(3, 1e-3, 0.05, 20),
        lognormal(4, 2e-3, 0.05, 20),
        max_slowdown=1.5,
        on_regression=TimingAction.FAIL,
        against="baseline",
    )
    assert twice.verdict is TimingVerdict.SLOWER
    assert twice.failing


# -- the sequential rule, simulated --------------------------------------------------------

Draw = Callable[[int], Floats]


def normal_rounds(seed: int, regions: int, ratio: float, noise: float) -> Draw:
    """Each region's rounds: log-ratios around ``log(ratio)``, normal noise of sd ``noise``."""
    rng = np.random.default_rng(seed)
    return lambda n: math.log(ratio) + rng.normal(0, noise, (regions, n))


def loaded_rounds(seed: int, regions: int, ratio: float) -> Draw:
    """A neighbour's lottery: a 0.3 ms step, each run delayed 2-5 ms with probability 0.3."""
    rng = np.random.default_rng(seed)

    def run(n: int, factor: float) -> Floats:
        delay = (rng.random((regions, n)) < 0.3) * rng.uniform(2e-3, 5e-3, (regions, n))
        return 0.3e-3 * factor * rng.lognormal(0, 0.05, (regions, n)) + delay

    return lambda n: np.log(run(n, ratio) / run(n, 1.0))


def rates(draw: Draw) -> tuple[dict[str, int], float]:
    codes, used = first_decisions(draw, SCHEDULE, RULE.max_slowdown, LEVELS)
    counts = {VERDICT_CODES[k].value: int(np.sum(codes == k)) for k in range(len(VERDICT_CODES))}
    return counts, float(np.median(used))


@pytest.mark.parametrize(
    "draw",
    [normal_rounds(1, 10_000, 1.1, 0.1), loaded_rounds(2, 10_000, 1.1)],
    ids=["quiet", "loaded"],
)
def test_at_the_factor_itself_each_error_stays_under_alpha(draw: Draw) -> None:
    # The worst case for both errors: a change of exactly max_slowdown. The signed-rank test
    # is distribution-free, so the bound holds for the quiet and the loaded noise alike.
    counts, _ = rates(draw)
    assert counts["slower"] <= ALPHA_FAIL * 10_000, counts  # at most 5 of 10,000
    assert counts["unchanged"] <= ALPHA_PASS * 10_000, counts  # at most 100 of 10,000
    assert counts["faster"] == 0


def test_runs_of_20_unchanged_regions_under_load_fail_under_1_percent() -> None:
    counts_per_run = []
    draw = loaded_rounds(3, 20 * 500, 1.0)
    codes, _ = first_decisions(draw, SCHEDULE, RULE.max_slowdown, LEVELS)
    counts_per_run = (codes.reshape(500, 20) == SLOWER).any(axis=1)
    assert int(counts_per_run.sum()) <= 0.01 * 500


def test_quiet_unchanged_regions_are_called_unchanged_within_the_budget() -> None:
    # Round-to-round noise of 10% (sd of the log-ratio), as a quiet 2-core machine gives.
    counts, median_rounds = rates(normal_rounds(4, 2_000, 1.0, 0.1))
    assert counts["unchanged"] >= 0.99 * 2_000, counts
    assert counts["slower"] == 0
    assert median_rounds <= 40


def test_a_quarter_slower_is_caught_quickly_quiet_and_loaded() -> None:
    quiet, quiet_rounds = rates(normal_rounds(5, 2_000, 1.25, 0.15))
    assert quiet["slower"] >= 0.99 * 2_000, quiet
    assert quiet_rounds <= 40
    # Under the lottery (a 10x delay in 30% of runs, unpaired by the rounds) a third of the
    # regions are caught within the budget, the rest left open: never passed as unchanged.
    loaded, _ = rates(loaded_rounds(6, 2_000, 1.3))
    assert loaded["slower"] >= 0.3 * 2_000, loaded
    assert loaded["unchanged"] == 0, loaded
    assert loaded["faster"] == 0, loaded


def test_one_region_is_judged_as_the_simulation_judges_it() -> None:
    d = normal_rounds(7, 1, 1.3, 0.1)(SCHEDULE[-1])
    codes, used = first_decisions(lambda n: d[:, :n], SCHEDULE, 1.1, LEVELS)
    first = next(
        n
        for n in SCHEDULE
        if paired_verdict(d[0, :n], 1.1, LEVELS) is not TimingVerdict.INCONCLUSIVE
    )
    assert (VERDICT_CODES[int(codes[0])], int(used[0])) == (TimingVerdict.SLOWER, first)
