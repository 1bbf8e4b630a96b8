"""A busy accelerator: the runtime's error recognised, its holders found in a planted /proc, and
one error that names them, from `gate.machine.holders` and through ``transfer-gate doctor``.

No test machine has a TPU: /proc is planted as a folder of pid folders whose ``fd`` links point
at device files, as Linux shows them, and the device files are planted as doctor's tests plant
them (`gate.machine.devices`' glob).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from cli_helpers import run_gate

from gate.cli.exit_codes import DoctorExitCode
from gate.machine import devices, holders
from gate.machine.diagnosis import Platform
from gate.machine.holders import (
    busy_device_message,
    busy_device_problem,
    busy_platform,
    device_holders,
)
from gate.package import docs_url

# JAX 0.10.2 on a TPU v5e whose chip another process holds (FIELD-NOTES.md, "On a TPU").
LOCKFILE = (
    "RuntimeError: Unable to initialize backend 'tpu': ABORTED: Internal error when accessing "
    'libtpu multi-process lockfile. Run "$ sudo lsof -w /dev/accel0" to figure out which process '
    "is using the TPU. If not possible, delete /tmp/libtpu_lockfile. (you may need to uninstall "
    "the failing plugin package, or set JAX_PLATFORMS=cpu to skip this backend.)"
)


def plant_devices(monkeypatch: pytest.MonkeyPatch, files: list[str]) -> None:
    def glob(pattern: str) -> list[str]:
        prefix = re.split(r"[*\[]", pattern, maxsplit=1)[0]
        return [f for f in files if f.startswith(prefix)]

    monkeypatch.setattr(devices.glob, "glob", glob)


def plant_process(proc: Path, pid: int, argv: list[str], open_files: list[str]) -> None:
    """``/proc/<pid>`` with its command line and an ``fd`` link per open file."""
    folder = proc / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (folder / "comm").write_text((argv[0] if argv else "kworker") + "\n")
    for fd, target in enumerate(open_files, start=3):
        (folder / "fd" / str(fd)).symlink_to(target)


@pytest.mark.parametrize(
    ("error", "platform"),
    [
        (LOCKFILE, Platform.TPU),
        (
            "I0000 f236.cc:165] libtpu.so already in use by another process probably owned by "
            "another user.",
            Platform.TPU,
        ),
        (
            "XlaRuntimeError: ABORTED: The TPU is already in use by process with pid 4242. Not "
            "attempting to load libtpu.so in this process.",
            Platform.TPU,
        ),
        (
            "INTERNAL: failed call to cuInit: CUDA_ERROR_DEVICE_UNAVAILABLE: CUDA-capable "
            "device(s) is/are busy or unavailable",
            Platform.GPU,
        ),
        (
            "cudaErrorDevicesUnavailable: all CUDA-capable devices are busy or unavailable",
            Platform.GPU,
        ),
        ("RuntimeError: Unable to initialize backend 'tpu': NOT_FOUND: no TPU devices", None),
        ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8.00GiB", None),
        ("a TPU error whose text mentions nothing held", None),
    ],
)
def test_the_runtimes_words_for_a_held_device_are_recognised(
    error: str, platform: Platform | None
) -> None:
    assert busy_platform(error) is platform


def test_the_holders_of_tpu_chips_are_read_from_the_fd_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant_devices(monkeypatch, ["/dev/accel0", "/dev/accel1"])
    proc = tmp_path / "proc"
    plant_process(proc, 4242, ["python", "train.py", "--steps", "10"], ["/dev/accel0", "/dev/null"])
    plant_process(proc, 77, ["python", "-m", "gate"], ["/dev/pts/0", "/tmp/x"])  # holds none
    plant_process(proc, 808, ["python", "serve.py"], ["/dev/vfio/0", "/dev/vfio/vfio"])
    plant_process(proc, 2, [], [])  # a kernel thread: empty cmdline, named by comm
    (proc / "self").mkdir()  # not a pid
    found = device_holders(Platform.TPU, proc)
    assert found.device_files == ("/dev/accel0", "/dev/accel1")
    assert [(h.pid, h.command, h.files) for h in found.found] == [
        (808, "python serve.py", ("/dev/vfio/0", "/dev/vfio/vfio")),
        (4242, "python train.py --steps 10", ("/dev/accel0",)),
    ]
    assert found.hidden == 0
    assert found.lsof_command == "sudo lsof -w /dev/accel0 /dev/accel1"


def test_a_gpu_is_held_through_its_own_device_file_not_nvidiactl(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    plant_process(proc, 10, ["nvidia-smi"], ["/dev/nvidiactl", "/dev/nvidia-uvm"])
    plant_process(proc, 11, ["python", "infer.py"], ["/dev/nvidiactl", "/dev/nvidia3"])
    found = device_holders(Platform.GPU, proc)
    assert [(h.pid, h.files) for h in found.found] == [(11, ("/dev/nvidia3",))]


def test_another_users_process_is_counted_as_hidden_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Linux refuses to list another user's /proc/<pid>/fd without privileges. The suite may run
    # as root, which may list anything, so the refusal is planted where the gate lists.
    proc = tmp_path / "proc"
    plant_process(proc, 500, ["python", "theirs.py"], ["/dev/accel0"])
    plant_process(proc, 501, ["python", "mine.py"], ["/dev/null"])
    real_listdir = os.listdir

    def listdir(path: os.PathLike[str] | str) -> list[str]:
        if Path(path) == proc / "500" / "fd":
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(holders.os, "listdir", listdir)
    found = device_holders(Platform.TPU, proc)
    assert (found.found, found.hidden) == ((), 1)


def test_a_process_gone_while_it_is_read_is_skipped(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "900").mkdir(parents=True)  # its fd folder already gone
    plant_process(proc, 901, ["python", "train.py"], ["/dev/accel0"])
    assert [h.pid for h in device_holders(Platform.TPU, proc).found] == [901]


def test_the_message_names_the_holder_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant_devices(monkeypatch, ["/dev/accel0"])
    proc = tmp_path / "proc"
    plant_process(proc, 4242, ["python", "train.py"], ["/dev/accel0"])
    assert busy_device_problem(LOCKFILE, proc) == (
        "the TPU is busy: held by pid 4242 (python train.py), which has /dev/accel0 open. "
        "A TPU chip admits one process at a time, and JAX does not fall back to the CPU: wait "
        "for that process to end, or stop it (kill 4242), then run again. A runner must not "
        "share its chips with other jobs: one runner per chip or per host "
        f"({docs_url('docs/runner-host.md')})."
    )


def test_a_holder_hidden_from_this_user_is_found_with_lsof(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant_devices(monkeypatch, ["/dev/accel0"])
    hidden = holders.Holders(Platform.TPU, (), 2, ("/dev/accel0",))
    message = busy_device_message(LOCKFILE, hidden)
    assert message.startswith(
        "the TPU is busy: another process holds it, and this user may not see which (the open "
        "files of 2 other users' processes are not readable): run `sudo lsof -w /dev/accel0` to "
        "find it."
    ), message
    assert "wait for it to end, or stop it, then run again" in message


def test_a_pid_the_runtime_names_is_used_when_proc_shows_none(tmp_path: Path) -> None:
    error = "ABORTED: The TPU is already in use by process with pid 4242. Not attempting to load"
    message = busy_device_problem(error, tmp_path / "empty-proc")
    assert message is not None
    assert message.startswith("the TPU is busy: held by pid 4242 (the runtime's own words;")
    assert "(sudo kill 4242)" in message


def test_no_holder_in_sight_points_outside_the_container_and_at_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant_devices(monkeypatch, [])
    proc = tmp_path / "proc"
    plant_process(proc, 1, ["/sbin/init"], ["/dev/null"])
    message = busy_device_problem(LOCKFILE, proc)
    assert message is not None
    assert message.startswith(
        "the TPU is busy, but no process in sight holds /dev/accel0: the holder runs outside "
        "this container (on the host, run `sudo lsof -w /dev/accel0`), or it has just ended"
    ), message


def test_a_gpu_in_exclusive_mode_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plant_devices(monkeypatch, ["/dev/nvidia0"])
    proc = tmp_path / "proc"
    plant_process(proc, 31, ["python", "bench.py"], ["/dev/nvidia0"])
    message = busy_device_problem("CUDA_ERROR_DEVICE_UNAVAILABLE", proc)
    assert message is not None
    assert message.startswith("the GPU is busy: held by pid 31 (python bench.py)")
    assert "exclusive-process compute mode (nvidia-smi -q -d COMPUTE)" in message


def test_any_other_error_is_no_busy_device(tmp_path: Path) -> None:
    assert busy_device_problem("NOT_FOUND: no TPU devices", tmp_path) is None


# A TPU whose chip another process holds, planted on the CPU: JAX's backends refuse to start
# with libtpu's words, as they do on the TPU VM when the chip is taken.
HELD_TPU = f"""
import jax._src.xla_bridge as xla_bridge

def backends():
    raise RuntimeError({LOCKFILE.split(": ", 1)[1]!r})

xla_bridge.backends = backends
"""


def test_doctor_says_the_tpu_is_busy_in_one_error(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HELD_TPU)
    run = run_gate(tmp_path, "doctor", "--expect", "tpu", env={"PYTHONPATH": str(site)})
    assert run.returncode == DoctorExitCode.FAILED, run
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, run
    # No TPU device files here, and so no holder: the message says where else to look.
    assert errors[0].startswith("error: the TPU is busy, but no process in sight holds"), run
    assert "sudo lsof -w /dev/accel0" in errors[0], run
    assert "likely cause" not in run.stderr, run
    assert "Traceback" not in run.stdout + run.stderr, run
