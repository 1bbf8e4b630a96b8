"""The stored timing baseline: `baseline` records step times, `run` compares with them.

Through the real CLI on a throwaway repo. The step sleeps for ``STEP_SLEEP_S``
seconds (an environment variable the workers inherit), so "3x slower" is a
property of the code under test, not of this machine's load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib.metadata import version as jax_version
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cli_helpers import make_repo, run_gate
from result_samples import MACHINE, region_error, run_of
from result_samples import region as sample_region

import gate.cli.run
from gate import __version__
from gate.compare.stored_baseline import compare_with_baseline
from gate.levels import GuardLevel, GuardSpec
from gate.machine.diagnosis import processor_model
from gate.policy.model import (
    CallableRef,
    Checks,
    CollectiveRule,
    CostRule,
    DonationRule,
    Region,
    TimingRule,
)
from gate.results.baseline_file import StoredBaseline
from gate.results.collectives import Communication
from gate.results.comparison import TimingVerdict
from gate.results.costs import FunctionCost, StepCost, not_measured, step_cost
from gate.results.records import RegionResult, RunResult
from gate.results.timing_baseline import retimed

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


def test_baseline_records_each_regions_timing_and_the_machine(repo: Path) -> None:
    made = run_gate(repo, "baseline")
    assert made.returncode == 0, made
    assert "step times of 2 regions" in made.stdout
    document = stored(repo)
    assert document["version"] == 4
    sleepy = document["timing"]["p.sleepy"]
    # 15 timed runs; timed again (once or twice, pooled) where this machine's load spread
    # them too wide to bound a comparison (tests/test_baseline_noise.py).
    assert len(sleepy["samples"]) in (15, 30, 45)
    assert sleepy["p25_s"] <= sleepy["median_s"] <= sleepy["p75_s"]
    assert 0.004 <= sleepy["median_s"] < 0.05
    # Read in the worker, which knows JAX's devices; the processor from this host.
    machine = sleepy["machine"]
    assert (machine["platform"], machine["accelerator"], machine["devices"]) == ("cpu", "cpu", 1)
    assert machine["cores"] == os.cpu_count()
    assert machine["jax"] == jax_version("jax")
    assert machine["jaxlib"] == jax_version("jaxlib")
    assert machine["transfer_gate"] == "0.1.0"
    assert machine["cuda_driver"] is machine["libtpu"] is None
    assert machine["processor"] == processor_model()
    # The worker ran each computation on the calling thread (gate/isolation/backend.py).
    assert machine["cpu_dispatch"] == "inline"
    # A region of its own: re-baselining one keeps the other's timing.
    before = document["timing"]["p.quick"]
    one = run_gate(repo, "baseline", "--region", "sleepy")
    assert one.returncode == 0, one
    assert "0 accepted transfer lines in 0 of 1 region run" in one.stdout
    assert "step times of 1 region\n" in one.stdout
    after = stored(repo)["timing"]
    assert after["p.quick"] == before
    assert after["p.sleepy"]["samples"] != sleepy["samples"]


def test_a_step_made_3x_slower_fails_against_the_stored_baseline_and_says_what_accepts_it(
    repo: Path, written: list[RunResult]
) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    slow = run_gate(repo, "run", env={"STEP_SLEEP_S": "0.012"})
    assert slow.returncode == 1, slow
    accept = (
        "next step: `transfer-gate baseline --baseline policies/transfer-gate-baseline.json "
        "--region p.sleepy --timing-only` records this region's step times, XLA's figures, "
        "collectives and unused donations as they are now; it accepts no transfer"
    )
    assert accept in region(written, "sleepy").notes
    assert f"note: {accept}" in slow.stdout
    # The timing's own testcase ends with it too: what a PR annotation shows.
    failure = slow.testcase("sleepy: timing vs baseline").find("failure")
    assert failure is not None
    assert (failure.text or "").rstrip().endswith(accept)
    comparison = region(written, "sleepy").timing_vs_baseline
    assert comparison is not None
    assert comparison.verdict is TimingVerdict.SLOWER
    assert comparison.failing
    assert comparison.against == "baseline"
    assert comparison.max_slowdown == 1.5
    assert 2.0 < comparison.ratio < 4.0
    assert len(comparison.head_samples) == 15
    assert len(comparison.base_samples) in (15, 30, 45)  # timed again where noisy
    # `timing: off`: not compared, and nothing said about it.
    quick = region(written, "quick")
    assert quick.timing_vs_baseline is None
    assert not any("timing" in note for note in quick.notes)
    assert quick.passed
    # Which is what it does: the run passes after it, and the file's transfers are as they were.
    before = stored(repo)["accepted"]
    again = run_gate(repo, *accept.split("`")[1].split()[1:], env={"STEP_SLEEP_S": "0.012"})
    assert again.returncode == 0, again
    assert stored(repo)["accepted"] == before
    assert run_gate(repo, "run", env={"STEP_SLEEP_S": "0.012"}).returncode == 0


def test_unchanged_code_passes_3_runs_of_3(repo: Path, written: list[RunResult]) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    for _ in range(3):
        run = run_gate(repo, "run")
        assert run.returncode == 0, run
        comparison = region(written, "sleepy").timing_vs_baseline
        assert comparison is not None
        assert comparison.verdict is not TimingVerdict.SLOWER
        assert not comparison.failing


def _not_compared_with(
    repo: Path, written: list[RunResult], edit: Callable[[dict[str, Any]], None]
) -> str:
    """A baseline recorded here with ``edit`` made to its machine, then a run 3x slower: the
    timing is not compared, the run passes, and one note says why (returned)."""
    assert run_gate(repo, "baseline").returncode == 0
    document = stored(repo)
    edit(document["timing"]["p.sleepy"]["machine"])
    (repo / BASELINE).write_text(json.dumps(document))
    run = run_gate(repo, "run", env={"STEP_SLEEP_S": "0.012"})
    assert run.returncode == 0, run
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    [note] = [n for n in sleepy.notes if n.startswith("timing not compared")]
    return note


def test_a_baseline_from_another_machine_is_not_compared_and_one_line_names_both(
    repo: Path, written: list[RunResult]
) -> None:
    note = _not_compared_with(repo, written, lambda m: m.update(processor="Apple M3", cores=8))
    here = f"{processor_model()} x{os.cpu_count()} cores, cpu x1 (cpu), jax "
    assert note.startswith(
        "timing not compared: the baseline's timing was measured on another machine "
        "(processor, cores differ): Apple M3 x8 cores, cpu x1 (cpu), jax "
    )
    assert f"; this run: {here}" in note
    assert "\n" not in note


def test_a_timing_recorded_before_the_workers_ran_cpu_computations_inline_is_not_compared(
    repo: Path, written: list[RunResult]
) -> None:
    # Such a record has no cpu_dispatch: its step was handed to one of XLA's threads, which
    # costs a small step more than the step itself, so its times say nothing of today's.
    note = _not_compared_with(repo, written, lambda machine: machine.pop("cpu_dispatch"))
    assert "on another machine (cpu_dispatch differ)" in note
    assert note.endswith(f", CPU dispatch inline, transfer-gate {__version__}")


def test_a_version_2_baseline_still_loads_and_says_it_has_no_timing(
    repo: Path, written: list[RunResult]
) -> None:
    old = {"format": "jax-transfer-gate.results.baseline", "version": 2, "accepted": []}
    (repo / BASELINE).write_text(json.dumps(old))
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    no_timing = (
        "timing not compared: the baseline has no timing; record it on this machine with "
        "`transfer-gate baseline --baseline policies/transfer-gate-baseline.json --region "
        "p.sleepy --timing-only`"
    )
    assert no_timing in sleepy.notes
    assert no_timing in run.stdout
    # Recording the timing alone upgrades the file to version 4.
    assert run_gate(repo, "baseline", "--timing-only").returncode == 0
    assert stored(repo)["version"] == 4
    assert "p.sleepy" in stored(repo)["timing"]


def test_without_a_baseline_file_nothing_is_compared(repo: Path, written: list[RunResult]) -> None:
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    sleepy = region(written, "sleepy")
    assert sleepy.timing_vs_baseline is None
    assert not any("timing" in note for note in sleepy.notes)


# --- the records, without a run -------------------------------------------------------------------


def timed(name: str, samples: tuple[float, ...], **changes: object) -> RegionResult:
    return sample_region(name, **{"machine": MACHINE, "timing_samples": samples, **changes})


def stored_timing(run: RunResult) -> StoredBaseline:
    return StoredBaseline(timing=retimed(run, {}))


def ruled(
    timing: TimingRule | None = None,
    cost: CostRule | None = None,
    collectives: CollectiveRule = CollectiveRule.FAIL,
    donation: DonationRule = DonationRule.FAIL_NEW,
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
        donation=donation,
    )


def _cost(flops: float) -> StepCost:
    # A measured cost always comes with the programs' collectives and unused donations (here:
    # none of either).
    function = FunctionCost("jit(step)", 1, 1, (("flops", flops),))
    return step_cost((function,), None, comm=Communication(), donations=())


def test_xla_figures_are_compared_with_the_stored_ones_exactly_and_kept_in_the_file() -> None:
    stored = stored_timing(run_of(timed("a", (1e-3,) * 10, cost=_cost(100.0))))
    doubled = run_of(timed("a", (1e-3,) * 10, cost=_cost(200.0)))
    [gated] = compare_with_baseline(
        doubled, stored, {"train.a": ruled(cost=CostRule(1.05))}, "tg"
    ).regions
    assert gated.cost_vs_baseline is not None
    assert gated.cost_vs_baseline.failing
    assert not gated.passed
    assert "flops 100 → 200 (2.00x)" in gated.cost_vs_baseline.headline()
    # timing: off still compares the figures, and twice the work fails by default; the
    # message says how to accept it (`cost.max_work_increase`, or the baseline recorded again).
    off = ruled(timing=TimingRule(compare=False))
    [defaulted] = compare_with_baseline(doubled, stored, {"train.a": off}, "tg").regions
    assert defaulted.cost_vs_baseline is not None
    assert defaulted.cost_vs_baseline.failing
    assert defaulted.cost_vs_baseline.headline().endswith(
        "if intended, record the baseline again, or accept it with "
        "`cost: {max_work_increase: 2}` in region r (policy line 1)"
    )
    accepted = ruled(timing=TimingRule(compare=False), cost=CostRule(max_work_increase=2.0))
    [reported] = compare_with_baseline(doubled, stored, {"train.a": accepted}, "tg").regions
    assert reported.cost_vs_baseline is not None
    assert not reported.cost_vs_baseline.failing
    assert reported.timing_vs_baseline is None
    assert reported.passed


def test_a_cost_bound_the_baseline_or_the_run_cannot_give_is_not_checked_never_a_pass() -> None:
    bounded = {"train.a": ruled(cost=CostRule(1.05))}
    without_cost = stored_timing(run_of(timed("a", (1e-3,) * 10)))  # stored with no cost
    [unbounded] = compare_with_baseline(
        run_of(timed("a", (1e-3,) * 10, cost=_cost(200.0))), without_cost, bounded, "tg"
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
    stored = stored_timing(run_of(timed("a", (1e-3,) * 10, cost=_cost(100.0))))
    unmeasured = not_measured("cost not measured: injected")
    [blind] = compare_with_baseline(
        run_of(timed("a", (1e-3,) * 10, cost=unmeasured)), stored, bounded, "tg"
    ).regions
    assert blind.cost_vs_baseline is not None
    assert blind.cost_vs_baseline.unchecked == "head: cost not measured: injected"
    assert not blind.passed
    # Without a bound to check, both are what they were: nothing to claim, nothing said.
    # (`collectives: fail` and `donation: fail_new`, the defaults, are checks of their own:
    # tests/test_collectives.py.)
    unruled = {"train.a": ruled(collectives=CollectiveRule.WARN, donation=DonationRule.WARN)}
    for run, store in (
        (timed("a", (1e-3,) * 10, cost=_cost(200.0)), without_cost),
        (timed("a", (1e-3,) * 10, cost=unmeasured), stored),
    ):
        [left] = compare_with_baseline(run_of(run), store, unruled, "tg").regions
        assert left.cost_vs_baseline is None
        assert left.passed


def test_a_cost_bound_against_another_machines_baseline_is_noted() -> None:
    stored = stored_timing(run_of(timed("a", (1e-3,) * 10, cost=_cost(100.0))))
    gpu = msgspec.structs.replace(MACHINE, platform="gpu", accelerator="NVIDIA H200")
    elsewhere = timed("a", (1e-3,) * 10, cost=_cost(200.0), machine=gpu)
    [noted] = compare_with_baseline(
        run_of(elsewhere), stored, {"train.a": ruled(cost=CostRule(1.05))}, "tg"
    ).regions
    assert noted.cost_vs_baseline is None
    assert noted.timing_vs_baseline is None
    assert [n.partition(":")[0] for n in noted.notes] == [
        "cost not compared",
        "timing not compared",
    ]
    assert noted.notes[0].startswith(
        "cost not compared: the baseline's cost was measured on another machine (platform, "
        "accelerator differ): Intel(R) Xeon(R) CPU @ 2.20GHz x2 cores, cpu x1 (cpu), jax 0.10.2, "
    )
    assert (
        "; this run: Intel(R) Xeon(R) CPU @ 2.20GHz x2 cores, gpu x1 (NVIDIA H200)"
        in (noted.notes[0])
    )


def test_a_region_the_baseline_has_no_timing_for_says_so() -> None:
    old = stored_timing(run_of(timed("old", (1e-3,) * 10)))
    judged = compare_with_baseline(
        run_of(timed("new", (1e-3,) * 10)), old, {"train.new": ruled()}, "transfer-gate baseline"
    )
    [new] = judged.regions
    assert new.timing_vs_baseline is None
    assert new.notes == (
        "timing not compared: the baseline has no timing for this region; record it on this "
        "machine with `transfer-gate baseline --region train.new --timing-only`",
    )


def test_an_errored_or_unruled_region_is_left_alone() -> None:
    stored = stored_timing(run_of(timed("a", (1e-3,) * 10)))
    errored = timed("a", (), error=region_error())
    for run, rules in (
        (run_of(errored), {"train.a": ruled()}),
        (run_of(timed("a", (1e-3,))), {}),
    ):
        assert compare_with_baseline(run, stored, rules, "tg") == run


def test_retimed_records_quartiles_and_keeps_other_regions() -> None:
    first = retimed(run_of(timed("a", (1.0, 2.0, 3.0, 4.0, 5.0)), timed("b", (1.0,))), {})
    assert (first["train.a"].p25_s, first["train.a"].median_s, first["train.a"].p75_s) == (
        2.0,
        3.0,
        4.0,
    )
    assert first["train.a"].machine == MACHINE
    second = retimed(run_of(timed("a", (7.0,))), first)
    assert second["train.b"] == first["train.b"]
    assert second["train.a"].samples == (7.0,)
    # A region that never reached JAX (no machine) stores nothing.
    assert retimed(run_of(sample_region("c", timing_samples=(1.0,))), {}) == {}


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
