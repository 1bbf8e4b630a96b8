"""A run's first worker starts as the gate does, before the gate imports the rest of itself
(gate.isolation.spawn): the regions run in it, and it never outlives a run that had no use
for it. The run's own settings reach the region with each job, never through an environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, make_repo, run_gate
from processes import process_gone

from gate.cli.exit_codes import ExitCode
from gate.isolation import spawn, worker_process
from gate.isolation.environment import worker_environment
from gate.isolation.protocol import Check, Job, Request
from gate.isolation.run_settings import RunSettings

# Environment variables that once carried the run's settings to its workers.
SETTINGS = ("TRANSFER_GATE_TRACES", "TRANSFER_GATE_OP_TIMES")
STEPS = """
import json
import os

import jax
import jax.numpy as jnp

SETTINGS = ("TRANSFER_GATE_TRACES", "TRANSFER_GATE_OP_TIMES")


def batch():
    return (jnp.ones(4),)


@jax.jit
def double(x):
    return x + x


def step(x):
    # Which process ran it, and the run's settings as the worker's gate saw them.
    seen = {name: os.environ.get(name) for name in SETTINGS}
    with open("ran.jsonl", "a") as out:
        out.write(json.dumps({"pid": os.getpid(), **seen}) + "\\n")
    return double(x)
"""


def _policy(*names: str, env: str = "") -> str:
    regions = "".join(
        f"  - name: {name}\n    step: steps:step\n    setup: steps:batch\n" for name in names
    )
    return f"version: 1\n{env}{FAST_DEFAULTS}regions:\n{regions}"


def _ran(repo: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (repo / "ran.jsonl").read_text().splitlines()]


# Records each worker the gate starts, and which of its own modules it had imported by then.
SPAWN_LOG = """
import json
import sys

from gate.isolation import spawn

_spawn = spawn.spawn


def recorded(repo_root, env, device):
    spawned = _spawn(repo_root, env, device)
    imported = sorted(m for m in sys.modules if m.startswith("gate."))
    with open({log!r}, "a") as out:
        out.write(json.dumps({{"pid": spawned.process.pid, "imported": imported}}) + "\\n")
    return spawned


spawn.spawn = recorded
"""
# After SPAWN_LOG: which of `ONLY_SOME_RUNS` the gate's process had imported when it ended (a
# worker leaves by os._exit, past atexit).
ENDED_LOG = """
import atexit


def ended():
    imported = sorted(m for m in {only!r} if m in sys.modules)
    with open({log!r}, "a") as out:
        out.write(json.dumps({{"ended": True, "imported": imported}}) + "\\n")


atexit.register(ended)
"""


# What only `run --base`, a stored baseline, `baseline` or `doctor` use: a plain run's own
# process leaves them to its workers (numpy alone was ~0.1 CPU-s of its ~0.35).
ONLY_SOME_RUNS = ("numpy", "packaging.requirements", "importlib.metadata")


def test_the_first_worker_starts_before_the_gate_imports_the_rest_and_runs_every_region(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"steps.py": STEPS, "policies/p.yaml": _policy("a", "b")})
    log = tmp_path / "spawns.jsonl"
    planted = SPAWN_LOG.format(log=str(log)) + ENDED_LOG.format(log=str(log), only=ONLY_SOME_RUNS)
    site = make_repo(tmp_path / "site", {"sitecustomize.py": planted})
    run = run_gate(repo, "run", env={"PYTHONPATH": str(site)})
    assert run.returncode == ExitCode.OK, run
    [spawned, ended] = [json.loads(line) for line in log.read_text().splitlines()]
    assert ended == {"ended": True, "imported": []}, ended
    # Started by gate.cli.main before it imported any command, the policy reader or the
    # scheduler: what they cost overlaps the worker's own start.
    assert "gate.cli.run" not in spawned["imported"], spawned
    assert "gate.isolation.scheduler" not in spawned["imported"], spawned
    assert "gate.policy.load" not in spawned["imported"], json.dumps(spawned)
    assert {entry["pid"] for entry in _ran(repo)} == {spawned["pid"]}


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[spawn.Spawned]:
    """Every worker the gate starts in this process, in order."""
    started: list[spawn.Spawned] = []
    real = spawn.spawn

    def recorded(*args: object, **kwargs: object) -> spawn.Spawned:
        spawned = real(*args, **kwargs)  # type: ignore[arg-type]
        started.append(spawned)
        return spawned

    monkeypatch.setattr(spawn, "spawn", recorded)
    monkeypatch.setattr(worker_process, "spawn", recorded)
    return started


def test_the_runs_settings_reach_the_worker_with_each_job_not_in_its_environment(
    tmp_path: Path, spawns: list[spawn.Spawned], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy("a")})
    sent: list[Job] = []
    checks: list[Check] = []
    real = worker_process.WorkerProcess.send

    def recorded(self: worker_process.WorkerProcess, job: Request) -> bool:
        if isinstance(job, Job):
            sent.append(job)
        elif isinstance(job, Check):
            checks.append(job)
        return real(self, job)

    monkeypatch.setattr(worker_process.WorkerProcess, "send", recorded)
    # What the gate's workers once read them from, set in the shell: it changes nothing.
    elsewhere = tmp_path / "elsewhere"
    shell = {name: str(elsewhere) for name in SETTINGS}
    run = run_gate(repo, "run", env=shell)
    assert run.returncode == ExitCode.OK, run
    [worker] = spawns  # the one started first: no second one for another environment
    [job] = sent
    # A plain run records no footprint: its worker installs no audit hook to hear one.
    [check] = checks
    assert check.audited is False
    assert job.audited is False
    # A plain run with no stored step times: traces kept beside the reports, none taken.
    assert job.settings == RunSettings(
        (repo / "reports" / "transfer-gate-traces").resolve(), frozenset()
    )
    seen = _ran(repo)[0]
    assert seen["pid"] == worker.process.pid
    # The worker's environment is the shell's, nothing of the run's own added to it.
    assert seen == {"pid": worker.process.pid, **shell}
    assert not elsewhere.exists()


def test_a_policy_with_an_env_gets_no_first_worker_to_stop(
    tmp_path: Path, spawns: list[spawn.Spawned]
) -> None:
    two = "env:\n  XLA_FLAGS: --xla_force_host_platform_device_count=2\n"
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy("a", env=two)})
    run = run_gate(repo, "run")
    assert run.returncode == ExitCode.OK, run
    # One worker, the policy's: none was started for the gate's own environment and stopped
    # (on a TPU, the chip may refuse the next process for a few seconds after one ended).
    [worker] = spawns
    assert "--xla_force_host_platform_device_count=2" in worker.env["XLA_FLAGS"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("run", "--no-such-option"), ExitCode.USAGE),
        (("run", "--base", "no-such-ref"), ExitCode.USAGE),
        (("run", "policies/missing.yaml"), ExitCode.USAGE),
    ],
    ids=["usage error", "bad --base", "missing policy"],
)
def test_a_run_that_ends_before_any_region_stops_its_first_worker(
    tmp_path: Path, spawns: list[spawn.Spawned], args: tuple[str, ...], code: ExitCode
) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy("a")})
    run = run_gate(repo, *args)
    assert run.returncode == code, run
    [worker] = spawns  # started as the gate began, before the command line was read
    assert process_gone(worker.process.pid), "the unused first worker outlived the run"
    assert not (repo / "ran.jsonl").exists()


# Sends the gate SIGTERM once its first worker has started, before the run's own handlers.
TERM_EARLY = """
import os
import signal

from gate.cli import main

_main = main._main


def terminated(argv):
    os.kill(os.getpid(), signal.SIGTERM)
    return _main(argv)


main._main = terminated
"""


def test_sigterm_before_the_runs_handlers_stops_the_first_worker_too(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"steps.py": STEPS, "policies/p.yaml": _policy("a")})
    log = tmp_path / "spawns.jsonl"
    site = make_repo(
        tmp_path / "site",
        {"sitecustomize.py": SPAWN_LOG.format(log=str(log)) + TERM_EARLY},
    )
    run = run_gate(repo, "run", env={"PYTHONPATH": str(site)})
    # Ended through its finally blocks (the status a shell gives SIGTERM), not by the signal,
    # which would leave the worker, in a session of its own, starting up on its own.
    assert run.returncode == 128 + 15, run
    [spawned] = [json.loads(line) for line in log.read_text().splitlines()]
    assert process_gone(spawned["pid"], limit_s=0)  # stopped before the gate exited
    assert not (repo / "ran.jsonl").exists()


def test_a_first_worker_for_another_environment_is_stopped_and_one_for_this_one_taken(
    tmp_path: Path,
) -> None:
    environ = {**os.environ, "JAX_PLATFORMS": "cpu"}
    spawn.start_first_worker(tmp_path, environ, [])
    other = {**worker_environment(environ, None), "XLA_FLAGS": "--xla_dump_to=/nowhere"}
    first = spawn._First.spawned
    assert first is not None
    assert spawn.take_first_worker(tmp_path, other) is None
    assert process_gone(first.process.pid)  # gone before another worker may start

    spawn.start_first_worker(tmp_path, environ, [])
    taken = spawn.take_first_worker(tmp_path, worker_environment(environ, None))
    assert taken is not None
    assert spawn._First.spawned is None  # taken once
    taken.stop()
    spawn.stop_first_worker()  # nothing left to stop


def test_policies_are_read_for_an_env_line_without_the_policy_reader(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "policies/plain.yaml": _policy("a"),
            "policies/deep/with_env.yml": "version: 1\n# env: a comment is no env\nregions: []\n",
            "other/p.yaml": "version: 1\nenv:\n  A: '1'\nregions: []\n",
            # Flow style, the whole file or one region: an env all the same.
            "flow/top.yaml": "{version: 1, env: {A: '1'}, regions: []}  # env: here too\n",
            "flow/region.yaml": "version: 1\nregions:\n  - {name: a, step: 's:f', env: {A: '1'}}\n",
            "flow/none.yaml": "{version: 1, regions: [{name: environment, step: 's:env'}]}\n",
            # A package's file in a virtual environment is no policy: the reader skips it too.
            "policies/.venv/lib/site.yaml": "env: {A: 1}\n",
        },
    )
    assert not spawn._may_ask_for_env(repo, ["policies", "reports", "--junit"])
    assert spawn._may_ask_for_env(repo, ["policies", "other"])
    assert spawn._may_ask_for_env(repo, ["other/p.yaml"])
    assert spawn._may_ask_for_env(repo, ["flow/top.yaml"])
    assert spawn._may_ask_for_env(repo, ["flow/region.yaml"])
    assert not spawn._may_ask_for_env(repo, ["flow/none.yaml"])
    many = make_repo(tmp_path / "many", {f"p{i}.yaml": "version: 1\n" for i in range(201)})
    assert spawn._may_ask_for_env(many, ["."])  # past what is worth reading: not started


def test_a_path_that_cannot_be_looked_at_is_the_command_lines_to_refuse(
    tmp_path: Path, spawns: list[spawn.Spawned]
) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": _policy("a")})
    assert spawn._may_ask_for_env(repo, ["x" * 300])  # too long a name: not started
    run = run_gate(repo, "run", "x" * 300)
    assert run.returncode == ExitCode.USAGE, run
    assert "Traceback" not in run.stderr, run
    assert spawns == []
