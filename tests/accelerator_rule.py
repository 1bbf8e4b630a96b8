"""The accelerator's one-process rule, planted for a test's gates (tests/planted/accelerator).

A test that asks for ``accelerator_rule`` (or a module under ``one_process_on_the_device``) runs
every gate it starts under the rule: the gate is a process of its own with the planted
``sitecustomize`` on its ``PYTHONPATH``, its workers start JAX's backend unpinned (as on a TPU
machine, where ``JAX_PLATFORMS`` is unset), and a second process that starts one while another
holds the device fails with libtpu's lockfile error. Each test has a device of its own (its
lock file), so tests running side by side do not meet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PLANTED = Path(__file__).resolve().parent / "planted" / "accelerator"
# In a process's command line: the gate's workers start as ``python -u -c "...worker..."``.
WORKER = "gate.isolation.worker"


@dataclass(frozen=True)
class BackendStart:
    """A process that started JAX's backend, from the planted log."""

    pid: int
    held_device: bool  # False: it was pinned to the CPU
    chips: str  # the TPU_VISIBLE_CHIPS it was started with, "all" without; "" when pinned
    command: str

    @property
    def is_worker(self) -> bool:
        return WORKER in self.command


@dataclass(frozen=True)
class AcceleratorRule:
    """One test's planted device: its lock and the log of the processes that started JAX."""

    lock: Path
    log: Path
    chips: int = 0  # planted TPU chips (/dev/accel*), each a device of its own; 0: none

    def environment(self) -> dict[str, str | None]:
        """What a gate started under the rule gets in its environment (`gate_env`'s extra)."""
        return {
            "PYTHONPATH": str(PLANTED),
            "TRANSFER_GATE_PLANTED_DEVICE_LOCK": str(self.lock),
            "TRANSFER_GATE_PLANTED_BACKEND_LOG": str(self.log),
            "TRANSFER_GATE_PLANTED_CHIPS": str(self.chips),
            # The gate's own locks, a folder of this test's: tests side by side never meet.
            "TRANSFER_GATE_DEVICE_LOCKS": str(self.lock.parent),
            "JAX_PLATFORMS": None,  # the workers take the device, as on a TPU machine
        }

    def starts(self) -> list[BackendStart]:
        """Every backend start since the test began, in order."""
        if not self.log.is_file():
            return []
        found = []
        for line in self.log.read_text(encoding="utf-8").splitlines():
            pid, kind, command = line.split("\t", 2)
            held = kind.startswith("device")
            found.append(BackendStart(int(pid), held, kind.partition(" ")[2], command))
        return found

    def assert_only_workers_held_the_device(self) -> None:
        """No process but a worker started JAX's backend (the gate's own never, not even
        pinned to the CPU), and the workers held the device."""
        starts = self.starts()
        assert starts, "no process started JAX: the rule was not in force"
        others = [s for s in starts if not s.is_worker]
        assert not others, f"processes other than workers started JAX: {others}"
        assert all(s.held_device for s in starts), f"a worker was pinned to the CPU: {starts}"


_active: list[AcceleratorRule] = []


def active_rule() -> AcceleratorRule | None:
    """The rule `gate_env` plants, while a test that asked for it runs."""
    return _active[-1] if _active else None


@pytest.fixture
def accelerator_rule(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[AcceleratorRule]:
    """Every gate this test starts runs under the planted one-process rule; a test marked
    ``@pytest.mark.chips(N)`` plants a host of N TPU chips."""
    folder = tmp_path_factory.mktemp("device")
    rule = AcceleratorRule(folder / "device.lock", folder / "backends.log", _chips(request))
    _active.append(rule)
    try:
        yield rule
    finally:
        _active.remove(rule)


@pytest.fixture
def one_process_on_the_device(accelerator_rule: AcceleratorRule) -> Iterator[None]:
    """The rule in force for the test, and afterwards: only workers opened the device.

    A module puts all its tests under it with
    ``pytestmark = pytest.mark.usefixtures("one_process_on_the_device")``.
    """
    yield
    accelerator_rule.assert_only_workers_held_the_device()


def _chips(request: pytest.FixtureRequest) -> int:
    marker = request.node.get_closest_marker("chips")
    return int(marker.args[0]) if marker is not None else 0
