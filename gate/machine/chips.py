"""A host's TPU chips shared out among worker processes, one chip each, as JAX's own TPU tests do.

A TPU chip admits one process (`gate.machine.holders`), and by default a process that starts
the TPU backend takes every chip of the host. JAX's own test suite runs on a TPU host with
one pytest-xdist worker per chip, never more workers than chips: its ``conftest.py`` gives
worker *n* ``TPU_VISIBLE_CHIPS=n`` and ``ALLOW_MULTIPLE_LIBTPU_LOAD=true`` (the latter lets
several processes load libtpu at once). This module says how many chips a host has for the
gate's workers and gives the environment of the worker on each.

Beside JAX's two variables the worker gets ``TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1`` and
``TPU_PROCESS_BOUNDS=1,1,1``: one chip in this process, and one process in its slice, as
PyTorch/XLA's PJRT guide and Ray's TPU manager set them for a one-chip process. Without the
process bounds libtpu can take the host's topology (from the VM's metadata or a runner's
environment) and wait for peer processes that never come; the gate's workers are
independent processes, each with its own single-chip slice, which also needs no sockets
between them.

Counting reads device files only (`gate.machine.devices`): nothing here starts JAX.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gate.machine.devices import tpu_chip_files

# The variables a worker on one chip is started with; each replaces the gate's own value.
VISIBLE_CHIPS = "TPU_VISIBLE_CHIPS"
_ONE_CHIP_PROCESS = {
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
    "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
    "TPU_PROCESS_BOUNDS": "1,1,1",
}


class ChipsError(ValueError):
    """``TPU_VISIBLE_CHIPS`` names no chip this host has, or is not a list of chip numbers."""


@dataclass(frozen=True)
class TpuChips:
    """The TPU chips the gate's workers may use on this host, by libtpu's numbers."""

    chips: tuple[int, ...]

    @property
    def shared_out(self) -> bool:
        """Whether there is more than one chip to give out: one worker per chip then.

        With one chip (or none) the workers keep the environment they have: the chip, if
        any, goes to one worker at a time, as on any host.
        """
        return len(self.chips) > 1

    def worker_environment(self, slot: int) -> dict[str, str]:
        """What the worker in ``slot`` (0 to the number of chips, exclusive) is started with.

        Slot *k* gets the *k*-th chip the host lets the gate use (with
        ``TPU_VISIBLE_CHIPS=2,3`` set for the gate, slot 0 gets chip 2).
        """
        if not 0 <= slot < len(self.chips):
            raise IndexError(f"slot {slot} of {len(self.chips)} TPU chips")
        return {VISIBLE_CHIPS: str(self.chips[slot]), **_ONE_CHIP_PROCESS}


def host_chips(environ: Mapping[str, str]) -> TpuChips:
    """The TPU chips a JAX started with ``environ`` could use here: none on a host without TPU
    device files, or when ``JAX_PLATFORMS`` leaves the TPU out.

    libtpu numbers the chips it finds from 0, one per ``/dev/accel*`` (or ``/dev/vfio/N``);
    ``TPU_VISIBLE_CHIPS``, when set, keeps those it lists. Raises `ChipsError` when it lists
    a chip the host does not have or is not a list of numbers: a typo there must not make
    the gate's workers share a chip, or use chips the runner was not given.
    """
    platforms = {p.strip() for p in environ.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    if platforms and "tpu" not in platforms:
        return TpuChips(())
    found = tuple(range(len(tpu_chip_files())))
    visible = environ.get(VISIBLE_CHIPS)
    if visible is None or not found:
        return TpuChips(found)
    entries = [entry.strip() for entry in visible.split(",")]
    if not all(entry.isdigit() for entry in entries):
        raise ChipsError(
            f"{VISIBLE_CHIPS}={visible!r} is not a list of chip numbers; give them separated "
            f"by commas, like 0,1 (this host has chips 0 to {len(found) - 1})"
        )
    listed = tuple(dict.fromkeys(int(entry) for entry in entries))
    missing = [chip for chip in listed if chip not in found]
    if missing:
        raise ChipsError(
            f"{VISIBLE_CHIPS}={visible!r} names chip {', '.join(map(str, missing))}, but this "
            f"host has chips 0 to {len(found) - 1}"
        )
    return TpuChips(listed)
