"""The user's modules are imported where the device is: in a worker, never in the gate's process.

A module may pick its device by kind when imported (``TPU = jax.devices("tpu")[0]``) or build
its mesh from the devices it finds (``jax.make_mesh((8,), ("data",))``). Only a worker has
that device, with the policy's ``env:``; the gate's own process never starts JAX at all (on a
TPU it would take the chip from the workers; on a GPU, most of its memory). So `validate` and
`run` check a policy's callables by importing them in a worker (`gate.isolation.protocol.Check`),
the one the regions then run in. Here the accelerator's rule is planted
(tests/accelerator_rule.py): a module that fails unless its process holds the device stands
for ``jax.devices("tpu")``, which a CPU machine cannot give.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from accelerator_rule import AcceleratorRule
from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

MESH_MODULE = """
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

MESH_POLICY = """
version: 1
suite: mesh
env:
  XLA_FLAGS: --xla_force_host_platform_device_count=8
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: at-import, step: sharded:step, setup: sharded:setup}
"""


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_module_that_builds_its_mesh_at_import_sees_the_policys_eight_devices(
    tmp_path: Path, command: str
) -> None:
    repo = make_repo(tmp_path, {"sharded.py": MESH_MODULE, "policies/mesh.yaml": MESH_POLICY})
    # The gate's own process has one CPU device; only the policy's env asks for eight.
    run = run_gate(repo, command)
    assert run.returncode == 0, run
    assert "Number of devices" not in run.stdout + run.stderr, run
    if command == "run":
        assert "PASS  mesh.at-import" in run.stdout, run
        assert "cpu x8" in run.stdout, run


# Stands for ``jax.devices("tpu")`` at import: it works only in a process that holds the
# device, which under the planted rule is one whose JAX is not pinned to the CPU.
DEVICE_MODULE = """
import jax
import jax.numpy as jnp

if jax.config.jax_platforms == "cpu":
    raise RuntimeError("Unknown backend tpu. Available backends are ['cpu']")
DEVICE = jax.devices()[0]


def make():
    return (jax.device_put(jnp.arange(8.0), DEVICE),)


@jax.jit
def step(x):
    return x * SCALE


SCALE = 2.0
"""

DEVICE_POLICY = """
version: 1
suite: tpu
defaults:
  {warmup: 1, guarded_runs: 1, repeats: 3, timing: {rounds: 6, max_rounds: 12}, compare: always}
regions:
  - {name: by-kind, step: on_device:step, setup: on_device:make}
"""


def test_a_module_that_picks_its_device_at_import_validates_runs_and_compares(
    tmp_path: Path, accelerator_rule: AcceleratorRule
) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"on_device.py": DEVICE_MODULE, "policies/p.yaml": DEVICE_POLICY}, "base")
    validated = run_gate(repo, "validate")
    assert validated.returncode == 0, validated
    assert "1 policy, 1 region: valid" in validated.stdout, validated
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    assert "PASS  tpu.by-kind" in run.stdout, run
    compared = run_gate(repo, "run", "--base", "HEAD")
    assert compared.returncode == 0, compared
    assert "PASS  tpu.by-kind" in compared.stdout, compared
    assert "results vs base: 1 output leaf matches" in compared.stdout, compared
    assert "Unknown backend" not in compared.stdout + compared.stderr, compared
    accelerator_rule.assert_only_workers_held_the_device()
