"""The helpers that start the suite's processes kill whole process trees (tests/processes.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import communicate, process_gone, run, started

# A child that starts a grandchild holding its stdout, writes the grandchild's pid, and then
# exits (``exit``) or sleeps (``sleep``): either way the pipe stays open for ten minutes.
SPAWNER = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1], "w") as out:
    out.write(str(grandchild.pid))
print("spawned", flush=True)
if sys.argv[2] == "sleep":
    time.sleep(600)
"""


@pytest.mark.parametrize("child", ["exit", "sleep"])
def test_run_kills_the_whole_group_when_the_timeout_passes(tmp_path: Path, child: str) -> None:
    pid_file = tmp_path / "grandchild"
    started_at = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        run([sys.executable, "-c", SPAWNER, pid_file, child], timeout=2)
    took = time.monotonic() - started_at
    assert took < 15, f"run() returned after {took:.0f} s"
    assert process_gone(int(pid_file.read_text())), "the grandchild outlived the timeout"
    assert timed_out.value.stdout == "spawned\n"


class StepFailed(Exception):
    """What a test that fails while its process runs raises (any failure would do)."""


def fail_while_it_runs(argv: list[str | Path]) -> None:
    with started(argv, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "spawned\n"
        raise StepFailed(proc.pid)


def test_a_failing_test_takes_the_group_along(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    with pytest.raises(StepFailed) as failed:
        fail_while_it_runs([sys.executable, "-c", SPAWNER, pid_file, "sleep"])
    assert process_gone(failed.value.args[0])
    assert process_gone(int(pid_file.read_text())), "the grandchild outlived its test"


def test_communicate_kills_the_group_and_returns_the_output_so_far(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    argv = [sys.executable, "-c", SPAWNER, pid_file, "exit"]
    with started(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        with pytest.raises(subprocess.TimeoutExpired) as timed_out:
            communicate(proc, 2)
        assert proc.returncode == 0  # the child itself had exited; its grandchild held the pipe
    assert timed_out.value.stdout == "spawned\n"
    assert process_gone(int(pid_file.read_text()))


def test_run_kills_what_a_finished_process_left_behind(tmp_path: Path) -> None:
    # A daemon-like grandchild that let go of the pipes: the child's exit ends the wait, and the
    # group is killed all the same.
    pid_file = tmp_path / "grandchild"
    spawner = SPAWNER.replace("])", "], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")
    done = run([sys.executable, "-c", spawner, pid_file, "exit"], timeout=60)
    assert process_gone(int(pid_file.read_text())), "the grandchild outlived its parent's run"
    assert (done.returncode, done.stdout) == (0, "spawned\n"), done


def test_every_test_has_a_timeout(pytestconfig: pytest.Config) -> None:
    # pyproject.toml: a hang is a failure with a traceback, not a stuck CI job.
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed"
    assert float(pytestconfig.getini("timeout")) >= 60
    assert pytestconfig.getini("timeout_method") == "signal"
