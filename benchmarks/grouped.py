"""A command in a process group of its own, the whole group killed afterwards: the benchmarks'
one way to run the gate (and git, for the trees ``--base`` compares).

``subprocess.run(timeout=...)`` kills only the child: a gate's workers would outlive it and
hold its pipes open (tests/processes.py explains the same for the tests). Imported by the
scripts beside it, which run with this folder first on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

# Commits made without the user's or the machine's git configuration.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def run_grouped(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    *,
    merge_stderr: bool = False,
    timeout_option: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``argv``'s exit status and output; past ``timeout_s`` the benchmark stops (SystemExit).

    With ``merge_stderr``, stderr is interleaved into ``stdout`` and ``stderr`` is None.
    ``timeout_option`` names the option that set ``timeout_s``, for the message.
    """
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        option = f" ({timeout_option})" if timeout_option else ""
        raise SystemExit(f"{' '.join(argv)}: no result in {timeout_s:g} s{option}") from None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def git(repo: Path, *args: str) -> None:
    """``git ARGS`` in ``repo``, without the user's configuration; a failure stops the benchmark."""
    done = run_grouped(["git", *args], repo, {**os.environ, **GIT_ENV}, 60)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} in {repo}: {done.stderr.strip()}")


# The busy neighbour: another job on a shared runner, spinning one core all the time.
NEIGHBOUR = "while True: sum(i * i for i in range(100000))"


@contextlib.contextmanager
def busy_neighbour(on: bool = True) -> Iterator[int | None]:
    """A process spinning one core for the block, in a group of its own killed afterwards.

    Yields its pid (None when ``on`` is false: nothing is started).
    """
    if not on:
        yield None
        return
    proc = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR], stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        time.sleep(0.5)  # spinning before the first measurement
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def load_average() -> str:
    """The 1-minute load average, for the record (``?`` where the platform has none)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"
