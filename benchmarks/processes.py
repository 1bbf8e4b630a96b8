"""How the scenarios start processes: the gate, git, a floor script, a busy neighbour.

Each command runs in a process group of its own, the whole group killed afterwards:
``subprocess.run(timeout=...)`` kills only the child, and a gate's workers would outlive it and
hold its pipes open (tests/processes.py explains the same for the tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the gate's checkout the scenarios run

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


def commit_all(repo: Path, message: str = "base") -> None:
    """``repo`` made a git repository with everything in it committed on ``main``: the base
    that ``run --base HEAD`` compares the working tree with."""
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", message]):
        git(repo, *args)


def gate_env(
    gate: Path = ROOT, cache: Path | None = None, *, keep_cache: bool = False
) -> dict[str, str]:
    """This environment for a process that runs the gate from the checkout ``gate`` (first on
    ``PYTHONPATH``, before what the caller's holds: a device's JAX, carried wheels), with
    ``JAX_COMPILATION_CACHE_DIR`` set to ``cache``, or unset (each process a cold start), or
    with ``keep_cache`` as this environment has it."""
    env = dict(os.environ)
    if not keep_cache:
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(gate), env.get("PYTHONPATH")]))
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    return env


def timed(
    command: list[str],
    cwd: Path,
    env: Mapping[str, str],
    ok: tuple[int, ...] = (0,),
    timeout_s: float = 1800,
) -> tuple[float, float]:
    """Wall and CPU seconds of ``command``; an exit code outside ``ok`` stops the benchmark.

    CPU: user + system of the command and of every process it waited for (the gate's workers),
    which what else the machine runs changes less than the wall time.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = run_grouped(command, cwd, env, timeout_s, merge_stderr=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in ok:
        tail = textwrap.indent(done.stdout[-3000:], "    ")
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{tail}")
    return wall, cpu


def gate_regions(
    repo: Path,
    *args: str,
    report: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 900,
    timeout_option: str | None = None,
) -> list[dict[str, Any]]:
    """The regions of ``python -m gate run ARGS --json REPORT`` in ``repo`` (``env``: this one's,
    the checkout's gate first), as the report has them, whatever the run's verdict (exit 0 or 1);
    any other exit, or no report, stops the benchmark with the gate's output."""
    report = report or repo / ".gate-report.json"
    report.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "gate", "run", *args, "--json", str(report)]
    environ = gate_env() if env is None else env
    done = run_grouped(argv, repo, environ, timeout_s, timeout_option=timeout_option)
    if done.returncode not in (0, 1) or not report.exists():
        tail = textwrap.indent((done.stdout + done.stderr)[-3000:], "    ")
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}, no report:\n{tail}")
    regions: list[dict[str, Any]] = json.loads(report.read_text())["suites"][0]["regions"]
    return regions


def medians(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """The median wall and the median CPU seconds of `timed`'s pairs."""
    return statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs)


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
