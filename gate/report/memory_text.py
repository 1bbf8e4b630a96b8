"""How the device memory a step keeps reads, in every report: the leak, where, and its fix."""

from __future__ import annotations

from gate.results.leaks import KeptArrays, Leak
from gate.results.records import RegionResult, array_text
from gate.text import counted, size_text

LABEL = "device memory kept every step"


def kept_text(kept: KeptArrays) -> str:
    """``+1 float32[] per step`` (``+0.5 ...`` for one every other step)."""
    per_step = kept.per_step
    shown = str(int(per_step)) if per_step == int(per_step) else f"{per_step:.2g}"
    return f"+{shown} {array_text(kept.dtype, kept.shape)} per step"


def leak_text(leak: Leak) -> str:
    """``global 'history' (list), +1 float32[] per step (4 B per step)``: what and how much."""
    arrays = ", ".join(kept_text(k) for k in leak.arrays[:3])
    if len(leak.arrays) > 3:
        arrays += f" (+{len(leak.arrays) - 3} more shapes)"
    held = leak.holder.what if leak.holder is not None else _UNREACHED
    over = f" over {leak.devices} devices" if leak.devices > 1 else ""
    return f"{held}, {arrays} ({size_text(leak.bytes_per_step)} per step{over})"


_UNREACHED = (
    "held by nothing the gate reached from the user's modules (a thread's frame or a C "
    "extension's cache?)"
)


def leak_place(region: RegionResult, leak: Leak) -> tuple[str, int]:
    """The file and line a leak is reported at: its holder's, else the region's policy line."""
    holder = leak.holder
    if holder is None or holder.path is None:
        return region.policy_path, region.policy_line
    return holder.path, holder.line or 1  # a file the gate could not parse: its top


def leak_line(region: RegionResult, leak: Leak) -> str:
    """``train.py:5: device memory kept every step: global 'history' (list), +1 float32[] ...``;
    a warning under ``memory: {leaks: warn}`` says so."""
    path, line = leak_place(region, leak)
    where = f"{path}:{line}" if line else path
    verdict = "warning (leaks: warn): " if leak.warning else ""
    return f"{where}: {verdict}{LABEL}: {leak_text(leak)}"


def memory_column(region: RegionResult) -> str | None:
    """``leaks 4 B/step`` for a region's row; None when nothing leaks."""
    leak = region.memory.leak if region.memory is not None else None
    if leak is None:
        return None
    return f"leaks {size_text(leak.bytes_per_step)}/step" + (" (warn)" if leak.warning else "")


def growth_text(region: RegionResult) -> str | None:
    """``live device arrays after each run past warm-up: 4, 5, 6, 7 (16 B → 28 B)``."""
    memory = region.memory
    if memory is None or not memory.live_arrays:
        return None
    counts = ", ".join(str(n) for n in memory.live_arrays)
    sizes = f"{size_text(memory.live_bytes[0])} → {size_text(memory.live_bytes[-1])}"
    runs = counted(memory.runs, "run")
    return f"live device arrays after each of {runs} past warm-up: {counts} ({sizes})"
