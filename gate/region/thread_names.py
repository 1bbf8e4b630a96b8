"""A thread's name without the numbers Python gives each new one: one name for every run."""

from __future__ import annotations

import re

# The numbers Python puts in the names it makes up: `threading.Thread`'s
# ``Thread-7`` (``Thread-7 (worker)`` with a target), `ThreadPoolExecutor`'s
# ``ThreadPoolExecutor-3_0`` (the pool's number, then the worker's; with
# ``thread_name_prefix="loader"``, ``loader_0``; asyncio's default executor,
# ``asyncio_0``) and ``Dummy-2`` for a thread `threading` did not start.
_THREAD_N = re.compile(r"^Thread-\d+\s*")
_POOL_N = re.compile(r"^ThreadPoolExecutor-\d+_")
_WORKER_N = re.compile(r"_\d+$")
_DUMMY_N = re.compile(r"^Dummy-\d+$")


def thread_label(name: str) -> str:
    """A thread's name as a finding shows it: the same for every run of one line.

    A step that starts a thread or a pool per call gets a new name each run
    (``ThreadPoolExecutor-14_0``, ``-15_0``, ...); keyed by the name, one leak
    would be one finding per run. A thread started with a target is named by
    it (``Thread-7 (worker)`` is ``worker``, a bare ``Thread-7`` ``thread``);
    the other numbers Python makes up become ``*`` (``ThreadPoolExecutor-*_*``,
    ``loader_*``, ``asyncio_*``: a trailing ``_N`` is read as a pool worker's
    number, so a user's ``shard_0`` and ``shard_1`` are one ``shard_*`` too);
    other names the user chose (``metrics-logger``, ``worker-1``) stay as they are.
    """
    if _THREAD_N.match(name):
        return _THREAD_N.sub("", name).strip("()") or "thread"
    if _DUMMY_N.match(name):
        return "Dummy-*"
    return _POOL_N.sub("ThreadPoolExecutor-*_", _WORKER_N.sub("_*", name))
