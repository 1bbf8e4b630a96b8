"""The sequential timing rule's error rates and rounds, simulated: the figures in docs/compare.md.

    .venv/bin/python -m benchmarks sequential_rule [--regions 20000] [--seed 0]

Runs the gate's own rule (`gate.compare.timing.first_decisions`: the same signed-rank tests
at the same looks, with the default ``timing:`` settings) on many simulated regions at once,
seeded, nothing timed. Each region's rounds are log-ratios head/base drawn from:

- ``quiet``: normal noise of sd 0.10 (a round's ratio varies by ~10%, as on a quiet 2-core
  machine), and sd 0.20 (twice that);
- ``lottery``: the busy neighbour at its worst, unpaired: a 0.3 ms step, each run delayed by
  2-5 ms with probability 0.3, independently in the two trees.

For true ratios of 1 (unchanged), 1.1 (the allowed factor itself: the worst case for both
errors), 1.25 and 1.3, it prints how many regions were called slower, unchanged, faster and
inconclusive, and the median number of rounds taken; then, for runs of 20 unchanged regions,
how many runs had a false failure.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np

from gate.compare.timing import (
    ALPHA_FAIL,
    ALPHA_PASS,
    VERDICT_CODES,
    first_decisions,
    look_levels,
    looks,
)
from gate.policy.model import TimingRule

Draw = Callable[[int], np.ndarray]


def normal(rng: np.random.Generator, regions: int, ratio: float, sd: float) -> Draw:
    return lambda n: math.log(ratio) + rng.normal(0, sd, (regions, n))


def lottery(rng: np.random.Generator, regions: int, ratio: float) -> Draw:
    def run(n: int, factor: float) -> np.ndarray:
        delay = (rng.random((regions, n)) < 0.3) * rng.uniform(2e-3, 5e-3, (regions, n))
        return 0.3e-3 * factor * rng.lognormal(0, 0.05, (regions, n)) + delay

    return lambda n: np.log(run(n, ratio) / run(n, 1.0))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rule = TimingRule()
    schedule = looks(rule.rounds, rule.max_rounds)
    level = look_levels(rule.rounds, rule.max_rounds)
    print(
        f"looks at {', '.join(map(str, schedule))} rounds; one-sided tests at "
        f"{level.fail:.2g} for slower (ALPHA_FAIL {ALPHA_FAIL:g} / {len(schedule)} looks), "
        f"{level.passing:.2g} for unchanged and faster (ALPHA_PASS {ALPHA_PASS:g} / "
        f"{len(schedule)})\n"
    )
    print("| noise | true ratio | slower | unchanged | faster | inconclusive | median rounds |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(args.seed)
    n = args.regions
    cases: list[tuple[str, float, Draw]] = []
    for ratio in (1.0, 1.1, 1.25, 1.3):
        cases.append(("quiet, sd 0.10", ratio, normal(rng, n, ratio, 0.10)))
        cases.append(("quiet, sd 0.20", ratio, normal(rng, n, ratio, 0.20)))
        cases.append(("lottery", ratio, lottery(rng, n, ratio)))
    for name, ratio, draw in cases:
        codes, used = first_decisions(draw, schedule, rule.max_slowdown, level)
        counts = [int(np.sum(codes == VERDICT_CODES.index(v))) for v in VERDICT_CODES]
        inconclusive, slower, faster, unchanged = counts
        print(
            f"| {name} | {ratio:g} | {slower} | {unchanged} | {faster} | {inconclusive} "
            f"| {np.median(used):g} |",
            flush=True,
        )
    runs = n // 20
    print(f"\nRuns of 20 unchanged regions ({runs} runs): runs with any region called slower")
    for name, draw in (
        ("quiet, sd 0.10", normal(rng, runs * 20, 1.0, 0.10)),
        ("quiet, sd 0.20", normal(rng, runs * 20, 1.0, 0.20)),
        ("lottery", lottery(rng, runs * 20, 1.0)),
    ):
        codes, _ = first_decisions(draw, schedule, rule.max_slowdown, level)
        failed = (codes.reshape(runs, 20) == VERDICT_CODES.index("slower")).any(axis=1)
        print(f"- {name}: {int(failed.sum())} of {runs}")
