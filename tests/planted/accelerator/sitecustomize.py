"""The accelerator's rule, planted on the CPU: one process at a time holds the device.

A TPU chip admits one process: a second one that starts JAX's TPU backend while another holds
it fails at once, with libtpu's lockfile error, and does not fall back to the CPU
(FIELD-NOTES.md, "On a TPU"). A GPU's memory is split between the processes that share it.
CI has no accelerator, so the tests that must hold to the rule put this folder first on the
``PYTHONPATH`` of the gate they run (`tests/accelerator_rule.py`): then, in every process
started with it, the first start of a JAX backend that is not pinned to the CPU takes one
exclusive lock, the file ``TRANSFER_GATE_PLANTED_DEVICE_LOCK`` names, and keeps it until the
process ends, or fails exactly as libtpu does when another process holds it. A process pinned
to the CPU (``jax_platforms`` is ``cpu``) takes nothing, as on a TPU machine.

With ``TRANSFER_GATE_PLANTED_CHIPS=N`` the host has N chips: ``/dev/accel0``… exist for the
gate's own counting (`glob.glob` answers for them), each chip has a lock of its own (the
lock file's name with ``.N`` appended), and a process takes the chips its
``TPU_VISIBLE_CHIPS`` lists, or all of them, as libtpu does.

With ``TRANSFER_GATE_PLANTED_REFUSALS=FILE:K``, the first K processes that start a backend
fail with the lockfile error whatever the locks say (counted in FILE): a chip that refuses
the next process for a moment after another ended.

Each backend start is also written to ``TRANSFER_GATE_PLANTED_BACKEND_LOG``, one line per
process: its pid, whether it held the device (and which chips), and its command line, so a
test can say which process opened the device.
"""

from __future__ import annotations

import fcntl
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence

LOCK = os.environ.get("TRANSFER_GATE_PLANTED_DEVICE_LOCK")
LOG = os.environ.get("TRANSFER_GATE_PLANTED_BACKEND_LOG")
CHIPS = int(os.environ.get("TRANSFER_GATE_PLANTED_CHIPS", "0"))
REFUSALS = os.environ.get("TRANSFER_GATE_PLANTED_REFUSALS")
BUSY = (
    "Unable to initialize backend 'tpu': ABORTED: Internal error when accessing libtpu "
    'multi-process lockfile. Run "$ sudo lsof -w /dev/accel0" to figure out which process is '
    "holding the TPU."
)
_held: list[int] = []  # the lock's file descriptor, once taken: kept open until exit


def _refused() -> bool:
    """Whether this start is one of the first K that the chip refuses."""
    if not REFUSALS:
        return False
    path, count = REFUSALS.rsplit(":", 1)
    with open(path, "a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        seen = len(file.read())
        file.write("x")
    return seen < int(count)


def _locks() -> list[str]:
    """The lock files of the chips this process would take."""
    assert LOCK
    if not CHIPS:
        return [LOCK]
    visible = os.environ.get("TPU_VISIBLE_CHIPS")
    chips = [int(c) for c in visible.split(",")] if visible else list(range(CHIPS))
    return [f"{LOCK}.{chip}" for chip in chips]


def _started(pinned: bool) -> None:
    """Take the device for this process, unless it is pinned to the CPU; log the start."""
    if not pinned and LOCK:
        if _refused():
            raise RuntimeError(BUSY)
        for lock in _locks():
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RuntimeError(BUSY) from None
            _held.append(fd)
    if LOG:
        with open("/proc/self/cmdline", "rb") as cmdline:  # ``-c``'s code too, unlike sys.argv
            command = " ".join(cmdline.read().decode(errors="replace").split("\0")).strip()
        kind = "cpu" if pinned else f"device {os.environ.get('TPU_VISIBLE_CHIPS', 'all')}"
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()}\t{kind}\t{' '.join(command.split())}\n")


def _wrap(module: types.ModuleType) -> None:
    original = module.backends
    checked: list[bool] = []

    def backends() -> object:
        if not checked:
            platforms = module.config.jax_platforms.value or ""
            _started({p.strip() for p in platforms.split(",") if p.strip()} == {"cpu"})
            checked.append(True)
        return original()

    module.backends = backends


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps ``jax._src.xla_bridge.backends`` as the module is loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "jax._src.xla_bridge":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            _wrap(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _Finder())

if CHIPS:
    import glob

    _glob = glob.glob

    def _planted_glob(pattern: str, *args: object, **kwargs: object) -> list[str]:
        if pattern == "/dev/accel*":
            return [f"/dev/accel{n}" for n in range(CHIPS)]
        return _glob(pattern, *args, **kwargs)  # type: ignore[arg-type]

    glob.glob = _planted_glob
