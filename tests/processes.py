"""Starting processes from tests so that none can hang the suite or outlive its test.

Every process a test starts runs in a session (and so a process group) of its own, and is
waited for with a timeout. When the timeout passes, or the test fails while it runs, the whole
group is killed, not only the direct child: a grandchild that holds the output pipe would
otherwise keep `communicate()` blocked forever (`subprocess.run(timeout=...)` kills only the
child) and outlive the suite. Process trees that leave their group on purpose (the gate's
workers start sessions of their own) must stop themselves when their parent dies; the gate's do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# After SIGKILL: how long the group gets to die and release the pipes.
_REAP_S = 10.0


def process_gone(pid: int, limit_s: float = 10) -> bool:
    """Whether ``pid`` is gone within ``limit_s`` (a zombie counts: its parent may be gone too)."""
    end = time.monotonic() + limit_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc``'s process group (it leads one: see `started`); reap ``proc``.

    Safe after ``proc`` has exited: the group's id stays taken while any of its members lives,
    so it cannot name someone else's group.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(_REAP_S)


@contextlib.contextmanager
def started(argv: Sequence[str | Path], **popen: Any) -> Iterator[subprocess.Popen[str]]:
    """``Popen(argv)`` (text mode) in a session of its own; its whole group is killed on exit.

    Read its output with `communicate`, never with a bare ``proc.communicate()``. Its stdin is
    /dev/null unless given: out of the terminal's foreground group, a read would stop it.
    """
    popen.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen([str(a) for a in argv], text=True, start_new_session=True, **popen)
    try:
        yield proc
    finally:
        kill_group(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def communicate(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout=timeout)``; past the timeout its group is killed first.

    Raises `subprocess.TimeoutExpired` (with the output so far) when it timed out.
    """
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        kill_group(proc)
        # The group is dead, so the pipes close; a process that left the group and still holds
        # them must not block us either.
        with contextlib.suppress(subprocess.TimeoutExpired):
            out, err = proc.communicate(timeout=_REAP_S)
            exc.stdout, exc.stderr = out, err
        raise
    return out or "", err or ""


def run(
    argv: Sequence[str | Path], *, timeout: float, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """Like ``subprocess.run(argv, capture_output=True, text=True, timeout=timeout)``.

    But the process runs in a session of its own, and its whole group is killed when the timeout
    passes (raising `subprocess.TimeoutExpired`) and again once it has exited, so that nothing it
    started outlives it.
    """
    with started(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen) as proc:
        out, err = communicate(proc, timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
