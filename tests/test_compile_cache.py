"""JAX's persistent compilation cache, when the user keeps one: what each worker gets."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

from gate.isolation.compile_cache import (
    CACHE_DIR,
    METADATA_IN_KEY,
    MIN_COMPILE_TIME,
    MIN_ENTRY_SIZE,
    use_compile_cache,
)
from gate.isolation.scheduler import worker_environment
from gate.policy.load import load_policy
from gate.policy.model import Policy


def _policy(tmp_path: Path, env: str = "") -> Policy:
    (tmp_path / "p.yaml").write_text(
        f"version: 1\n{env}regions:\n  - name: r\n    step: steps:step\n"
    )
    return load_policy(tmp_path / "p.yaml", tmp_path)


def test_the_users_cache_keeps_small_programs_keyed_with_their_source_lines(
    tmp_path: Path,
) -> None:
    policy = _policy(tmp_path)
    env = worker_environment({CACHE_DIR: "/cache/jax"}, policy)
    assert (env[MIN_COMPILE_TIME], env[MIN_ENTRY_SIZE], env[METADATA_IN_KEY]) == ("0", "0", "true")


def test_the_users_own_thresholds_are_kept_and_a_policy_may_turn_the_cache_off(
    tmp_path: Path,
) -> None:
    policy = _policy(tmp_path)
    parent = {CACHE_DIR: "/cache/jax", MIN_COMPILE_TIME: "1", METADATA_IN_KEY: "false"}
    env = worker_environment(parent, policy)
    assert (env[CACHE_DIR], env[MIN_COMPILE_TIME], env[MIN_ENTRY_SIZE], env[METADATA_IN_KEY]) == (
        "/cache/jax",
        "1",
        "0",
        "false",
    )
    policy = _policy(tmp_path, f'env:\n  {CACHE_DIR}: ""\n')
    env = worker_environment(parent, policy)
    assert env[CACHE_DIR] == ""
    assert MIN_ENTRY_SIZE not in env


def test_without_a_cache_the_gate_makes_none() -> None:
    env: dict[str, str] = {}
    use_compile_cache(env)
    assert env == {}


STEPS = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((2,), ("data",))


def batch():
    return (jax.device_put(jnp.ones((4, 2)), NamedSharding(MESH, P("data"))),)


@jax.jit
def reduce(x):
    return jax.lax.with_sharding_constraint(x.sum(0), NamedSharding(MESH, P()))
"""

POLICY = """
version: 1
env:
  XLA_FLAGS: --xla_force_host_platform_device_count=2
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: r, step: steps:reduce, setup: steps:batch}
"""


@pytest.mark.parametrize(
    ("env", "head_lines"),
    [
        ({}, False),
        ({METADATA_IN_KEY: None}, False),
        ({METADATA_IN_KEY: "false"}, True),  # JAX's own default, to show what it did
    ],
    ids=["no cache", "the user's cache", "keyed without source lines"],
)
def test_the_base_reads_its_own_collectives_lines_whatever_the_cache_holds(
    tmp_path: Path, env: dict[str, str | None], head_lines: bool
) -> None:
    """The head's program is written to the cache first; the base's is the same program from
    another checkout, its lines two further up. Keyed without its source lines, the base read
    back the head's executable, lines and all: the unchanged collective was then at another
    line than the base's own (once "new" and "gone"; since issue 37 "moved", which passes).
    Keyed with them, the base reads its own lines and the collective is simply unchanged.

    The trees run one after the other, as on an accelerator: JAX_PLATFORMS is left unset (the
    CPU all the same, but not by name), where with ``cpu`` a change to the region's own module
    runs both at once, and which compiles first would be a race."""
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": STEPS, "policies/p.yaml": POLICY}, "base")
    # Code, not comments: comments alone leave the code the base's, and the region runs once.
    make_repo(repo, {"steps.py": "ONE = 1\nTWO = 2\n" + STEPS.lstrip("\n")})
    if env:
        env = {CACHE_DIR: str(tmp_path / "cache"), **env}
    run = run_gate(repo, "run", "--base", "HEAD", env={**env, "JAX_PLATFORMS": None})
    moved = "not new (same kind, shapes and groups)"
    assert (moved in run.stdout) is head_lines, run
    assert "new all-reduce" not in run.stdout, run
    assert "no longer runs" not in run.stdout, run
    assert run.returncode == 0, run


SMALL_STEPS = """
import jax
import jax.numpy as jnp


def batch():
    return (jnp.arange(8.0),)


@jax.jit
def step(x):
    return jnp.tanh(x * 2.0).sum()
"""

SMALL_POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2}
regions:
  - {name: r, step: steps:step, setup: steps:batch}
"""


def test_a_second_run_base_reads_the_bases_programs_back_from_the_users_cache(
    tmp_path: Path,
) -> None:
    """The cache keys each program by its files' paths. The base is checked out in the same
    folder every run of the checkout (`gate.compare.worktree`), so a second run compiles
    nothing new: its base's programs are read back, as the head's are. Checked out in a fresh
    folder each run, the base's programs were keyed anew and compiled again every time."""
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": SMALL_STEPS, "policies/p.yaml": SMALL_POLICY}, "base")
    cache = tmp_path / "cache"
    kept: list[set[str]] = []
    for _ in range(2):
        run = run_gate(repo, "run", "--base", "HEAD", env={CACHE_DIR: str(cache)})
        assert run.returncode == 0, run
        kept.append({p.name for p in cache.rglob("*") if p.is_file()})
    assert kept[0], "the first run kept no program: is the cache on?"
    assert kept[1] == kept[0]
