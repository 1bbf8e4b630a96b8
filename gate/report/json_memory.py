"""The JSON report's device memory: the live arrays after each run past warm-up, and a leak.

Documented in docs/reports.md ("Device memory"). Fields are only added, as the report's
format promises (`gate.report.json_report`).
"""

from __future__ import annotations

from gate.documents import Record
from gate.report.memory_text import kept_text, leak_line
from gate.results.leaks import Leak, StepMemory
from gate.results.records import RegionResult


class KeptArraysDoc(Record, frozen=True, kw_only=True):
    """Arrays of one dtype and shape that every run left alive."""

    dtype: str
    shape: tuple[int, ...]
    per_step: float
    text: str


class HolderDoc(Record, frozen=True, kw_only=True):
    """What holds the kept arrays: ``path`` is null for a container no user module reaches."""

    path: str | None
    line: int | None
    what: str


class LeakDoc(Record, frozen=True, kw_only=True):
    bytes_per_step: int  # on every device the kept arrays lie on
    devices: int
    arrays: tuple[KeptArraysDoc, ...]
    holder: HolderDoc | None
    failing: bool
    warning: bool
    text: str

    @classmethod
    def of(cls, region: RegionResult, leak: Leak) -> LeakDoc:
        holder = leak.holder
        return cls(
            bytes_per_step=leak.bytes_per_step,
            devices=leak.devices,
            arrays=tuple(
                KeptArraysDoc(dtype=k.dtype, shape=k.shape, per_step=k.per_step, text=kept_text(k))
                for k in leak.arrays
            ),
            holder=None
            if holder is None
            else HolderDoc(path=holder.path, line=holder.line, what=holder.what),
            failing=leak.failing,
            warning=leak.warning,
            text=leak_line(region, leak),
        )


class MemoryDoc(Record, frozen=True, kw_only=True):
    """The device arrays alive after each run past warm-up (the gate's own left out)."""

    live_arrays: tuple[int, ...]
    live_bytes: tuple[int, ...]
    leak: LeakDoc | None
    note: str | None

    @classmethod
    def of(cls, region: RegionResult) -> MemoryDoc | None:
        """None for a region not counted (``memory: {leaks: allow}``, or stopped before)."""
        memory: StepMemory | None = region.memory
        if memory is None:
            return None
        return cls(
            live_arrays=memory.live_arrays,
            live_bytes=memory.live_bytes,
            leak=None if memory.leak is None else LeakDoc.of(region, memory.leak),
            note=memory.note,
        )
