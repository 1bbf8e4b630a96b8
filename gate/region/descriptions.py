"""What JAX's slow path described, kept for the warm runs that log their moves without it.

JAX's C++ fast path (a jitted function's warm calls, eager ops on one device) logs a move
with an empty description. The first call, on the slow path, described the same moves in the
same order, so a warm run's n-th move at a line is the array the first call described
there: `SightingMemory` keeps those descriptions, by line, run of the line and position,
with where each landed on a mesh and how many guard lines one such transfer writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from gate.results.placement import Placement
from gate.results.records import Site
from gate.witness.observed import Observed


class LineRun(NamedTuple):
    """One run of a line within a step: the how-many-th, and how many moves it made."""

    number: int
    size: int


def line_runs(moves: list[tuple[Site, int]]) -> list[LineRun]:
    """Per guard line of one step, ``(place, stretch)``, the run of its line it belongs to.

    A stretch is one run of a line (`gate.witness.transfer_map`); the k-th distinct
    stretch seen at a place is that line's k-th run in the step.
    """
    sizes = Counter(moves)
    numbers: dict[tuple[Site, int], int] = {}
    runs_at: Counter[Site] = Counter()
    found = []
    for place, stretch in moves:
        number = numbers.get((place, stretch))
        if number is None:
            number = numbers[(place, stretch)] = runs_at[place]
            runs_at[place] += 1
        found.append(LineRun(number, sizes[(place, stretch)]))
    return found


class Described(NamedTuple):
    dtype: str | None
    shape: tuple[int, ...] | None
    argument: str | None
    jitted_call: str | None
    destination: Placement | None = None
    lines_per_transfer: int = 1


@dataclass
class SightingMemory:
    """What later mapped runs of a region lean on: the slow path's descriptions, and
    every fetch the per-run detector logs counted."""

    # Per (site without its array, the how-many-th run of that line in a step,
    # the move's index in that run of the line): what the slow path described;
    # and per (site, run of the line), how many moves that described run made.
    described: dict[tuple[Site, int, int], Described] = field(default_factory=dict)
    described_sizes: dict[tuple[Site, int], int] = field(default_factory=dict)
    detector_seen: Counter[Site] = field(default_factory=Counter)

    def described_as(self, place: Site, line_run: LineRun, seen: Observed) -> Described:
        """Which array a guard line moved: its own description, else the same move's earlier one.

        JAX's fast path (warm calls) logs a move with an empty description,
        in the same order as the slow path (the first call) described them;
        so the n-th move of the k-th run of a line in a step is the n-th the
        first call described there (a loop runs its line k times, each with
        its own arrays); a run the first call did not describe (a loop whose
        later turns were already warm) takes the nearest earlier described
        run's. Only a run of the line that moved as many values as the
        described one borrows its arrays: a different count means other moves
        (a one-time upload the first call made, say), and those stay
        undescribed rather than take another array's name.
        """
        slot = (place, line_run.number, seen.index)
        if seen.dtype is not None:
            own = Described(
                seen.dtype,
                seen.shape,
                seen.argument,
                seen.jitted_call,
                seen.destination,
                seen.lines_per_transfer,
            )
            self.described.setdefault(slot, own)
            self.described_sizes.setdefault((place, line_run.number), line_run.size)
            return own
        earlier = next(
            (
                self.described[(place, number, seen.index)]
                for number in range(line_run.number, -1, -1)
                if self.described_sizes.get((place, number)) == line_run.size
                and (place, number, seen.index) in self.described
            ),
            None,
        )
        if earlier is None:
            return Described(None, None, seen.argument, seen.jitted_call)
        return earlier._replace(
            argument=seen.argument or earlier.argument,
            jitted_call=seen.jitted_call or earlier.jitted_call,
        )
