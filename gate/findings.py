"""Transfers grouped by the line that made them: what a person fixing a region reads.

The runner records transfers per phase (first call, steady state); a reader
asks per line: which line moved data, which way, how often per step. Every
reporter shows findings in the same order: failing first, then the most
frequent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gate.guard_levels import Direction
from gate.results import Phase, SourceLocation, Transfer


@dataclass(frozen=True)
class Finding:
    """One line of the user's code that moved data one way, over all phases."""

    direction: Direction
    explicit: bool
    location: SourceLocation | None
    boundary: str | None
    thread: str | None
    dtype: str | None
    shape: tuple[int, ...] | None
    source: str | None
    first_call: int  # times during the first call
    per_step: int  # times per steady-state step
    failing: bool
    sample: Transfer  # one of the grouped transfers (for hints and JAX's text)

    @property
    def kind(self) -> str:
        return "explicit" if self.explicit else "implicit"

    def what(self) -> str:
        """``host-to-device float32[8,4]``."""
        return self.sample_with_shape().describe()

    def sample_with_shape(self) -> Transfer:
        t = self.sample
        if t.dtype is None and self.dtype is not None:
            from dataclasses import replace

            return replace(t, dtype=self.dtype, shape=self.shape)
        return t

    def counts(self) -> str:
        """``3x per step, 1x on the first call`` (only the parts that are not zero)."""
        parts = []
        if self.per_step:
            parts.append(f"{self.per_step}x per step")
        if self.first_call:
            parts.append(f"{self.first_call}x on the first call")
        return ", ".join(parts) or "seen once"

    def where(self) -> str:
        return str(self.location) if self.location is not None else "an unknown line"

    def scope(self) -> str:
        """Where it happened, when that matters: a boundary, outside one, a thread."""
        parts = []
        if self.boundary is not None:
            parts.append(f"in boundary {self.boundary}")
        elif self.explicit:
            parts.append("outside a declared boundary")
        if self.thread is not None:
            parts.append(f"in thread {self.thread}")
        return " ".join(parts)

    def headline(self) -> str:
        """``implicit host-to-device float32[8] at a.py:3, 3x per step``."""
        scope = f" {self.scope()}" if self.scope() else ""
        array = self.what().removeprefix(self.direction.label)
        return (
            f"{self.kind} {self.direction.label} transfer{array}{scope} at {self.where()}, "
            f"{self.counts()}"
        )


def _key(t: Transfer) -> tuple[object, ...]:
    return (t.direction, t.explicit, t.location, t.boundary, t.thread)


def group(transfers: Iterable[Transfer]) -> tuple[Finding, ...]:
    """The transfers as findings, failing first, then the most frequent."""
    buckets: dict[tuple[object, ...], list[Transfer]] = {}
    for transfer in transfers:
        buckets.setdefault(_key(transfer), []).append(transfer)
    found = []
    for members in buckets.values():
        first = members[0]
        shaped = next((t for t in members if t.dtype is not None), first)
        found.append(
            Finding(
                direction=first.direction,
                explicit=first.explicit,
                location=first.location,
                boundary=first.boundary,
                thread=first.thread,
                dtype=shaped.dtype,
                shape=shaped.shape,
                source=next((t.source for t in members if t.source), None),
                first_call=sum(t.count for t in members if t.phase is Phase.FIRST_CALL),
                per_step=max(
                    (t.count for t in members if t.phase is Phase.STEADY_STATE), default=0
                ),
                failing=any(t.failing for t in members),
                sample=shaped,
            )
        )
    return tuple(sorted(found, key=_order))


def _order(f: Finding) -> tuple[object, ...]:
    where = f.location
    return (
        not f.failing,
        -f.per_step,
        -f.first_call,
        where.path if where else "~",
        where.line if where else 0,
        f.direction.value,
    )
