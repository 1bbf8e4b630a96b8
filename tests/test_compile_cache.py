"""The run's persistent compilation cache: which folder workers get, and its lifetime."""

from __future__ import annotations

from pathlib import Path

from gate.isolation.compile_cache import (
    CACHE_DIR,
    MIN_COMPILE_TIME,
    MIN_ENTRY_SIZE,
    RunCache,
    use_compile_cache,
)
from gate.isolation.scheduler import Scheduler, worker_environment
from gate.policy.load import load_policy
from gate.policy.model import Policy


def _policy(tmp_path: Path, env: str = "") -> Policy:
    (tmp_path / "p.yaml").write_text(
        f"version: 1\n{env}regions:\n  - name: r\n    step: steps:step\n"
    )
    return load_policy(tmp_path / "p.yaml", tmp_path)


def test_workers_get_the_runs_cache_with_small_programs_kept(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    env = worker_environment({}, policy, run_cache=lambda: "/tmp/run-cache")
    assert (env[CACHE_DIR], env[MIN_COMPILE_TIME], env[MIN_ENTRY_SIZE]) == (
        "/tmp/run-cache",
        "0",
        "0",
    )


def test_the_users_cache_and_thresholds_are_kept(tmp_path: Path) -> None:
    def never() -> str:
        raise AssertionError("no run cache is needed when the user has one")

    policy = _policy(tmp_path)
    parent = {CACHE_DIR: "/cache/jax", MIN_COMPILE_TIME: "1"}
    env = worker_environment(parent, policy, run_cache=never)
    assert (env[CACHE_DIR], env[MIN_COMPILE_TIME], env[MIN_ENTRY_SIZE]) == ("/cache/jax", "1", "0")
    # A policy's env: names one too (or "" to turn JAX's cache off).
    policy = _policy(tmp_path, f'env:\n  {CACHE_DIR}: ""\n')
    env = worker_environment({}, policy, run_cache=never)
    assert env[CACHE_DIR] == ""


def test_without_a_run_cache_nothing_is_added() -> None:
    env: dict[str, str] = {}
    use_compile_cache(env, None)
    assert env == {}


def test_the_run_cache_is_made_when_asked_for_and_removed_after_the_run(tmp_path: Path) -> None:
    cache = RunCache()
    folder = Path(cache.path())
    assert folder.is_dir()
    assert cache.path() == str(folder)  # made once
    cache.remove()
    assert not folder.exists()
    with Scheduler(tmp_path, environ={}) as scheduler:
        made = Path(scheduler._cache.path())
        assert made.is_dir()
    assert not made.exists()
