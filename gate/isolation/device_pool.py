"""The accelerators the gate's workers run on, lent to one worker at a time.

A TPU chip admits one process: a second one that starts JAX's TPU backend fails with libtpu's
lockfile error. Processes that share a GPU split its memory. So each device (a TPU chip, or
the machine's GPUs together) is a `Slot`, and a worker is started on a slot only once the
gate holds it: an exclusive lock file per slot in the system's temporary folder, held from
before the worker starts until it is gone (`gate.isolation.worker_process`). The lock is the
gate's own, across its processes: two ``run --shard`` jobs on one host take different chips,
or the second waits, saying who holds what, instead of failing on libtpu's error. A process
that is not the gate's (a notebook, ``doctor``) is not in the pool: a worker that meets one
is refused by the device itself, and the scheduler says who holds it
(`gate.machine.holders`).

A host with several TPU chips has a slot per chip, each worker on its own chip as JAX's own
TPU test suite gives them out (`gate.machine.chips`): regions then run side by side, one
worker per chip (`gate.isolation.scheduler.run_isolated`). A host's GPUs are one slot: a
worker sees them all, as the user's code would. On the CPU there is no pool: workers share
its cores as any processes do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gate.machine.chips import host_chips
from gate.machine.devices import gpu_files

if TYPE_CHECKING:  # imported before the rest of the gate (gate.isolation.spawn)
    from gate.isolation.cancellation import Cancellation

# Where the lock files are: the system's temporary folder, shared by the gate's processes
# on the host; an environment variable moves it (tests: a folder of their own).
LOCK_DIR = "TRANSFER_GATE_DEVICE_LOCKS"
_POLL_S = 0.5


@dataclass(frozen=True)
class Slot:
    """One device a worker may be started on, and what that worker is started with."""

    name: str  # "TPU chip 2", "the GPUs"
    lock: str  # its lock file's name
    env: Mapping[str, str] = field(default_factory=dict)
    # Two of the gate's workers may hold it at once (``run --base``'s two trees): a GPU, its
    # memory shared out between them; never a TPU chip, which admits one process.
    shared: bool = False


class HeldSlot:
    """A slot this process holds, until `release`."""

    def __init__(self, slot: Slot, fd: int) -> None:
        self.slot = slot
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the lock


@dataclass(frozen=True)
class DevicePool:
    """The slots of this host that a worker started with a given environment would use."""

    slots: tuple[Slot, ...]
    folder: str

    @classmethod
    def for_environment(cls, env: Mapping[str, str]) -> DevicePool | None:
        """The pool of a worker started with ``env``; None when it would run on the CPU only.

        Raises `gate.machine.chips.ChipsError` for a ``TPU_VISIBLE_CHIPS`` that names no chip
        of this host.
        """
        folder = env.get(LOCK_DIR) or tempfile.gettempdir()
        chips = host_chips(env)
        if chips.chips:
            shared = chips.shared_out
            return cls(
                tuple(
                    Slot(
                        f"TPU chip {chip}",
                        f"tpu-chip-{chip}",
                        chips.worker_environment(slot) if shared else {},
                    )
                    for slot, chip in enumerate(chips.chips)
                ),
                folder,
            )
        platforms = {p.strip() for p in env.get("JAX_PLATFORMS", "").split(",") if p.strip()}
        if gpu_files() and (not platforms or platforms & {"cuda", "gpu", "rocm"}):
            return cls((Slot("the GPUs", "gpus", shared=True),), folder)
        return None

    @property
    def admits_two(self) -> bool:
        """Whether two of the gate's workers may hold a slot at once (`Slot.shared`)."""
        return all(slot.shared for slot in self.slots)

    def take(
        self,
        cancel: Cancellation | None = None,
        waiting: Callable[[str], None] | None = None,
    ) -> HeldSlot | None:
        """The first free slot, waiting for one while the gate's other processes hold them
        all (``waiting`` hears who, once); None when the run is cancelled meanwhile."""
        told = False
        while True:
            held = self.take_free()
            if held is not None:
                return held
            if cancel is not None and cancel.requested:
                return None
            if not told and waiting is not None:
                waiting(self.holders())
                told = True
            time.sleep(_POLL_S)

    def take_free(self) -> HeldSlot | None:
        """A slot free now, without waiting; None when the gate's other processes hold them all."""
        for slot in self.slots:
            held = self._try(slot)
            if held is not None:
                return held
        return None

    def holders(self) -> str:
        """Who holds the slots, as their lock files say: ``TPU chip 0: pid 41 (transfer-gate
        run --shard 1/2)``."""
        found = []
        for slot in self.slots:
            try:
                with open(self._path(slot), encoding="utf-8") as file:
                    holder = file.read().strip()
            except OSError:
                holder = ""
            found.append(f"{slot.name}: {holder or 'another of the gate processes'}")
        return "; ".join(found)

    def _path(self, slot: Slot) -> str:
        return os.path.join(self.folder, f"transfer-gate-{slot.lock}.lock")

    def _try(self, slot: Slot) -> HeldSlot | None:
        fd = os.open(self._path(slot), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        with contextlib.suppress(OSError):  # who holds it, for another gate that waits
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} ({_command()})\n".encode())
        return HeldSlot(slot, fd)


def _command() -> str:
    """This gate's command line, as a waiting gate shows it."""
    name = os.path.basename(sys.argv[0]) if sys.argv else "transfer-gate"
    return " ".join(["transfer-gate" if name in ("__main__.py", "-m") else name, *sys.argv[1:]])
