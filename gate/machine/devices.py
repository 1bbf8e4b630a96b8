"""The accelerators' device files: what is on this machine, seen without starting JAX."""

from __future__ import annotations

import glob


def gpu_files() -> list[str]:
    """``/dev/nvidia0``…: one per GPU the container was given."""
    return glob.glob("/dev/nvidia[0-9]*")


def tpu_chip_files() -> list[str]:
    """``/dev/accel*`` (or ``/dev/vfio/N`` on older TPU VMs): one per TPU chip."""
    return glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
