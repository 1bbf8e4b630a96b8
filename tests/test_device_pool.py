"""One worker per device, across the gate's processes: the device pool, a busy device, chips.

A TPU chip admits one process; CI has none. The pool's own logic is tested with device files
planted in this process; the runs go through the real CLI under the planted accelerator rule
(tests/accelerator_rule.py), which makes a second process on a chip fail as libtpu does and,
with ``chips(N)``, gives the host N chips, each a device of its own.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from accelerator_rule import AcceleratorRule
from cli_helpers import FAST_DEFAULTS, gate_env, make_repo, run_gate
from processes import communicate, started

from gate.cli.exit_codes import ExitCode
from gate.isolation.device_pool import LOCK_DIR, DevicePool
from gate.machine import devices


def _plant(monkeypatch: pytest.MonkeyPatch, files: dict[str, int]) -> None:
    """Device files as a TPU or GPU host has them: pattern prefix -> how many."""

    def glob(pattern: str) -> list[str]:
        for prefix, count in files.items():
            if pattern.startswith(prefix):
                return [f"{prefix}{i}" for i in range(count)]
        return []

    monkeypatch.setattr(devices.glob, "glob", glob)


def test_each_chip_is_a_slot_lent_to_one_holder_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _plant(monkeypatch, {"/dev/accel": 3})
    pool = DevicePool.for_environment({LOCK_DIR: str(tmp_path)})
    assert pool is not None
    assert [s.name for s in pool.slots] == ["TPU chip 0", "TPU chip 1", "TPU chip 2"]
    assert [s.env["TPU_VISIBLE_CHIPS"] for s in pool.slots] == ["0", "1", "2"]
    # Another pool, as another gate process on the host would have: the same lock files.
    other = DevicePool.for_environment({LOCK_DIR: str(tmp_path)})
    assert other is not None
    held = [pool.take_free(), other.take_free(), pool.take_free()]
    assert [h.slot.name for h in held if h is not None] == [s.name for s in pool.slots]
    assert other.take_free() is None
    assert "TPU chip 1: pid " in other.holders()
    held[1].release()  # type: ignore[union-attr]
    again = other.take_free()
    assert again is not None
    assert again.slot.name == "TPU chip 1"


def test_one_chip_keeps_the_environment_and_the_cpu_has_no_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _plant(monkeypatch, {"/dev/accel": 1})
    pool = DevicePool.for_environment({LOCK_DIR: str(tmp_path)})
    assert pool is not None
    assert [(s.name, dict(s.env)) for s in pool.slots] == [("TPU chip 0", {})]
    assert DevicePool.for_environment({"JAX_PLATFORMS": "cpu", LOCK_DIR: str(tmp_path)}) is None
    _plant(monkeypatch, {"/dev/nvidia": 2})
    gpus = DevicePool.for_environment({LOCK_DIR: str(tmp_path)})
    assert gpus is not None
    assert [s.name for s in gpus.slots] == ["the GPUs"]  # a worker sees them all
    _plant(monkeypatch, {})
    assert DevicePool.for_environment({LOCK_DIR: str(tmp_path)}) is None


STEPS = """
import os
import time

import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def batch():
    return (jax.device_put(np.ones(4, np.float32)),)


def nap(x):
    time.sleep(0.05)
    return double(x)
"""


def _policy(regions: int) -> str:
    listed = "".join(
        f"  - {{name: r{i}, step: steps:nap, setup: steps:batch}}\n" for i in range(regions)
    )
    return f"version: 1\nsuite: s\n{FAST_DEFAULTS}regions:\n{listed}"


@pytest.mark.chips(4)
@pytest.mark.usefixtures("one_process_on_the_device")
@pytest.mark.parametrize("base", [False, True], ids=["run", "run --base"])
def test_a_host_of_four_chips_runs_regions_side_by_side_one_worker_per_chip(
    tmp_path: Path, accelerator_rule: AcceleratorRule, base: bool
) -> None:
    from git_helpers import commit, init

    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": STEPS, "policies/p.yaml": _policy(8)}, "base")
    run = run_gate(repo, "run", *(["--base", "HEAD"] if base else []))
    assert run.returncode == ExitCode.OK, run
    assert "8 passed" in run.stdout, run
    # The report keeps the plan's order, whichever chip finished first.
    rows = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("PASS")]
    assert rows == [f"s.r{i}" for i in range(8)], run
    chips = {start.chips for start in accelerator_rule.starts()}
    # Each worker on a chip of its own (a worker on every chip would have met the others').
    assert "all" not in chips, chips
    if not base:
        assert len(chips) >= 2, chips
    # Under --base a policy's regions run from the head's tree on one chip, then from the
    # base's: the trees hold a chip in turn (docs/compare.md, "One process on the device").


@pytest.mark.usefixtures("one_process_on_the_device")
def test_a_chip_that_refuses_the_next_process_for_a_moment_is_asked_again(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy(2)})
    refusals = f"{tmp_path / 'refusals'}:2"
    run = run_gate(repo, "run", env={"TRANSFER_GATE_PLANTED_REFUSALS": refusals})
    assert run.returncode == ExitCode.OK, run
    assert "2 passed" in run.stdout, run
    assert (tmp_path / "refusals").read_text() == "xxx"  # two refused, the third started


HOLDER = "import jax, time; jax.devices(); time.sleep(120)"


@pytest.mark.chips(1)
def test_a_device_held_past_the_wait_is_one_error_for_the_run(
    tmp_path: Path, accelerator_rule: AcceleratorRule
) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy(3)})
    env = gate_env(extra=accelerator_rule.environment())
    with started([sys.executable, "-c", HOLDER], env=env, cwd=tmp_path) as holder:
        end = time.monotonic() + 60
        while not accelerator_rule.starts() and time.monotonic() < end:
            assert holder.poll() is None, "the holder could not take the chip"
            time.sleep(0.1)
        assert accelerator_rule.starts(), "the holder never took the chip"
        run = run_gate(repo, "run", env={"TRANSFER_GATE_DEVICE_WAIT_S": "2"})
    assert run.returncode == ExitCode.REGION_FAILED, run
    case = run.testcase("device")
    error = case.find("error")
    assert error is not None, run
    message = error.get("message", "")
    # No /dev/accel0 here for the holder to have open, so it is not named (doctor's tests
    # plant /proc to show that it is where the system lets the gate see it).
    assert message.startswith("device busy: the TPU is busy"), message
    assert "A TPU chip admits one process at a time" in message, message
    assert message.endswith("(3 regions not run)"), message
    assert "worker crashed" not in run.stdout, run  # not a crash per region


@pytest.mark.chips(1)
def test_two_shards_on_one_chip_take_turns_instead_of_failing(
    tmp_path: Path, accelerator_rule: AcceleratorRule
) -> None:
    """Two ``run --shard`` jobs on one host: the second waits for the chip the first's worker
    holds (the gate's own lock), then runs."""
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy(4)})
    env = gate_env(extra=accelerator_rule.environment())
    gates = []
    with (
        started(
            [sys.executable, "-m", "gate", "run", "--shard", "1/2", "--junit", "one.xml"],
            env=env,
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as first,
        started(
            [sys.executable, "-m", "gate", "run", "--shard", "2/2", "--junit", "two.xml"],
            env=env,
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as second,
    ):
        for proc in (first, second):
            out, err = communicate(proc, 240)
            gates.append((proc.returncode, out, err))
    for code, out, err in gates:
        assert code == ExitCode.OK, (out, err)
        assert "2 passed" in out, (out, err)
    accelerator_rule.assert_only_workers_held_the_device()
