"""Starting a worker process: its pipes and command line; and a run's first worker, started
before the gate's own process has imported the rest of itself.

A worker spends its first second or more importing jax and starting the backend (eleven on a
TPU v5e, opening the chip), and the gate's own process, until it starts one, imports its modules
and reads the policies: ~0.25 s on a 2-core CPU machine, ~0.7 s on a TPU host
(`benchmarks/parent_start.py`). So ``transfer-gate run`` starts its first worker as it begins
(`start_first_worker`), with what the first region's worker would have: the gate's environment,
prepared, and a device of the pool. The first scheduler takes it if its policy asks for that
same environment in the same tree (`take_first_worker`); a policy with an ``env:`` of its own,
or a run that stops before it runs a region, lets it go (`stop_first_worker`).

This module imports only what that needs, so that the worker starts before the rest of the gate
is imported.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gate.files import POLICY_SUFFIXES, policy_files_in
from gate.isolation.device_pool import DevicePool, HeldSlot
from gate.isolation.environment import worker_environment
from gate.package import PACKAGE_DIR

# The folder that holds this `gate` package (site-packages, or a source checkout).
_GATE_HOME = os.path.dirname(PACKAGE_DIR)
# How long a killed worker may take to be gone before it is given up on (keeping its device).
KILLED_WAIT_S = 5.0
# An ``env`` key wherever YAML may put one: a block line (``env:``, ``- env:``) or inside a
# flow mapping (``{version: 1, env: {...}}``); a comment's is none. What else it matches (a
# ``my-env:`` key, a quoted "env:") only costs the early start.
_ENV_KEY = re.compile(r"(?:^|[{,\s-])['\"]?env['\"]?[ \t]*:")
_COMMENT = re.compile(r"(?:^|[ \t])#.*$", re.MULTILINE)
_MOST_FILES_READ = 200


def worker_command(jobs_fd: int, results_fd: int) -> list[str]:
    """The command line that starts a worker: this gate's own package, whatever the cwd holds.

    Workers run in the user's repo root, and ``python -m gate.isolation.worker`` would put it
    first on `sys.path`: a ``gate`` package of the user's (a common name) would be imported
    instead of this one. ``-c`` puts ``""`` there instead, which the bootstrap replaces with the
    folder that holds this package (``-P`` would do as well, but only from Python 3.11). The
    user's code still imports as before: `gate.policy.resolve.python_path` puts the policy's
    python_path and the repo root first while a region's code is imported and run.
    """
    bootstrap = (
        f"import sys; sys.path[0] = {_GATE_HOME!r}; "
        "from gate.isolation.worker import main; raise SystemExit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-u", "-c", bootstrap, str(jobs_fd), str(results_fd)]


@dataclass
class Spawned:
    """A worker process just started, and this side's ends of its three pipes."""

    process: subprocess.Popen[bytes]
    jobs: int  # write end: requests go here
    results: int  # read end: the worker's framed messages
    output: int  # read end: its stdout and stderr
    repo_root: Path
    env: dict[str, str]  # as asked for, without the device's variables
    device: HeldSlot | None

    def stop(self) -> None:
        """Kill it and its process group, close the pipes, and give the device back once it is
        gone (one that would not die keeps it, so that none starts beside it)."""
        gone = kill_group(self.process) is not None
        for fd in (self.jobs, self.results, self.output):
            os.close(fd)
        if gone and self.device is not None:
            self.device.release()


def kill_group(process: subprocess.Popen[bytes]) -> int | None:
    """SIGKILL to the worker's process group (what the code under test started dies with it);
    its exit status once reaped, or None when it is still there after `KILLED_WAIT_S`."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        return process.wait(KILLED_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


def spawn(repo_root: Path, env: dict[str, str], device: HeldSlot | None) -> Spawned:
    """Start a worker in ``repo_root`` with ``env``, on ``device`` (its variables over ``env``).

    In a session of its own: Ctrl-C at a terminal reaches only the gate, and killing the
    worker's process group also stops what the code under test started. On failure the
    device is released and the exception raised.
    """
    jobs_read, jobs_write = os.pipe()
    results_read, results_write = os.pipe()
    output_read, output_write = os.pipe()
    try:
        process = subprocess.Popen(
            worker_command(jobs_read, results_write),
            cwd=repo_root,
            env={**env, **(device.slot.env if device is not None else {})},
            stdin=subprocess.DEVNULL,
            stdout=output_write,
            stderr=subprocess.STDOUT,
            pass_fds=(jobs_read, results_write),
            start_new_session=True,
        )
    except BaseException:
        for fd in (jobs_write, results_read, output_read):
            os.close(fd)
        if device is not None:
            device.release()
        raise
    finally:
        for fd in (jobs_read, results_write, output_write):
            os.close(fd)
    return Spawned(process, jobs_write, results_read, output_read, repo_root, env, device)


class _First:
    """The run's first worker, until a scheduler takes it or the run lets it go."""

    spawned: Spawned | None = None


def start_first_worker(
    repo_root: Path, environ: Mapping[str, str], policy_paths: Sequence[str]
) -> None:
    """Start the worker a region of ``repo_root`` without an ``env:`` of its own would get,
    now; not when it would have to wait for a device (the first request does that, saying so),
    nor when one is started already.

    Nor when a policy under ``policy_paths`` (files, folders of them; more than the command
    names is fine) may have an ``env:``: its worker would start first (`Scheduler.check` asks
    for the other environments first) and this one, holding the device, would be stopped for
    it; a TPU chip can refuse the next process for a few seconds after one ended. Looked for in
    the files' text, so as not to import the policy reader. Nothing happens where it cannot
    start: the run then starts its worker as before, and says why where that fails too.
    """
    if _First.spawned is not None or _may_ask_for_env(repo_root, policy_paths):
        return
    # As a scheduler computes it: the run's own settings go with each job, never in here.
    env = worker_environment(environ, None)
    try:
        _First.spawned = spawn_if_device_free(repo_root, env)
    except Exception:  # the run's own start of a worker reports what is wrong
        return


def spawn_if_device_free(repo_root: Path, env: dict[str, str]) -> Spawned | None:
    """A worker started now for ``env``, on a free device of its pool; None when it would have
    to wait for one (the first request does that, saying so)."""
    pool = DevicePool.for_environment(env)
    device = pool.take_free() if pool is not None else None
    if pool is not None and device is None:
        return None
    return spawn(repo_root, env, device)


def _may_ask_for_env(repo_root: Path, paths: Sequence[str]) -> bool:
    """Whether a policy file under ``paths`` has an ``env`` key (at any depth, in block or
    flow style), or more files than are worth reading to know, or a path that cannot be looked
    at (an option's value too long for a file name: the command line's own check says what is
    wrong)."""
    files: list[Path] = []
    try:
        for given in paths:
            target = repo_root / given
            if target.is_dir():  # as the policy reader finds them
                found = policy_files_in(target)
                files.extend(itertools.islice(found, _MOST_FILES_READ + 1 - len(files)))
            elif target.suffix in POLICY_SUFFIXES and target.is_file():
                files.append(target)
            if len(files) > _MOST_FILES_READ:
                return True
        return any(
            _ENV_KEY.search(_COMMENT.sub("", file.read_text(encoding="utf-8", errors="replace")))
            for file in files
        )
    except (OSError, ValueError):
        return True


def take_first_worker(repo_root: Path, env: Mapping[str, str]) -> Spawned | None:
    """The first worker, if it was started for ``env`` in ``repo_root``; one started for
    something else is stopped (its device is then free for the worker that is wanted)."""
    spawned, _First.spawned = _First.spawned, None
    if spawned is None:
        return None
    if spawned.env == dict(env) and spawned.repo_root == repo_root:
        return spawned
    spawned.stop()
    return None


def stop_first_worker() -> None:
    """Stop the first worker if no scheduler took it (the run ended before a region ran)."""
    spawned, _First.spawned = _First.spawned, None
    if spawned is not None:
        spawned.stop()
