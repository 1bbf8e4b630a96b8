"""Who holds an accelerator: the processes with its device files open, and one error saying so.

A TPU chip admits one process. A second process that starts JAX's TPU backend while
another holds the chip fails at once, and does not fall back to the CPU::

    RuntimeError: Unable to initialize backend 'tpu': ABORTED: Internal error when accessing
    libtpu multi-process lockfile. Run "$ sudo lsof -w /dev/accel0" to figure out which
    process is using the TPU. ...

A GPU in the exclusive-process compute mode refuses a second process the same way
(``CUDA_ERROR_DEVICE_UNAVAILABLE``). `busy_platform` recognises those texts;
`device_holders` finds the holders as libtpu's own check does (tensorflow's
``tpu_initializer_helper.cc``, ``IsTpuUsed``): the processes whose ``/proc/<pid>/fd``
links point at the device files; `busy_device_message` turns both into one error
that names the process and what to do. Another user's ``/proc/<pid>/fd`` is not
readable without privileges: then the message says how to look with ``lsof``.

Nothing here opens a device or starts JAX: it reads ``/proc`` and the error's text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gate.machine.devices import gpu_files, tpu_chip_files
from gate.machine.diagnosis import Platform
from gate.package import docs_url

# What the runtimes say when another process holds the device, as JAX passes it on. Older
# libtpu releases wrote the second and third forms ("The TPU is already in use by process
# with pid 1234", https://github.com/jax-ml/jax/issues/10192).
_BUSY: tuple[tuple[Platform, re.Pattern[str]], ...] = (
    (Platform.TPU, re.compile(r"Internal error when accessing libtpu multi-process lockfile")),
    (Platform.TPU, re.compile(r"libtpu\.so already in use by another process")),
    (Platform.TPU, re.compile(r"\bTPU\b[^.\n]{0,40}\balready in use\b")),
    (Platform.GPU, re.compile(r"CUDA_ERROR_DEVICE_UNAVAILABLE")),
    (Platform.GPU, re.compile(r"CUDA-capable device\(s\) is/are busy or unavailable")),
    (Platform.GPU, re.compile(r"all CUDA-capable devices are busy or unavailable")),
)
# "... already in use by process with pid 1234": the runtime named the holder itself.
_NAMED_PID = re.compile(r"in use by process with pid (\d+)")

# The device files a process holding each platform has open: a TPU chip through
# /dev/accelN or, on older TPU VMs, VFIO (/dev/vfio/N and /dev/vfio/vfio), as libtpu checks
# them; a GPU through /dev/nvidiaN (nvidiactl and nvidia-uvm are opened by any CUDA process,
# nvidia-smi included, and say nothing about which GPU is held).
_HELD = {
    Platform.TPU: re.compile(r"^/dev/(accel\d+|vfio/.+)$"),
    Platform.GPU: re.compile(r"^/dev/nvidia\d+$"),
}
_FIRST_FILE = {Platform.TPU: "/dev/accel0", Platform.GPU: "/dev/nvidia0"}


def busy_platform(error: str) -> Platform | None:
    """The platform whose device ``error`` says another process holds; None for any other error."""
    for platform, pattern in _BUSY:
        if pattern.search(error):
            return platform
    return None


@dataclass(frozen=True)
class Holder:
    """A process with one of the platform's device files open."""

    pid: int
    command: str  # its command line, or its name when the command line is empty
    files: tuple[str, ...]  # the device files it holds, e.g. ("/dev/accel0",)


@dataclass(frozen=True)
class Holders:
    """What `device_holders` could see of the processes holding one platform's devices."""

    platform: Platform
    found: tuple[Holder, ...]
    hidden: int  # processes whose open files this user may not read (another user's)
    device_files: tuple[str, ...]  # the platform's device files present here

    @property
    def lsof_command(self) -> str:
        """What a person with root can run to see every holder."""
        files = self.device_files or (_FIRST_FILE[self.platform],)
        return f"sudo lsof -w {' '.join(files)}"


def device_holders(platform: Platform, proc: Path = Path("/proc")) -> Holders:
    """The processes that hold ``platform``'s devices, read from ``proc``'s fd links.

    A process that ends while it is read is skipped; one whose ``fd`` folder this
    user may not list (another user's, without privileges) is counted in
    `Holders.hidden`.
    """
    held = _HELD.get(platform)
    files = tuple(sorted(_device_files(platform)))
    if held is None:
        return Holders(platform, (), 0, files)
    found = []
    hidden = 0
    for pid in _pids(proc):
        try:
            links = _fd_targets(proc / str(pid) / "fd")
        except PermissionError:
            hidden += 1
            continue
        except OSError:  # ended meanwhile, or a kernel thread
            continue
        mine = tuple(sorted({target for target in links if held.match(target)}))
        if mine:
            found.append(Holder(pid, _command(proc / str(pid)), mine))
    return Holders(platform, tuple(found), hidden, files)


def busy_device_message(error: str, holders: Holders) -> str:
    """The one error for a device another process holds: who holds it and what to do.

    ``error`` is the runtime's text (`busy_platform` recognised it); a pid the
    runtime names itself is used where ``/proc`` shows no holder.
    """
    name = holders.platform.value.upper()
    # A TPU chip admits one process; a GPU refuses a second one only in the exclusive compute
    # mode, which a shared GPU can be switched out of.
    rule = (
        "A TPU chip admits one process at a time, and JAX does not fall back to the CPU"
        if holders.platform is Platform.TPU
        else "This GPU is in the exclusive-process compute mode (nvidia-smi -q -d COMPUTE), "
        "so it admits one process at a time"
    )
    advice = (
        "A runner must not share its chips with other jobs: one runner per chip or per host "
        f"({docs_url('docs/runner-host.md')})."
    )
    if holders.found:
        who = "; ".join(_described(h) for h in holders.found)
        pids = " ".join(str(h.pid) for h in holders.found)
        return (
            f"the {name} is busy: held by {who}. {rule}: wait for that process to end, or stop "
            f"it (kill {pids}), then run again. {advice}"
        )
    named = _NAMED_PID.search(error)
    if named is not None:
        return (
            f"the {name} is busy: held by pid {named[1]} (the runtime's own words; this user "
            f"cannot see that process). {rule}: wait for it to end, or stop it "
            f"(sudo kill {named[1]}), then run again. {advice}"
        )
    if holders.hidden:
        return (
            f"the {name} is busy: another process holds it, and this user may not see which "
            f"(the open files of {holders.hidden} other users' processes are not readable): "
            f"run `{holders.lsof_command}` to find it. {rule}: wait for it to end, or stop it, "
            f"then run again. {advice}"
        )
    return (
        f"the {name} is busy, but no process in sight holds {_files(holders)}: the holder "
        f"runs outside this container (on the host, run `{holders.lsof_command}`), or it has "
        "just ended (the runtime can refuse a new process for a few seconds after): run "
        f"again. {rule}. {advice}"
    )


def busy_device_problem(error: str, proc: Path = Path("/proc")) -> str | None:
    """`busy_device_message` for ``error`` when it says a device is held by another process;
    None for any other error. For ``doctor`` and for a worker that could not start its backend."""
    platform = busy_platform(error)
    if platform is None:
        return None
    return busy_device_message(error, device_holders(platform, proc))


def _device_files(platform: Platform) -> Iterable[str]:
    if platform is Platform.TPU:
        return tpu_chip_files()
    if platform is Platform.GPU:
        return gpu_files()
    return ()


def _pids(proc: Path) -> list[int]:
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def _fd_targets(fd_dir: Path) -> list[str]:
    targets = []
    for name in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(fd_dir / name))
        except OSError:  # closed while it was read
            continue
    return targets


def _command(process: Path) -> str:
    """The command line, arguments joined by spaces; its name when that is empty."""
    try:
        argv = (process / "cmdline").read_bytes().split(b"\0")
        text = " ".join(a.decode("utf-8", "replace") for a in argv if a)
        if text:
            return text if len(text) <= 200 else text[:199] + "…"
        return (process / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"


def _described(holder: Holder) -> str:
    return f"pid {holder.pid} ({holder.command}), which has {', '.join(holder.files)} open"


def _files(holders: Holders) -> str:
    return ", ".join(holders.device_files) or _FIRST_FILE[holders.platform]
