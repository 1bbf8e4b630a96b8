"""A noisy timing is never stored silently: `baseline` times a region again until its median is
pinned tightly enough for the comparisons it will bound; where it cannot, one line says so and
how to re-record it, the file records it, and a run against it says so beside its verdict.

Through the real CLI on a throwaway repo. The steps sleep, so their spread is a property of the
code under test, not of this machine's load: one sleeps the same each run, one alternates
between a short and a 15x longer sleep (a machine busy half the time).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import processes
import pytest
from cli_helpers import make_repo, run_gate

from gate.compare.baseline_noise import fewest_samples, median_interval, noise
from gate.compare.timing import ALPHA_PASS

STEPS = """
import itertools
import time

import jax
import jax.numpy as jnp

_calls = itertools.count()


@jax.jit
def add_one(x):
    return x + 1.0


def setup():
    return (jnp.ones((4,), jnp.float32),)


def steady(x):
    time.sleep(0.05)
    return add_one(x)


def busy(x):
    time.sleep(0.002 if next(_calls) % 2 else 0.03)
    return add_one(x)
"""

POLICY = """
version: 1
defaults: {{warmup: 1, guarded_runs: 1, repeats: {repeats}}}
regions:
  - name: steady
    step: steps:steady
    setup: steps:setup
  - name: busy
    step: steps:busy
    setup: steps:setup
"""

BASELINE = "policies/transfer-gate-baseline.json"


def _repo(tmp_path: Path, repeats: int) -> Path:
    return make_repo(
        tmp_path, {"steps.py": STEPS, "policies/p.yaml": POLICY.format(repeats=repeats)}
    )


def _timing(repo: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((repo / BASELINE).read_text())
    return document["timing"]  # type: ignore[no-any-return]


def test_a_noisy_region_is_timed_again_then_stored_as_noisy_and_a_run_says_so(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, repeats=10)
    made = run_gate(repo, "baseline")
    assert made.returncode == 0, made
    # Timed twice more (the steady region too, if this machine's load spread its 10 runs),
    # the samples pooled.
    again = re.findall(
        r"too noisy to bound a comparison; timing (?:it|them) again \((\d) of 2\)", made.stderr
    )
    assert again == ["1", "2"], made
    command = f"transfer-gate baseline --baseline {BASELINE} --region p.busy --timing-only"
    [warning] = [line for line in made.stdout.splitlines() if "warning" in line]
    assert warning.startswith("  warning: p.busy: step times noisy, their median's interval is ")
    assert "wider than the 0.82-1.22x a 1.5x bound leaves it (30 samples)" in warning
    assert warning.endswith(
        f"a run against them says so; re-record them on a quieter machine with `{command}`"
    )
    timing = _timing(repo)
    assert "noisy" not in timing["p.steady"]
    noisy = timing["p.busy"]["noisy"]
    assert len(timing["p.busy"]["samples"]) == noisy["samples"] == 30
    assert noisy["max_slowdown"] == 1.5
    assert noisy["low"] < 1 / noisy["bound"] or noisy["high"] > noisy["bound"]
    # A run against it: the verdict, and beside it that the baseline is noisy, with the fix.
    ran = run_gate(repo, "run", "--json", "reports/run.json")
    assert ran.returncode in (0, 1), ran
    [line] = [line for line in ran.stdout.splitlines() if "the baseline is noisy" in line]
    assert line.startswith("  timing vs baseline: "), ran.stdout
    assert "the baseline is noisy: their median's interval is " in line
    assert f"re-record it on a quieter machine with `{command}`" in line
    report = json.loads((repo / "reports/run.json").read_text())
    headlines = json.dumps(report)
    assert headlines.count("the baseline is noisy") >= 1
    steady_said = [line for line in ran.stdout.splitlines() if "steady" in line and "noisy" in line]
    assert steady_said == []


def test_too_few_timed_runs_are_not_timed_again_and_the_fix_is_more_repeats(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, repeats=2)
    made = run_gate(repo, "baseline")
    assert made.returncode == 0, made
    assert "timing it again" not in made.stderr
    assert "timing them again" not in made.stderr
    warnings = [line for line in made.stdout.splitlines() if "warning" in line]
    assert len(warnings) == 2, made.stdout  # 2 samples bound nothing, steady or not
    assert all(
        "2 samples are too few to put their median within the 0.82-1.22x a 1.5x bound "
        "leaves it; a run against them says so; raise the region's repeats and re-record "
        "them with `transfer-gate baseline" in line
        for line in warnings
    )
    assert _timing(repo)["p.steady"]["noisy"]["low"] is None


# --- the rule itself --------------------------------------------------------------------------


def test_the_median_interval_is_two_order_statistics_and_narrows_with_more_samples() -> None:
    assert fewest_samples() == 7
    assert median_interval(list(range(1, 7)), ALPHA_PASS) is None
    assert median_interval(list(range(1, 8)), ALPHA_PASS) == (0.25, 1.75)  # min and max
    twenty = median_interval(list(range(1, 21)), ALPHA_PASS)
    assert twenty == pytest.approx((5 / 10.5, 16 / 10.5))
    rng = np.random.default_rng(0)
    spread = 0.4  # log-normal: its quartiles 1.7x apart
    few = noise(list(np.exp(spread * rng.standard_normal(20))), 1.5)
    many = noise(list(np.exp(spread * rng.standard_normal(200))), 1.5)
    assert few is not None
    assert many is None


@pytest.mark.parametrize("a", [ALPHA_PASS, 0.01, 0.025, 0.1])
def test_the_order_statistic_is_scipys_binomial_quantile(a: float) -> None:
    """The exact sum the gate uses gives the order statistic scipy's binomial gives."""
    from scipy.stats import binom

    for n in range(1, 301):
        k = int(binom.ppf(a, n, 0.5))
        while k > 0 and binom.cdf(k - 1, n, 0.5) > a:
            k -= 1
        ordered = list(range(1, n + 1))
        interval = median_interval(ordered, a)
        median = float(np.median(ordered))
        expected = None if k < 1 else (k / median, (n + 1 - k) / median)
        assert interval == (None if expected is None else pytest.approx(expected)), n


def test_a_run_does_not_import_scipy() -> None:
    """scipy.stats costs ~1 s of CPU to import: a `run` without a comparison must not pay it
    (the CLI imports every command's module at start)."""
    code = "import sys, gate.cli.main; print('scipy' in sys.modules)"
    done = processes.run([sys.executable, "-c", code], timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


@pytest.mark.parametrize(("busy_share", "noisy"), [(0.0, False), (0.3, True), (0.5, True)])
def test_a_machine_busy_part_of_the_time_makes_the_samples_noisy(
    busy_share: float, noisy: bool
) -> None:
    rng = np.random.default_rng(1)
    n = 20
    slow = rng.random(n) < busy_share
    samples = np.where(slow, 418e-6, 271e-6) * (1 + 0.03 * rng.standard_normal(n))
    if busy_share:
        samples[:2] = 418e-6  # at least some runs were slowed
    assert (noise(list(samples), 1.5) is not None) is noisy
