"""The region engine called in-process, without the CLI or a worker: `run_region`
turns a policy's region into its `RegionResult`."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from jax_scripts import line_of
from result_samples import callable_ref, one_region_policy

from gate.levels import Direction
from gate.region.engine import run_region
from gate.results.records import CoverageJudge, RegionResult
from gate.user_code import SourceLocation

STEPS = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def fresh():
    return (jnp.arange(4, dtype=jnp.float32),)


def clean(x):
    return double(x)


jitted = jax.jit(clean)


def uploads(x):
    return double(x) + double(np.ones(4, np.float32))  # the implicit upload


CALLS = []


def counted(x):
    CALLS.append(1)
    return double(x)


EVENTS = []


def logged_fresh():
    x = jnp.arange(4, dtype=jnp.float32)
    EVENTS.append(("setup", id(x)))
    return (x,)


def logged(x):
    EVENTS.append(("step", id(x)))
    return double(x)


def _times_two(x):
    return x * 2.0


_donated = jax.jit(_times_two, donate_argnums=0)


def logged_donating(x):
    EVENTS.append(("step", id(x)))
    return _donated(x)

"""


@pytest.fixture(autouse=True)
def _own_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test writes its own engine_steps.py; never reuse another test's import.
    monkeypatch.delitem(sys.modules, "engine_steps", raising=False)


def run_step(
    repo: Path,
    step: str,
    *,
    let_go: bool = False,
    warmup: int = 0,
    traced: bool = True,
    setup: str = "fresh",
    repeats: int = 1,
) -> RegionResult:
    (repo / "engine_steps.py").write_text(textwrap.dedent(STEPS))
    policy = one_region_policy(
        callable_ref(f"engine_steps:{step}"),
        callable_ref(f"engine_steps:{setup}"),
        python_path=(repo,),
    )
    [region] = policy.regions
    region = replace(region, warmup=warmup, repeats=repeats)
    # As a worker: what lets go of the region's programs is handed back, called at once here.
    let_go_now = (lambda release: release()) if let_go else None
    return run_region(policy, region, repo_root=repo, let_go=let_go_now, traced=traced)


def test_a_clean_step_passes(tmp_path: Path) -> None:
    result = run_step(tmp_path, "clean")
    assert result.error is None, result.error
    assert result.passed, result.failing_transfers
    assert result.name == "r"
    assert result.timing is not None
    assert result.timing.repeats == 1
    judged = dict(result.coverage)
    assert judged["host-to-device"] is CoverageJudge.GUARD
    assert judged["device-to-host"] is not CoverageJudge.NOT_CHECKED, result.notes


def test_an_implicit_upload_fails_at_its_line(tmp_path: Path) -> None:
    result = run_step(tmp_path, "uploads")
    assert result.error is None, result.error
    assert not result.passed
    [failing, *_] = result.failing_transfers
    assert failing.direction is Direction.HOST_TO_DEVICE
    assert not failing.explicit
    line = line_of(STEPS, "the implicit upload")
    assert failing.location == SourceLocation("engine_steps.py", line, "uploads")
    assert failing.source is not None
    assert failing.source.endswith("# the implicit upload")
    assert all(t.location == failing.location for t in result.failing_transfers)


@pytest.mark.parametrize(("warmup", "calls"), [(2, 6), (1, 6), (0, 5)])
def test_the_first_of_two_warm_up_runs_is_the_cost_run_too(
    tmp_path: Path, warmup: int, calls: int
) -> None:
    result = run_step(tmp_path, "counted", warmup=warmup, traced=False)
    assert result.passed, result.failing_transfers
    assert result.cost is not None
    assert result.cost.measured, result.cost
    assert [f.name for f in result.cost.functions] == ["jit(double)"]
    # The first call, the warm-up runs, one mapped run, JAX's verdict and one timed run; with
    # fewer than two warm-up runs, a cost run of its own after them (no traced runs here).
    assert len(sys.modules["engine_steps"].CALLS) == calls


@pytest.mark.parametrize(("batch_bytes", "order"), [(None, "SSSSSTTTTT"), (1, "STSTSTSTST")])
def test_the_timed_runs_inputs_are_made_a_batch_at_a_time_and_each_run_gets_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_bytes: int | None, order: str
) -> None:
    """One wait for a batch of setup's outputs, not one a run (a round trip to the device
    each); inputs bigger than the batch's bytes are made one run at a time, as before."""
    if batch_bytes is not None:
        monkeypatch.setattr("gate.region.inputs.TIMED_BATCH_BYTES", batch_bytes)
    result = run_step(tmp_path, "logged", setup="logged_fresh", warmup=2, traced=False, repeats=5)
    assert result.passed, result.failing_transfers
    assert result.timing is not None
    assert result.timing.repeats == 5
    timed = sys.modules["engine_steps"].EVENTS[-10:]  # nothing runs the step after them
    assert "".join("S" if kind == "setup" else "T" for kind, _ in timed) == order
    made = [x for kind, x in timed if kind == "setup"]
    taken = [x for kind, x in timed if kind == "step"]
    assert taken == made, "each timed run takes its own inputs, in the order setup made them"


def test_a_step_that_does_not_import_is_an_error_not_an_exception(tmp_path: Path) -> None:
    result = run_step(tmp_path, "missing")
    assert result.error is not None
    assert result.error.kind.name == "IMPORT"
    assert "missing" in result.error.message
    assert not result.passed


def test_a_finished_regions_jitted_step_lets_go_of_its_programs(tmp_path: Path) -> None:
    """Nothing calls them again (a later region has programs of its own): JAX would keep them
    while the user's module keeps the step, ~1.8 MB a small region."""
    result = run_step(tmp_path, "jitted", let_go=True)
    assert result.error is None, result.error
    assert result.passed
    step = sys.modules["engine_steps"].jitted
    assert step._cache_size() == 0
    # The user's own jitted helper, called by a step that is no jitted function, keeps its
    # programs: the gate cannot tell the region's from others' there (the release does).
    run_step(tmp_path, "clean", let_go=True)
    assert sys.modules["engine_steps"].double._cache_size() > 0


def test_a_workers_region_hands_back_its_letting_go_for_after_the_reply(tmp_path: Path) -> None:
    """A worker lets go of the programs once the reply is sent, while the parent reads it
    (`gate.isolation.worker`): the region hands that over once, and has let go of nothing."""
    (tmp_path / "engine_steps.py").write_text(textwrap.dedent(STEPS))
    policy = one_region_policy(
        callable_ref("engine_steps:jitted"),
        callable_ref("engine_steps:fresh"),
        python_path=(tmp_path,),
    )
    handed: list[Callable[[], None]] = []
    result = run_region(policy, policy.regions[0], repo_root=tmp_path, let_go=handed.append)
    assert result.error is None, result.error
    step = sys.modules["engine_steps"].jitted
    assert step._cache_size() > 0
    [release] = handed
    release()
    assert step._cache_size() == 0


def test_in_the_users_own_process_the_step_keeps_its_programs(tmp_path: Path) -> None:
    """`gate.check_region` runs the engine in the user's process: ``clear_cache`` there would
    drop the user's own compilations of the step too."""
    result = run_step(tmp_path, "jitted")
    assert result.error is None, result.error
    assert sys.modules["engine_steps"].jitted._cache_size() > 0


def test_a_held_regions_programs_stay_until_the_worker_lets_go_of_it(tmp_path: Path) -> None:
    from gate.isolation.held_regions import HeldRegions
    from gate.isolation.protocol import Job
    from gate.isolation.worker import run_job

    (tmp_path / "engine_steps.py").write_text(textwrap.dedent(STEPS))
    policy = one_region_policy(
        callable_ref("engine_steps:jitted"),
        callable_ref("engine_steps:fresh"),
        python_path=(tmp_path,),
    )
    held = HeldRegions()
    job = Job(1, policy, policy.regions[0], tmp_path, hold=True)
    handed: list[object] = []
    result = run_job(job, held.keeper(job), let_go=handed.append)
    assert result.error is None, result.error
    assert held.region is not None
    assert not handed  # a held region's programs are the held region's to let go of
    step = sys.modules["engine_steps"].jitted
    assert step._cache_size() > 0  # `run --base` times it again
    held.release()  # the next job: this region is done
    assert held.region is None
    assert step._cache_size() == 0


@pytest.mark.parametrize(("step", "made"), [("logged", 1), ("logged_donating", 6)])
def test_a_held_regions_turns_share_one_call_of_setup_unless_the_step_donates(
    tmp_path: Path, step: str, made: int
) -> None:
    """Setup once for every turn of `run --base`'s rounds: once a turn cost 1.3 ms on the
    2-core machine against a turn's 1.9 ms of runs. A step that deletes its inputs (donates
    them) gets fresh ones for each run, as before."""
    from gate.isolation.held_regions import HeldRegions
    from gate.isolation.protocol import Job
    from gate.isolation.worker import run_job

    (tmp_path / "engine_steps.py").write_text(textwrap.dedent(STEPS))
    policy = one_region_policy(
        callable_ref(f"engine_steps:{step}"),
        callable_ref("engine_steps:logged_fresh"),
        python_path=(tmp_path,),
    )
    held = HeldRegions()
    job = Job(1, policy, policy.regions[0], tmp_path, hold=True)
    result = run_job(job, held.keeper(job), let_go=lambda release: release())
    assert result.error is None, result.error
    assert held.region is not None
    events = sys.modules["engine_steps"].EVENTS
    del events[:]
    turns = [held.region.sample(3) for _ in range(2)]
    assert [len(t.step_s) for t in turns] == [3, 3]
    assert all(t.error is None for t in turns), turns
    made_ids = [x for kind, x in events if kind == "setup"]
    taken = [x for kind, x in events if kind == "step"]
    assert len(made_ids) == made, events
    assert len(taken) == 6
    assert set(taken) == set(made_ids)  # every run takes setup's inputs, none older
    held.release()
