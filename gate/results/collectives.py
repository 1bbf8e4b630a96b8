"""What a sharded step communicates: every collective its compiled programs run, per step.

Read from XLA's compiled program text (`gate.witness.collectives`), never measured: the
same program always lists the same collectives, so base and head compare exactly.

Bytes are per device, and a collective's are the bytes of its full buffer on one device:
the operand of an all-reduce, all-to-all or collective-permute, the (unscattered) operand
of a reduce-scatter, the (gathered) result of an all-gather. That is what the collective
reads or fills on each device whatever algorithm the runtime picks (a ring all-reduce
moves about twice it, a ring all-gather (N-1)/N of it), so it ranks and compares
collectives without guessing the network. Per step: times the executions per step (the
program's runs, times a loop's trip count where XLA knows it).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gate.text import bytes_text
from gate.user_code import SourceLocation

# The collectives XLA's SPMD partitioner and shard_map insert, in the order reports list them.
CollectiveKind = Literal[
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"
]
KINDS: tuple[str, ...] = typing.get_args(CollectiveKind)


@dataclass(frozen=True)
class Collective:
    """One collective of a compiled program, as the step runs it."""

    kind: str  # one of `KINDS` (an async ``-start``/``-done`` pair is its kind)
    function: str  # the program's name, as JAX gives it: ``jit(train_step)``
    buffer: str  # the full buffer per device, ``f32[64,128]`` (``8x f32[4,1,8]`` for a tuple)
    bytes: int  # that buffer's bytes, per device and execution
    runs: int  # executions per step
    # The mesh axes it runs over, named from the step's mesh; None when no mesh names
    # its device groups (then `groups` says who talks to whom).
    axes: tuple[str, ...] | None
    groups: str  # the device groups (JAX device ids), ``{0,1},{2,3}``, or a permute's pairs
    location: SourceLocation | None  # the user's line, from the program's metadata
    source: str | None = None  # that line's text
    op_name: str = ""  # JAX's name for the op (``jit(step)/jvp()/dot_general``), or ""
    # Why `runs` may not be exact ("inside a loop XLA cannot count"); "" when it is.
    uncounted: str = ""

    @property
    def bytes_per_step(self) -> int:
        return self.bytes * self.runs

    def over(self) -> str:
        """``over 'data'``, ``over ('data', 'model')``, or the device groups without a mesh."""
        if self.axes is None:
            shown = self.groups if len(self.groups) <= 60 else self.groups[:57] + "..."
            return f"over devices {shown}"
        if not self.axes:
            return "within each device"
        if len(self.axes) == 1:
            return f"over '{self.axes[0]}'"
        return "over (" + ", ".join(f"'{a}'" for a in self.axes) + ")"

    def identity(self) -> tuple[str, ...]:
        """What makes a collective "the same" in base and head.

        The kind, who takes part (axes, else the groups), the program, and the user's
        file and line *text*: a line moved by code added above keeps its identity, as
        the transfer baseline's fingerprints do. Shapes are not part of it: a spec that
        grows a collective's buffer changes that collective (it grew), it does not make
        a new one. Without a line, JAX's op name stands in for it.
        """
        who = ",".join(self.axes) if self.axes is not None else self.groups
        if self.location is None:
            return (self.kind, who, self.function, "", self.op_name)
        line = self.source if self.source else str(self.location.line)
        return (self.kind, who, self.function, self.location.path, line)

    def describe(self) -> str:
        """``all-gather f32[64,128] over 'data'``."""
        return f"{self.kind} {self.buffer} {self.over()}"


@dataclass(frozen=True)
class Communication:
    """Every collective of the step's programs, or why they could not be read."""

    collectives: tuple[Collective, ...] = ()
    measured: bool = True
    note: str = ""  # why not measured, or what is not exact ("" when all is)

    @property
    def bytes_per_step(self) -> int:
        """Bytes per device per step over every collective (`Collective.bytes`)."""
        return sum(c.bytes_per_step for c in self.collectives)

    def by_kind(self) -> tuple[tuple[str, int, int], ...]:
        """``(kind, executions per step, bytes per device per step)`` for each kind that runs."""
        found = []
        for kind in KINDS:
            of_kind = [c for c in self.collectives if c.kind == kind]
            if of_kind:
                runs = sum(c.runs for c in of_kind)
                found.append((kind, runs, sum(c.bytes_per_step for c in of_kind)))
        return tuple(found)

    def headline(self) -> str:
        """``comm 41.5 kB/step``; "" for a step without collectives or not read."""
        if not self.measured or not self.collectives:
            return ""
        return f"comm {bytes_text(self.bytes_per_step)}/step"


def not_read(note: str) -> Communication:
    """No inventory, and why (a JAX whose programs hide their text, a cost run that failed)."""
    return Communication(measured=False, note=note)


@dataclass(frozen=True)
class CollectiveGroup:
    """The collectives of one identity on one side: how many, and their bytes per step."""

    sample: Collective  # the first of them, for the kind, axes, place and buffer
    count: int  # collectives of this identity in the programs
    runs: int  # their executions per step
    bytes_per_step: int
    buffers: tuple[str, ...]  # each one's buffer, in program order

    def text(self) -> str:
        """``all-gather f32[64,128] over 'data'`` (``2x all-reduce ...`` for two alike)."""
        many = f"{self.count}x " if self.count > 1 else ""
        shapes = self.buffers[0] if len(set(self.buffers)) == 1 else ", ".join(self.buffers)
        return f"{many}{self.sample.kind} {shapes} {self.sample.over()}"


def grouped(collectives: Iterable[Collective]) -> dict[tuple[str, ...], CollectiveGroup]:
    """The collectives by `Collective.identity`, in the order they first appear."""
    members: dict[tuple[str, ...], list[Collective]] = {}
    for collective in collectives:
        members.setdefault(collective.identity(), []).append(collective)
    return {
        key: CollectiveGroup(
            sample=found[0],
            count=len(found),
            runs=sum(c.runs for c in found),
            bytes_per_step=sum(c.bytes_per_step for c in found),
            buffers=tuple(c.buffer for c in found),
        )
        for key, found in members.items()
    }
