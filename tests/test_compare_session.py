"""The pieces of ``run --base`` below the CLI: held regions in a worker, the base's policy, outputs.

A held region is a real worker process here (`gate.isolation.scheduler.Scheduler`): its rounds of
timed runs, a step that dies in the middle of one, and its outputs on the host.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import gate_env, make_repo
from result_samples import region

from gate.compare.base_policy import for_base, in_tree, regions_in_base
from gate.compare.outputs import compare_outputs
from gate.compare.rounds import MAX_TURN_RUNS, turn_runs
from gate.isolation.held_regions import HeldRegions
from gate.isolation.protocol import Job
from gate.isolation.scheduler import RegionBudgets, Scheduler, TimingCue, Turn, usable_cpus
from gate.isolation.worker import WAITING_FOR_THE_BASE, run_job
from gate.plan import region_key
from gate.policy.load import load_policy
from gate.policy.model import Checks, Policy
from gate.region.errors import RegionAbort
from gate.results.comparison import ResultStatus, StepOutputs
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import RegionResult, TimingStats

STEPS = """
import os
import time

import jax
import numpy as np

_calls = [0]


@jax.jit
def double(x):
    return x * 2.0


def make():
    return (jax.device_put(np.arange(4, dtype=np.float32)),)


def step(x):
    return {"y": double(x)}


def logged(x):
    with open(os.environ["CALL_LOG"], "a") as log:
        log.write(f"{time.time()}\\n")
    return double(x)


def dies_on_the_fourteenth_call(x):
    _calls[0] += 1
    if _calls[0] == 14:
        os._exit(7)
    return double(x)
"""

POLICY = """
version: 1
python_path: [../src]
defaults: {warmup: 1, guarded_runs: 1, repeats: 2}
regions:
  - {name: step, step: "steps:step", setup: "steps:make", checks: {finite: true}}
  - {name: dies, step: "steps:dies_on_the_fourteenth_call", setup: "steps:make"}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"src/steps.py": STEPS, "policies/p.yaml": POLICY})


def _policy(repo: Path) -> Policy:
    return load_policy(repo / "policies/p.yaml", repo)


def test_a_held_region_times_more_runs_and_hands_over_its_outputs(repo: Path) -> None:
    policy = _policy(repo)
    with Scheduler(repo, environ=gate_env()) as scheduler:
        result, outputs = scheduler.run_held(policy, policy.regions[0])
        assert result.passed, result
        assert outputs is not None
        assert [path for path, _ in outputs.leaves] == ["['y']"]
        np.testing.assert_array_equal(outputs.leaves[0][1], [0.0, 2.0, 4.0, 6.0])
        assert outputs.setup_digest is not None
        assert outputs.setup_leaves == 1
        assert outputs.step_file == str(repo / "src" / "steps.py")
        cpu = usable_cpus()[-1] if usable_cpus() else None
        turns = [Turn(3, cpu), Turn(5, None)]
        timed = scheduler.time_turns(policy, policy.regions[0], turns)
        assert [len(samples.step_s) for samples in timed] == [3, 5]
        for samples in timed:
            assert samples.error is None, samples
            assert all(s > 0 for s in samples.step_s)
        # A region run without hold lets the held one go: nothing is left to time.
        scheduler.run(policy, policy.regions[0])
        (let_go,) = scheduler.time_turns(policy, policy.regions[0], [Turn(1)])
        assert let_go.error is not None
        assert "does not hold" in let_go.error.message


def test_a_footprinted_run_holds_nothing_and_takes_nothing_from_the_regions_budget(
    repo: Path,
) -> None:
    """`run_footprinted`, a README-only change's first run of a head region: its footprint,
    nothing left to time, and the region's ``timeout_s`` left whole for the runs a comparison
    needs, should its footprint send it to the base after all; a held run spends it."""
    policy = _policy(repo)
    region = policy.regions[0]
    label = region_key(policy, region)
    with Scheduler(repo, environ=gate_env(), audited=True) as scheduler:
        scheduler.budgets = RegionBudgets()
        result = scheduler.run_footprinted(policy, region, "head", repo)
        assert result.passed, result
        assert result.footprint is not None
        assert "src/steps.py" in dict(result.footprint.files), result.footprint
        assert scheduler.budgets.left_s(label, region.timeout_s) == region.timeout_s
        (nothing,) = scheduler.time_turns(policy, region, [Turn(1)])
        assert nothing.error is not None
        assert "does not hold" in nothing.error.message
        scheduler.run_held(policy, region, "head", repo)
        assert scheduler.budgets.left_s(label, region.timeout_s) < region.timeout_s


def test_a_worker_lost_during_a_round_is_that_rounds_error(repo: Path) -> None:
    policy = _policy(repo)
    region = policy.regions[1]
    with Scheduler(repo, environ=gate_env()) as scheduler:
        # 1 + 1 + 1 + 1 + 2 calls, the cost run's 2 and 3 traced runs (its time is compared)
        result, _ = scheduler.run_held(policy, region)
        assert result.error is None, result
        # The turn that dies is the last: the one after it is never asked of a dead worker.
        timed = scheduler.time_turns(policy, region, [Turn(10), Turn(1)])
        assert len(timed) == 1, timed
        (samples,) = timed
        assert samples.error is not None
        assert samples.error.kind is ErrorKind.CRASH, samples.error
        assert "exit" in samples.error.message, samples.error
        assert samples.step_s == (), samples  # the round's runs died with the worker
        (gone,) = scheduler.time_turns(policy, region, [Turn(1)])
        assert gone.error is not None
        assert gone.error.kind is ErrorKind.CRASH


def test_the_base_runs_the_heads_policy_from_its_own_folders_without_checks(
    repo: Path, tmp_path: Path
) -> None:
    policy = _policy(repo)
    base_root = tmp_path / "elsewhere"
    based = for_base(policy, repo, base_root)
    assert based.python_path == (base_root / "src",)
    assert [r.name for r in based.regions] == ["step", "dies"]
    assert not based.regions[0].checks.any
    assert based.regions[0].guard == policy.regions[0].guard
    assert in_tree(Path("/usr/lib"), repo, base_root) == Path("/usr/lib")


def test_the_base_runs_under_its_own_copys_env_and_python_path(repo: Path, tmp_path: Path) -> None:
    """How the base's code runs is the base's: its policy file's env: and python_path, not
    the head's (a changed JAX_ENABLE_X64 is then a change the comparison sees)."""
    policy = _policy(repo)
    base_root = tmp_path / "base"
    make_repo(
        base_root,
        {
            "policies/p.yaml": "version: 1\npython_path: [../lib]\n"
            "env: {JAX_ENABLE_X64: true, N: 3}\nregions:\n  - name: step\n"
        },
    )
    based = for_base(policy, repo, base_root)
    assert based.python_path == (base_root / "lib",)
    assert based.env == (("JAX_ENABLE_X64", "True"), ("N", "3"))
    assert [r.name for r in based.regions] == ["step", "dies"]  # the head's inputs
    make_repo(base_root, {"policies/p.yaml": "version: 1\nregions:\n  - name: step\n"})
    alone = for_base(policy, repo, base_root)
    assert alone.python_path == ()
    assert alone.env == ()


def test_the_bases_worker_takes_the_heads_folders_in_its_own_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editable install's path entry and setuptools' editable finder, pointing into the
    head's checkout, point into the base's; a folder outside the repository stays."""
    import types

    from gate.isolation.own_tree import take_from_own_tree

    head, base = tmp_path / "head", tmp_path / "base"
    (head / "src").mkdir(parents=True)
    finder_module = types.ModuleType("__editable___pkg_finder")
    finder_module.MAPPING = {"pkg": str(head / "src" / "pkg")}  # type: ignore[attr-defined]
    finder_module.NAMESPACES = {"ns": [str(head / "ns")]}  # type: ignore[attr-defined]
    finder = type("_EditableFinder", (), {"__module__": finder_module.__name__})
    monkeypatch.setitem(sys.modules, finder_module.__name__, finder_module)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    # The README's .venv in the repository: installed, git-ignored, the same for both trees.
    venv = head / ".venv"
    (venv / "lib" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = str(venv / "lib" / "site-packages")
    monkeypatch.setattr(sys, "path", [str(head / "src"), "/usr/lib/python3", "", site])
    take_from_own_tree(((head, base),))
    real = base.resolve()
    assert sys.path == [str(real / "src"), "/usr/lib/python3", "", site]
    mapping, namespaces = vars(finder_module)["MAPPING"], vars(finder_module)["NAMESPACES"]
    assert mapping == {"pkg": str(real / "src" / "pkg")}
    assert namespaces == {"ns": [str(real / "ns")]}
    take_from_own_tree(((head, base),))  # again: nothing more moves
    assert sys.path == [str(real / "src"), "/usr/lib/python3", "", site]


def test_two_workers_share_a_gpu_only_as_the_user_left_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX preallocates 75% of a GPU in each process: side by side, each tree's worker takes
    its share, unless the user said how much a process takes."""
    from gate.compare import session
    from gate.isolation import device_pool

    monkeypatch.setattr(device_pool, "gpu_files", lambda: ["/dev/nvidia0"])
    assert session._memory_for_two({})["XLA_PYTHON_CLIENT_MEM_FRACTION"] == session.GPU_SHARE
    mine = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert session._memory_for_two(dict(mine)) == mine
    assert session._memory_for_two({"JAX_PLATFORMS": "cpu"}) == {"JAX_PLATFORMS": "cpu"}


def test_which_regions_the_base_has(repo: Path, tmp_path: Path) -> None:
    policy = _policy(repo)
    base_root = tmp_path / "base"
    assert regions_in_base(policy, repo, base_root) is None  # no policy file there
    make_repo(base_root, {"policies/p.yaml": "regions:\n  - name: step\n  - {nom: x}\n"})
    assert regions_in_base(policy, repo, base_root) == frozenset({"step"})
    make_repo(base_root, {"policies/p.yaml": ": not yaml ["})
    assert regions_in_base(policy, repo, base_root) is None


CHECKS = Checks(finite=False, reference=None, rtol=1e-5, atol=1e-8, custom=None)


def _outputs(values: dict[str, list[float]], digest: str | None = "d") -> StepOutputs:
    leaves = tuple((path, np.asarray(v, np.float32)) for path, v in values.items())
    return StepOutputs(leaves, digest, 1)


def test_outputs_that_match_pass_and_a_changed_leaf_is_named() -> None:
    base = _outputs({"['b']": [1.0, 2.0], "['w']": [3.0, 4.0]})
    same = compare_outputs(base, _outputs({"['b']": [1.0, 2.0], "['w']": [3.0, 4.0]}), CHECKS)
    assert same.status is ResultStatus.MATCHES
    assert same.detail == "2 output leaves match the base within rtol=1e-05, atol=1e-08"
    changed = compare_outputs(base, _outputs({"['b']": [1.0, 2.0], "['w']": [3.0, 5.0]}), CHECKS)
    assert changed.status is ResultStatus.DIFFERS
    assert [d.path for d in changed.differences] == ["['w']"]
    assert changed.differences[0].detail == (
        "['w']: 1 of 2 values differ, max abs diff 1, max rel diff 0.25 (rtol=1e-05, atol=1e-08)"
    )
    fewer = compare_outputs(base, _outputs({"['b']": [1.0, 2.0]}), CHECKS)
    assert fewer.status is ResultStatus.DIFFERS
    assert [(d.path, d.detail) for d in fewer.differences] == [
        ("['w']", "['w']: the base has this leaf, the outputs do not")
    ]


def test_a_renamed_or_reordered_leaf_is_matched_by_its_path_not_its_position() -> None:
    base = _outputs({"['b']": [1.0, 2.0], "['w']": [3.0, 4.0]})
    # The head renamed 'w' to 'v': both are said, and 'b' is still compared with 'b'.
    renamed = compare_outputs(base, _outputs({"['b']": [1.0, 2.0], "['v']": [3.0, 4.0]}), CHECKS)
    assert renamed.status is ResultStatus.DIFFERS
    assert [d.detail for d in renamed.differences] == [
        "['v']: a leaf the base does not have",
        "['w']: the base has this leaf, the outputs do not",
    ]
    # The same leaves in another order: each compared with its namesake, so they match. By
    # position, 'b' would have been diffed against 'w' and failed.
    reordered = compare_outputs(base, _outputs({"['w']": [3.0, 4.0], "['b']": [1.0, 2.0]}), CHECKS)
    assert reordered.status is ResultStatus.MATCHES, reordered.detail


def test_a_changed_dtype_differs_and_bfloat16_is_compared_in_float32() -> None:
    import jax.numpy as jnp

    def bf16(values: list[float], digest: str = "d") -> StepOutputs:
        return StepOutputs((("", np.asarray(values, np.float32).astype(jnp.bfloat16)),), digest, 1)

    base = bf16([1.0, 2.0])
    assert compare_outputs(base, bf16([1.0, 2.0]), CHECKS).status is ResultStatus.MATCHES
    changed = compare_outputs(base, bf16([1.0, 2.5]), CHECKS)
    assert changed.status is ResultStatus.DIFFERS
    assert changed.differences[0].detail.startswith(
        "output: 1 of 2 values differ, max abs diff 0.5"
    )
    widened = compare_outputs(base, _outputs({"": [1.0, 2.0]}), CHECKS)
    assert [d.detail for d in widened.differences] == ["output: dtype float32 != base bfloat16"]


def test_outputs_from_different_inputs_are_not_compared() -> None:
    base = _outputs({"": [1.0]})
    random_setup = compare_outputs(base, _outputs({"": [2.0]}, digest=None), CHECKS)
    assert random_setup.status is ResultStatus.NOT_COMPARED
    assert not random_setup.failing
    assert random_setup.detail.startswith("results not compared: setup is not deterministic")
    other_inputs = compare_outputs(base, _outputs({"": [2.0]}, digest="other"), CHECKS)
    assert other_inputs.detail == (
        "results not compared: setup gives the base and the head different inputs"
    )


def _held_run(
    repo: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> tuple[RegionResult, HeldRegions]:
    """The held region of ``run --base``, run in this process, its outputs' fetch raising."""
    import gate.region.held

    def fetch(tree: object) -> object:
        raise failure

    monkeypatch.setattr(gate.region.held, "host_leaves", fetch)
    monkeypatch.syspath_prepend(str(repo / "src"))
    policy = _policy(repo)
    held = HeldRegions()
    job = Job(1, policy, policy.regions[0], repo, hold=True)
    return run_job(job, held.keeper(job)), held


def test_outputs_the_gate_cannot_fetch_are_its_own_fault_not_a_comparison_not_made(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, held = _held_run(repo, monkeypatch, RuntimeError("the fetch broke"))
    error = result.error
    assert error is not None
    assert error.kind is ErrorKind.INTERNAL  # exit 3
    assert "RuntimeError: the fetch broke" in error.message
    assert held.region is None
    assert held.take_outputs() is None


def test_setup_failing_while_the_outputs_are_fetched_is_the_regions_error(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_error = RegionError(ErrorKind.SETUP, "ValueError: setup broke", "")
    result, held = _held_run(repo, monkeypatch, RegionAbort(user_error))
    assert result.error == user_error
    assert held.region is None


def _timed(median_s: float) -> RegionResult:
    stats = TimingStats(20, median_s, median_s, median_s, median_s, median_s)
    return region(timing=stats)


@pytest.mark.parametrize(
    ("round_runs", "medians", "runs"),
    [
        (1, (1e-4, 1e-4), 20),  # twenty runs of 0.1 ms fill two milliseconds
        (1, (1e-4, 2.5e-4), 8),  # the slower tree decides
        (1, (1e-6, 1e-6), MAX_TURN_RUNS),  # at most this many
        (1, (5e-3, 5e-3), 1),  # a step past the turn's length: one run a turn
        (3, (5e-3, 5e-3), 3),  # never fewer than the policy asks
    ],
)
def test_a_short_steps_turn_is_several_runs(
    round_runs: int, medians: tuple[float, float], runs: int
) -> None:
    assert turn_runs(round_runs, *(_timed(m) for m in medians)) == runs


def test_without_timing_a_turn_is_the_policys_runs() -> None:
    assert turn_runs(2, region(timing=None), region(timing=None)) == 2


COUNTING_STEPS = """
import jax
import numpy as np

made = [0]


def make():
    made[0] += 1
    return (jax.device_put(np.arange(4, dtype=np.float32)),)


@jax.jit
def step(x):
    return x * 2.0


donating = jax.jit(lambda x: x * 2.0, donate_argnums=0)
"""

COUNTING_POLICY = """
version: 1
python_path: [../src]
defaults: {warmup: 1, guarded_runs: 1, repeats: 2}
regions:
  - {name: shared, step: "counting_steps:step", setup: "counting_steps:make"}
  - {name: donating, step: "counting_steps:donating", setup: "counting_steps:make"}
"""


@pytest.mark.parametrize(("name", "setups"), [("shared", 1), ("donating", 5)])
def test_a_turns_runs_share_one_setup_unless_the_step_donates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, setups: int
) -> None:
    repo = make_repo(
        tmp_path, {"src/counting_steps.py": COUNTING_STEPS, "policies/c.yaml": COUNTING_POLICY}
    )
    monkeypatch.syspath_prepend(str(repo / "src"))
    monkeypatch.delitem(sys.modules, "counting_steps", raising=False)
    policy = load_policy(repo / "policies/c.yaml", repo)
    region = next(r for r in policy.regions if r.name == name)
    held = HeldRegions()
    job = Job(1, policy, region, repo, hold=True)
    result = run_job(job, held.keeper(job))
    assert result.error is None, result.error
    kept = held.region
    assert kept is not None
    made = sys.modules["counting_steps"].made
    before = made[0]
    samples = kept.sample(5)
    assert samples.error is None, samples.error
    assert len(samples.step_s) == 5
    # A donated input is deleted by the run: each run needs setup's new one.
    assert made[0] - before == setups


def test_a_jobs_timed_runs_wait_for_its_cue_and_its_other_runs_do_not(tmp_path: Path) -> None:
    """`run --base` on the CPU runs a region in both trees' workers at once; the head's timed
    runs wait until the base's run has ended (`TimingCue`), its first call does not."""
    repo = make_repo(
        tmp_path,
        {
            "src/steps.py": STEPS,
            "policies/p.yaml": POLICY
            + '  - {name: logged, step: "steps:logged", setup: "steps:make"}\n',
        },
    )
    policy = _policy(repo)
    log = tmp_path / "calls.log"
    cue = TimingCue()
    stages = _Stages()
    environ = {**gate_env(), "CALL_LOG": str(log)}
    with Scheduler(repo, environ=environ, watcher=stages) as scheduler:
        done: list[RegionResult] = []
        running = threading.Thread(
            target=lambda: done.append(scheduler.run_held(policy, policy.regions[2], cue=cue)[0])
        )
        running.start()
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the region's runs up to its timed ones take ~0.1 s
        assert running.is_alive(), "the timed runs did not wait for the cue"
        # The live line says what it waits for, not the stage before.
        assert stages.heard[-1] == WAITING_FOR_THE_BASE, stages.heard
        given = time.time()
        cue.give()
        running.join(timeout=60)
        assert not running.is_alive()
    [result] = done
    assert result.passed, result
    calls = [float(line) for line in log.read_text().split()]
    assert [t < given for t in calls].count(True) >= 3, calls  # first call, warm-up, watched
    assert [t > given for t in calls].count(True) >= 2, calls  # its 2 timed runs
    assert stages.heard.index(WAITING_FOR_THE_BASE) < stages.heard.index("timing"), stages.heard


class _Stages:
    """A watcher that keeps the stages it hears, in order."""

    def __init__(self) -> None:
        self.heard: list[str] = []

    def stage(self, label: str, stage: str) -> None:
        self.heard.append(stage)

    def output(self, label: str, lines: Sequence[str]) -> None:
        pass


def test_a_job_says_what_it_reached_as_its_first_call_starts(tmp_path: Path) -> None:
    """With a cue that listens (`TimingCue.reached`), the job's footprint so far comes as its
    code is imported: the step's module among it. Given then, nothing waits, and the live
    line never says it waits for the base."""
    repo = make_repo(tmp_path, {"src/steps.py": STEPS, "policies/p.yaml": POLICY})
    policy = _policy(repo)
    heard: list[tuple[str, ...]] = []

    def reached(paths: tuple[str, ...]) -> None:
        heard.append(paths)
        cue.give()

    cue = TimingCue(reached)
    assert not cue.holds  # the job's clock runs until the base's run starts beside it
    stages = _Stages()
    with Scheduler(repo, environ=gate_env(), watcher=stages) as scheduler:
        result, _ = scheduler.run_held(policy, policy.regions[0], footprint_top=repo, cue=cue)
    assert result.passed, result
    [paths] = heard
    assert "src/steps.py" in paths, paths
    assert WAITING_FOR_THE_BASE not in stages.heard, stages.heard
    assert stages.heard.index("importing") < stages.heard.index("compiling"), stages.heard


def test_a_cue_holds_the_jobs_clock_only_while_the_bases_run_is_under_way() -> None:
    beside = TimingCue()  # the base's run starts with the job's
    assert beside.holds
    beside.give()
    assert not beside.holds
    later = TimingCue(lambda paths: None)  # the base's run starts once the job's reach says
    assert not later.holds
    later.hold()
    assert later.holds
    later.give()
    assert not later.holds


def test_a_cue_given_before_anything_waits_lets_it_through_at_once() -> None:
    cue, heard = TimingCue(), []
    cue.on_given(lambda: heard.append("before"))
    cue.give()
    cue.on_given(lambda: heard.append("after"))
    assert heard == ["before", "after"]
