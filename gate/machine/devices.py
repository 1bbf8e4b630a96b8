"""How many devices a worker's JAX will see, counted without starting JAX.

The gate's own process imports the user's modules (to check a policy) on the CPU alone,
so that it never takes GPU memory from the workers. A module that builds its mesh at
import (``MESH = jax.make_mesh((8,), ("data",))``, the usual way) then needs that many
CPU devices there: `gate.isolation.environment` gives the gate's process as many as the
workers will have, counted here from the device files and the environment.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Mapping

_FORCED = re.compile(r"--xla_force_host_platform_device_count=(\d+)")
# A TPU chip of v2/v3 is two JAX devices (one per core); later chips are one. Counting
# two a chip may give the gate's process more CPU devices than the workers have
# accelerators, which a module that builds its mesh from what it finds does not mind;
# fewer would fail a module that asks for them all.
_TPU_DEVICES_PER_CHIP = 2


def forced_cpu_devices(xla_flags: str) -> int:
    """The CPU device count ``--xla_force_host_platform_device_count`` asks for (1 if none)."""
    found = _FORCED.findall(xla_flags)
    return int(found[-1]) if found else 1  # XLA reads the last one


def gpu_files() -> list[str]:
    """``/dev/nvidia0``…: one per GPU the container was given."""
    return glob.glob("/dev/nvidia[0-9]*")


def tpu_chip_files() -> list[str]:
    """``/dev/accel*`` (or ``/dev/vfio/N`` on older TPU VMs): one per TPU chip."""
    return glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")


def local_accelerators(environ: Mapping[str, str]) -> int:
    """GPUs or TPU devices a JAX started with ``environ`` would find here; 0 for none.

    From `gpu_files`, narrowed by ``CUDA_VISIBLE_DEVICES``, and `tpu_chip_files`;
    0 when ``JAX_PLATFORMS`` names only the CPU.
    """
    platforms = [p.strip() for p in environ.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    if platforms and set(platforms) <= {"cpu"}:
        return 0
    gpus = len(gpu_files())
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        # CUDA stops at the first entry that names no device ("-1" hides them all).
        listed = []
        for entry in visible.split(","):
            if not entry.strip() or entry.strip().startswith("-"):
                break
            listed.append(entry)
        gpus = min(gpus, len(listed))
    return max(gpus, len(tpu_chip_files()) * _TPU_DEVICES_PER_CHIP)
