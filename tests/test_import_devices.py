"""The gate's own process imports the user's modules with as many devices as a worker has.

It imports them on the CPU alone (never taking GPU memory from the workers), so a module
that builds its mesh at import, ``MESH = jax.make_mesh((8,), ("data",))`` as most sharded
code does, failed there with "Number of devices 1 must be >= the product of mesh_shape"
whenever the 8 devices came from the policy's ``env:`` or from 8 GPUs. The count comes
from the device files and the environment (`gate.machine.devices`); the GPU and TPU
counts are tested here with the device files planted, since this machine has none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate

from gate.isolation.environment import import_devices
from gate.machine import devices
from gate.machine.devices import forced_cpu_devices, local_accelerators
from gate.policy.model import Policy

MODULE = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((8,), ("data",))  # at import, as most sharded code does
SPLIT = NamedSharding(MESH, P("data"))


def setup():
    return (jax.device_put(jnp.arange(32.0).reshape(16, 2), SPLIT),)


@jax.jit
def step(x):
    return (x * 2.0).sum()
"""

POLICY = """
version: 1
suite: mesh
env:
  XLA_FLAGS: --xla_force_host_platform_device_count=8
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: at-import, step: sharded:step, setup: sharded:setup}
"""


def test_a_module_that_builds_its_mesh_at_import_runs_on_the_policys_eight_devices(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"sharded.py": MODULE, "policies/mesh.yaml": POLICY})
    # The gate's own process has one CPU device; only the policy asks for eight.
    run = run_gate(repo, "run", "--json", "r.json", process=True)
    assert run.returncode == 0, run
    assert "PASS  mesh.at-import" in run.stdout, run
    assert "cpu x8" in run.stdout, run
    assert "Number of devices" not in run.stdout + run.stderr, run


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("", 1),
        ("--xla_cpu_enable_fast_math=false", 1),
        ("--xla_force_host_platform_device_count=8", 8),
        ("--xla_force_host_platform_device_count=2 --xla_force_host_platform_device_count=4", 4),
    ],
)
def test_the_forced_cpu_device_count_is_read_as_xla_reads_it(flags: str, expected: int) -> None:
    assert forced_cpu_devices(flags) == expected


def _plant(monkeypatch: pytest.MonkeyPatch, files: dict[str, int]) -> None:
    """Device files as a GPU or TPU machine has them: pattern prefix -> how many."""

    def glob(pattern: str) -> list[str]:
        for prefix, count in files.items():
            if pattern.startswith(prefix):
                return [f"{prefix}{i}" for i in range(count)]
        return []

    monkeypatch.setattr(devices.glob, "glob", glob)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, 8),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2),
        ({"CUDA_VISIBLE_DEVICES": "3,-1,4"}, 1),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, 0),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0),
        ({"JAX_PLATFORMS": "cpu"}, 0),
        ({"JAX_PLATFORMS": "cuda,cpu"}, 8),
    ],
)
def test_gpus_are_counted_from_their_device_files_as_cuda_narrows_them(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], expected: int
) -> None:
    _plant(monkeypatch, {"/dev/nvidia": 8})
    assert local_accelerators(environ) == expected


def test_tpu_chips_count_two_devices_each_so_a_two_core_chip_is_never_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _plant(monkeypatch, {"/dev/accel": 4})
    assert local_accelerators({}) == 8


def test_no_device_files_is_no_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(monkeypatch, {})
    assert local_accelerators({}) == 0


def _policy(env: dict[str, str]) -> Policy:
    return Policy(Path("policies/p.yaml"), 1, "p", (), (), env=tuple(sorted(env.items())))


def test_the_most_demanding_policy_decides_and_its_env_is_over_the_gates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _plant(monkeypatch, {"/dev/nvidia": 2})
    eight = _policy({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    plain = _policy({})
    assert import_devices({}, [plain]) == 2  # the two GPUs
    assert import_devices({}, [plain, eight]) == 8
    four = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    assert import_devices(four, [plain]) == 4  # the gate's own flags reach every worker
    # A policy that keeps its workers on the CPU does not count the GPUs.
    assert import_devices({}, [_policy({"JAX_PLATFORMS": "cpu"})]) == 1
