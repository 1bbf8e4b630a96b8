"""The stored timing baseline: `baseline` records step times, `run` compares with them.

Through the real CLI on a throwaway repo. The step sleeps for ``STEP_SLEEP_S``
seconds (an environment variable the workers inherit), so "3x slower" is a
property of the code under test, not of this machine's load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import make_repo, run_gate
from result_samples import region as sample_region
from result_samples import region_error, run_of

import gate.cli.run
from gate.compare.stored_baseline import compare_with_baseline
from gate.levels import GuardLevel, GuardSpec
from gate.policy.model import CallableRef, Checks, CollectiveRule, CostRule, Region, TimingRule
from gate.results.baseline import FORMAT, BaselineError, load_baseline_file
from gate.results.collectives import Communication
from gate.results.comparison import TimingVerdict
from gate.results.costs import FunctionCost, StepCost, not_measured, step_cost
from gate.results.records import RegionResult, RunResult
from gate.results.timing_baseline import (
    NO_REGION_TIMING,
    NO_TIMING,
    read_timing,
    retimed,
    timing_document,
)

STEPS = """
import os
import time

import jax
import jax.numpy as jnp


@jax.jit
def add_one(x):
    return x + 1.0


def setup():
    return (jnp.ones((4,), jnp.float32),)


def step(x):
    time.sleep(float(os.environ.get("STEP_SLEEP_S", "0.004")))
    return add_one(x)


def other(x):
    return add_one(x)
"""

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 15}
regions:
  - name: sleepy
    step: steps:step
    setup: steps:setup
  - name: quick
    step: steps:other
    setup: steps:setup
    timing: off
"""

BASELINE = "policies/transfer-gate-baseline.json"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": POLICY})


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[RunResult]:
    """Every run result `transfer-gate run` hands its reporters, in this (the gate's) process."""
    runs: list[RunResult] = []
    original = gate.cli.run.write_reports

    def capture(run: RunResult, *args: Any, **kwargs: Any) -> None:
        runs.append(run)
        original(run, *args, **kwargs)

    monkeypatch.setattr(gate.cli.run, "write_reports", capture)
    return runs


def region(runs: list[RunResult], name: str) -> RegionResult:
    [found] = [r for r in runs[-1].regions if r.name == name]
    return found


def stored(repo: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((repo / BASELINE).read_text())
    return document


def test_baseline_records_each_regions_timing_by_device(repo: Path) -> None:
    made = run_gate(repo, "baseline")
    assert made.returncode == 0, made
    assert "step times of 2 regions" in made.stdout
    document = stored(repo)
    assert document["version"] == 3
    sleepy = document["timing"]["p.sleepy"]
    assert len(sleepy["samples"]) == 15
    assert sleepy["p25_s"] <= sleepy["median_s"] <= sleepy["p75_s"]
    assert 0.004 <= sleepy["median_s"] < 0.05
    assert sleepy["device"].startswith("cpu (cpu x1), jax ")
    assert sleepy["device"].endswith(", transfer-gate 0.1.0")
    # A region of its own: re-baselining one keeps the other's timing.
    before = document["timing"]["p.quick"]
    one = run_gate(repo, "baseline", "--region", "sleepy")
    assert one.returncode == 0, one
    assert "0 accepted transfer lines in 0 of 1 region run" in one.stdout
    assert "step times of 1 region\n" in one.stdout
    after = stored(repo)["timing"]
    assert after["p.quick"] == before
    assert after["p.sleepy"]["samples"] != sleepy["samples"]


def test_a_step_made_3x_slower_fails_against_the_stored_baseline(
    repo: Path, written: list[RunResult]
) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    slow = run_gate(repo, "run", env={"STEP_SLEEP_S": "0.012"})
    assert slow.returncode == 1, slow
    comparison = region(written, "sleepy").timing_vs_baseline
    assert comparison is not None
    assert comparison.verdict is TimingVerdict.SLOWER
    assert comparison.failing
    assert comparison.against == "baseline"
    assert comparison.max_slowdown == 1.5
    assert 2.0 < comparison.ratio < 4.0
    assert len(comparison.base_samples) == len(comparison.head_samples) == 15
    # `timing: off`: not compared, and nothing said about it.
    quick = region(written, "quick")
    assert quick.timing_vs_baseline is None
    assert not any("timing" in note for note in quick.notes)
    assert quick.passed


def test_unchanged_code_passes_3_runs_of_3(repo: Path, written: list[RunResult]) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    for _ in range(3):
        run = run_gate(repo, "run")
        assert run.returncode == 0, run
        comparison = region(written, "sleepy").timing_vs_baseline
        assert comparison is not None
        assert comparison.verdict is not TimingVerdict.SLOWER
        assert not comparison.failing


def test_a_baseline_from_another_device_is_not_compared(
    repo: Path, written: list[RunResult]
) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    document = stored(repo)
    document["timing"]["p.sleepy"]["device"] = "gpu (NVIDIA H200 x1), jax 0.10.2, jaxlib 0.10.2"
    (repo / BASELINE).write_text(json.dumps(document))
    run = run_gate(repo, "run", env={"STEP_SLEEP_S": "0.012"})
    assert run.returncode == 0, run
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    [note] = [n for n in sleepy.notes if n.startswith("timing not compared")]
    assert note.startswith(
        "timing not compared: baseline from gpu (NVIDIA H200 x1), jax 0.10.2, jaxlib 0.10.2 "
        "(this run: cpu (cpu x1), jax "
    )


def test_a_version_2_baseline_still_loads_and_says_it_has_no_timing(
    repo: Path, written: list[RunResult]
) -> None:
    old = {"format": "jax-transfer-gate.results.baseline", "version": 2, "accepted": []}
    (repo / BASELINE).write_text(json.dumps(old))
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    assert NO_TIMING in sleepy.notes
    assert NO_TIMING in run.stdout
    # Re-baselining upgrades the file to version 3, with timing.
    assert run_gate(repo, "baseline").returncode == 0
    assert stored(repo)["version"] == 3
    assert "p.sleepy" in stored(repo)["timing"]


def test_without_a_baseline_file_nothing_is_compared(repo: Path, written: list[RunResult]) -> None:
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    assert not any("timing" in note for note in sleepy.notes)


# --- the records, without a run -------------------------------------------------------------------

PLATFORM = "cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2"


def timed(name: str, samples: tuple[float, ...], **changes: object) -> RegionResult:
    return sample_region(name, platform=PLATFORM, timing_samples=samples, **changes)


def ruled(
    timing: TimingRule | None = None,
    cost: CostRule | None = None,
    collectives: CollectiveRule = CollectiveRule.FAIL,
) -> Region:
    """A planned region with the rules `compare_with_baseline` reads."""
    return Region(
        name="r",
        line=1,
        step=CallableRef("m:f", "m", "f", 1),
        setup=None,
        boundaries=(),
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        warmup=1,
        guarded_runs=1,
        repeats=1,
        timeout_s=1.0,
        checks=Checks(finite=False, reference=None, rtol=1e-5, atol=1e-8, custom=None),
        timing=timing or TimingRule(),
        cost=cost or CostRule(),
        collectives=collectives,
    )


def _cost(flops: float) -> StepCost:
    # A measured cost always comes with the programs' collectives (here: none).
    function = FunctionCost("jit(step)", 1, 1, (("flops", flops),))
    return step_cost((function,), None, comm=Communication())


def test_xla_figures_are_compared_with_the_stored_ones_exactly_and_kept_in_the_file() -> None:
    stored = retimed(run_of(timed("a", (1e-3,) * 10, cost=_cost(100.0))), None)
    assert read_timing(json.loads(json.dumps(timing_document(stored)))) == stored
    doubled = run_of(timed("a", (1e-3,) * 10, cost=_cost(200.0)))
    [gated] = compare_with_baseline(
        doubled, stored, {"train.a": ruled(cost=CostRule(1.05))}
    ).regions
    assert gated.cost_vs_baseline is not None
    assert gated.cost_vs_baseline.failing
    assert not gated.passed
    assert "flops 100 → 200 (2.00x)" in gated.cost_vs_baseline.headline()
    off = ruled(timing=TimingRule(compare=False))  # timing: off still compares the figures
    [reported] = compare_with_baseline(doubled, stored, {"train.a": off}).regions
    assert reported.cost_vs_baseline is not None
    assert not reported.cost_vs_baseline.failing
    assert reported.timing_vs_baseline is None
    assert reported.passed


def test_a_cost_bound_the_baseline_or_the_run_cannot_give_is_not_checked_never_a_pass() -> None:
    bounded = {"train.a": ruled(cost=CostRule(1.05))}
    without_cost = retimed(run_of(timed("a", (1e-3,) * 10)), None)  # stored with no cost
    [unbounded] = compare_with_baseline(
        run_of(timed("a", (1e-3,) * 10, cost=_cost(200.0))), without_cost, bounded
    ).regions
    comparison = unbounded.cost_vs_baseline
    assert comparison is not None
    assert comparison.unchecked is not None
    assert comparison.headline() == (
        "cost not checked against the baseline: baseline: no cost stored for this region; run "
        "`transfer-gate baseline` to record it, so cost.max_increase 1.05x cannot bound it"
    )
    assert not unbounded.passed
    # The run's own cost unmeasured (a JAX that moved the hook) against a stored one: the same.
    stored = retimed(run_of(timed("a", (1e-3,) * 10, cost=_cost(100.0))), None)
    unmeasured = not_measured("cost not measured: injected")
    [blind] = compare_with_baseline(
        run_of(timed("a", (1e-3,) * 10, cost=unmeasured)), stored, bounded
    ).regions
    assert blind.cost_vs_baseline is not None
    assert blind.cost_vs_baseline.unchecked == "head: cost not measured: injected"
    assert not blind.passed
    # Without a bound to check, both are what they were: nothing to claim, nothing said.
    # (`collectives: fail`, the default, is a check of its own: tests/test_collectives.py.)
    unruled = {"train.a": ruled(collectives=CollectiveRule.WARN)}
    for run, store in (
        (timed("a", (1e-3,) * 10, cost=_cost(200.0)), without_cost),
        (timed("a", (1e-3,) * 10, cost=unmeasured), stored),
    ):
        [left] = compare_with_baseline(run_of(run), store, unruled).regions
        assert left.cost_vs_baseline is None
        assert left.passed


def test_a_cost_bound_against_another_devices_baseline_is_noted() -> None:
    stored = retimed(run_of(timed("a", (1e-3,) * 10, cost=_cost(100.0))), None)
    elsewhere = sample_region(
        "a", platform="gpu (cuda x1), jax 0.10.2", timing_samples=(1e-3,) * 10, cost=_cost(200.0)
    )
    [noted] = compare_with_baseline(
        run_of(elsewhere), stored, {"train.a": ruled(cost=CostRule(1.05))}
    ).regions
    assert noted.cost_vs_baseline is None
    assert any(note.startswith("cost not compared: baseline from cpu") for note in noted.notes)


def test_a_region_the_baseline_has_no_timing_for_says_so() -> None:
    stored_timing = retimed(run_of(timed("old", (1e-3,) * 10)), None)
    judged = compare_with_baseline(
        run_of(timed("new", (1e-3,) * 10)), stored_timing, {"train.new": ruled()}
    )
    [new] = judged.regions
    assert new.timing_vs_baseline is None
    assert new.notes == (NO_REGION_TIMING,)


def test_an_errored_or_unruled_region_is_left_alone() -> None:
    stored_timing = retimed(run_of(timed("a", (1e-3,) * 10)), None)
    errored = timed("a", (), error=region_error())
    for run, rules in (
        (run_of(errored), {"train.a": ruled()}),
        (run_of(timed("a", (1e-3,))), {}),
    ):
        assert compare_with_baseline(run, stored_timing, rules) == run


def test_retimed_records_quartiles_and_keeps_other_regions() -> None:
    first = retimed(run_of(timed("a", (1.0, 2.0, 3.0, 4.0, 5.0)), timed("b", (1.0,))), None)
    assert (first["train.a"].p25_s, first["train.a"].median_s, first["train.a"].p75_s) == (
        2.0,
        3.0,
        4.0,
    )
    assert first["train.a"].device == f"{PLATFORM}, transfer-gate 0.1.0"
    second = retimed(run_of(timed("a", (7.0,))), first)
    assert second["train.b"] == first["train.b"]
    assert second["train.a"].samples == (7.0,)
    # A region that never reached JAX (no platform) stores nothing.
    assert retimed(run_of(sample_region("c", timing_samples=(1.0,))), None) == {}


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        ([], "'timing' must be a mapping"),
        ({"p.a": {"device": "cpu"}}, "timing of 'p.a' is malformed"),
        (
            {"p.a": {"device": "x", "median_s": 1, "p25_s": 1, "p75_s": 1, "samples": []}},
            "needs at least one finite, non-negative sample",
        ),
    ],
)
def test_a_malformed_timing_is_an_unusable_baseline(
    tmp_path: Path, timing: object, message: str
) -> None:
    path = tmp_path / "b.json"
    document = {"format": FORMAT, "version": 3, "accepted": [], "timing": timing}
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineError, match=message) as raised:
        load_baseline_file(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert str(raised.value).endswith("regenerate it with `transfer-gate baseline`")


def test_a_baseline_from_a_newer_gate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 4, "accepted": []}))
    with pytest.raises(BaselineError, match="version 4 is not 3"):
        load_baseline_file(path)


LEAKY_STEPS = (
    STEPS
    + """

import numpy as np


def numpy_setup():
    return (np.ones((4,), np.float32),)  # uploaded on every call: a transfer to accept
"""
)

LEAKY_POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 15}
regions:
  - name: sleepy
    step: steps:step
    setup: steps:numpy_setup
"""


def test_no_timing_baseline_keeps_the_accepted_transfers_and_compares_no_time(
    tmp_path: Path, written: list[RunResult]
) -> None:
    # The reusable workflow's hosted CPU job: a shared runner's step times say nothing.
    repo = make_repo(tmp_path, {"steps.py": LEAKY_STEPS, "policies/p.yaml": LEAKY_POLICY})
    assert run_gate(repo, "baseline").returncode == 0
    slow = run_gate(repo, "run", "--no-timing-baseline", env={"STEP_SLEEP_S": "0.012"})
    assert slow.returncode == 0, slow
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    assert not any("timing" in note for note in sleepy.notes), sleepy.notes
    assert f"baseline: {BASELINE} (1 accepted; step times not compared (--no-timing-baseline))" in (
        slow.stdout
    ), slow
    # The same run against the stored times fails; and without the baseline, on the transfer.
    assert run_gate(repo, "run", env={"STEP_SLEEP_S": "0.012"}).returncode == 1
    ignored = run_gate(repo, "run", "--no-baseline")
    assert ignored.returncode == 1, ignored
    assert "host-to-device" in ignored.stdout, ignored
