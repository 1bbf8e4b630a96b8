"""Every collective of every program a step ran, read from the compiled programs' text.

The cost run (`gate.witness.costs`) already sees each program the step runs and how often;
this reads each one's optimized HLO once (`gate.witness.hlo_text`) and lists its
all-reduces, all-gathers, reduce-scatters, all-to-alls and collective-permutes, sync or
async (``-start``; its ``-done`` is the same collective), wherever they sit: in the entry
computation, in a loop body (times its trip count, `gate.witness.trip_counts`), in a
branch, in a call.

What is normalised so that one collective reads the same on every JAX:
- replica groups in any printed form, named by the step's mesh axes (`gate.witness.replica_groups`);
- a tuple all-reduce (the CPU compiler merges all of a program's into one) is one collective
  per operand, each with the source line its ``get-tuple-element`` carries;
- shapes without layouts; bytes per device (`gate.results.collectives`).
"""

from __future__ import annotations

import functools
import linecache
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gate.jaxhooks.executables import Executed
from gate.results.collectives import Collective
from gate.user_code import SourceLocation, UserCode
from gate.witness.hlo_text import (
    HloModule,
    Instruction,
    array_bytes,
    arrays,
    op_name,
    shape_text,
    stack,
)
from gate.witness.replica_groups import (
    axes_of_pairs,
    axes_over,
    expand,
    groups_text,
    groups_value,
    pairs,
    pairs_text,
)
from gate.witness.trip_counts import trip_counts

# Opcode -> kind. An async pair is counted at its start; ``-done`` only ends it.
KIND_OF = {
    "all-reduce": "all-reduce",
    "all-reduce-start": "all-reduce",
    "all-gather": "all-gather",
    "all-gather-start": "all-gather",
    "reduce-scatter": "reduce-scatter",
    "all-to-all": "all-to-all",
    "ragged-all-to-all": "all-to-all",
    "collective-permute": "collective-permute",
    "collective-permute-start": "collective-permute",
}
# Kinds whose operands are separate collectives merged by a combiner pass: one per operand.
_SPLIT = ("all-reduce", "all-gather", "reduce-scatter")
# The attributes that name the computations an instruction calls: one name, or ``{%a, %b}``.
_CALLEE = re.compile(
    r"\b(calls|to_apply|body|condition|true_computation|false_computation"
    r"|branch_computations)=(\{[^}]*\}|%[\w.\-]+)"
)
_BRANCH = "inside a conditional branch: counted as if it ran"
_UNCOUNTED = "inside a loop whose trip count is unknown: counted once a run"


def program_collectives(
    module: HloModule, program: Executed, user: UserCode
) -> tuple[Collective, ...]:
    """The collectives of one program, each weighed by ``program.runs`` and its loops."""
    reader = _Reader(module, program, user, module.defined(), _tuple_parts(module), _users(module))
    found = []
    graph = call_graph(module)
    times_of = multiplicities(module, graph)
    for computation in program_order(module, graph):
        times, uncounted = times_of.get(computation, (0, ""))
        for instruction in module.computations.get(computation, ()):
            kind = KIND_OF.get(instruction.opcode)
            if kind is not None and times:
                found.extend(reader.collectives(instruction, kind, program.runs * times, uncounted))
    return tuple(found)


def multiplicities(
    module: HloModule, graph: dict[str, list[tuple[str, int, str]]] | None = None
) -> dict[str, tuple[int, str]]:
    """How often one run of the program runs each computation, and why that may be a guess.

    A while loop's body runs its trip count (`gate.witness.trip_counts`); a loop of
    unknown count, and a conditional's branches, are counted once, and said so. Fusions,
    calls and async wrappers run once per call site.
    """
    calls: dict[str, list[tuple[str, int, str]]] = {}  # callee -> (caller, factor, why)
    for caller, callees in (graph if graph is not None else call_graph(module)).items():
        for callee, factor, why in callees:
            calls.setdefault(callee, []).append((caller, factor, why))
    memo: dict[str, tuple[int, str]] = {module.entry: (1, "")}

    def times(name: str, seen: frozenset[str]) -> tuple[int, str]:
        if name in memo:
            return memo[name]
        total, whys = 0, list[str]()
        for caller, factor, why in calls.get(name, []):
            if caller in seen:  # HLO has no recursion; a malformed text must not loop
                continue
            runs, caller_why = times(caller, seen | {name})
            total += runs * factor
            whys.extend(w for w in (caller_why, why if runs else "") if w)
        memo[name] = (total, "; ".join(dict.fromkeys(whys)))
        return memo[name]

    return {name: times(name, frozenset()) for name in module.computations}


def once_a_loop(
    graph: dict[str, list[tuple[str, int, str]]],
) -> dict[str, list[tuple[str, int, str]]]:
    """``graph`` with each loop run once: as XLA's cost analysis counts a while loop (its body
    and condition once, whatever the trip count), so what it leaves out can be added."""
    return {caller: [(c, 1, why) for c, _, why in calls] for caller, calls in graph.items()}


def call_graph(
    module: HloModule, leaving_out: frozenset[str] = frozenset()
) -> dict[str, list[tuple[str, int, str]]]:
    """Each computation's callees, in instruction order: ``(callee, times per call, why)``;
    ``leaving_out`` names the attributes whose callees are not followed (``to_apply``)."""
    trips = trip_counts(module)
    return {
        caller: [
            call
            for instruction in body
            # An async pair's done and update name the same wrapped computation as its start.
            if instruction.opcode not in ("async-done", "async-update")
            for call in _callees(instruction, trips, leaving_out)
        ]
        for caller, body in module.computations.items()
    }


def program_order(
    module: HloModule, graph: dict[str, list[tuple[str, int, str]]] | None = None
) -> list[str]:
    """The computations in the order a run reaches them: the entry's instructions in order,
    each callee where it is first called (XLA prints callees first)."""
    graph = graph if graph is not None else call_graph(module)
    order: dict[str, None] = {}

    def visit(name: str) -> None:
        if name in order or name not in module.computations:
            return
        order[name] = None
        for callee, _, _ in graph.get(name, []):
            visit(callee)

    visit(module.entry)
    return list(order)


def _callees(
    instruction: Instruction,
    trips: dict[str, int | None],
    leaving_out: frozenset[str] = frozenset(),
) -> list[tuple[str, int, str]]:
    """What ``instruction`` calls: ``(callee, times per call, why)``; ``trips``: each while
    loop's trip count (`gate.witness.trip_counts`)."""
    if "=%" not in instruction.attributes and "={%" not in instruction.attributes:
        return []  # calls nothing: most instructions, without a regex over their attributes
    found: list[tuple[str, int, str]] = []
    for key, value in _CALLEE.findall(instruction.attributes):
        if key in leaving_out:
            continue
        factor, why = 1, ""
        if key in ("true_computation", "false_computation", "branch_computations"):
            why = _BRANCH
        elif instruction.opcode == "while":
            count = trips.get(instruction.name)
            if count is not None:
                factor = count
            else:
                why = _UNCOUNTED
        found.extend((callee, factor, why) for callee in _names(value))
    return found


def _names(value: str | None) -> list[str]:
    if not value:
        return []
    return [n.strip().lstrip("%") for n in value.strip("{}").split(",") if n.strip()]


def _tuple_parts(module: HloModule) -> dict[tuple[str, int], Instruction]:
    """``(tuple instruction, index) -> its get-tuple-element``: where a merged part came from."""
    parts: dict[tuple[str, int], Instruction] = {}
    for body in module.computations.values():
        for instruction in body:
            index = instruction.attribute("index")
            if instruction.opcode == "get-tuple-element" and instruction.operands and index:
                parts.setdefault((instruction.operands[0], int(index)), instruction)
    return parts


@dataclass(frozen=True)
class _Reader:
    """One program's module, with what reading its collectives needs at hand."""

    module: HloModule
    program: Executed
    user: UserCode
    defined: dict[str, Instruction]
    parts: dict[tuple[str, int], Instruction]  # `_tuple_parts`
    users: dict[str, list[Instruction]]  # `_users`

    def collectives(
        self, instruction: Instruction, kind: str, runs: int, uncounted: str
    ) -> list[Collective]:
        """``instruction``'s collectives: one, or one per operand of a merged one."""
        devices = self.program.devices
        if kind == "collective-permute":
            moves = pairs(instruction.attribute("source_target_pairs") or "")
            axes = axes_of_pairs(moves, devices, self.program.meshes)
            who, size = pairs_text(moves, devices), 1
        else:
            groups = expand(groups_value(instruction.attributes) or "{}", self.module.devices)
            axes = axes_over(groups, devices, self.program.meshes)
            who, size = groups_text(groups, devices), len(groups[0]) if groups else 1
        operands = [
            arrays(self.defined[o].shape) if o in self.defined else [] for o in instruction.operands
        ]
        if kind in _SPLIT and len(operands) > 1:
            pieces = operands
            sources = [
                self.parts.get((instruction.name, i), instruction) for i in range(len(pieces))
            ]
        else:
            pieces = [[a for found in operands for a in found]]
            sources = [instruction]
        gathered = _gathered_dimension(instruction) if kind == "all-gather" else None
        found = []
        for piece, source in zip(pieces, sources, strict=True):
            shapes, total = [], 0
            for element, dims in piece:
                full = dims
                if gathered is not None and gathered < len(dims):
                    # The gathered result: what the all-gather fills on each device.
                    full = (*dims[:gathered], dims[gathered] * size, *dims[gathered + 1 :])
                shapes.append(shape_text(element, full))
                total += array_bytes(element, full)
            metadata = source.attribute("metadata") or instruction.attribute("metadata")
            location = user_location(self.module, metadata, self.user)
            if location is None:
                location = self._used_at(source)
            found.append(
                Collective(
                    kind=kind,
                    function=self.program.name,
                    buffer=_buffer_text(shapes),
                    bytes=total,
                    runs=runs,
                    axes=axes,
                    groups=who,
                    location=location,
                    source=line_text(self.user, location),
                    op_name=op_name(metadata),
                    uncounted=uncounted,
                )
            )
        return found

    def _used_at(self, instruction: Instruction) -> SourceLocation | None:
        """The line of the first instruction that uses ``instruction``'s result and has one.

        XLA gives some collectives no source frame: jax 0.12 names an all-gather of a
        sharded parameter only by the parameter (``op_name="params['w1']"``). Where its
        result is used is the line whose sharding made it.
        """
        for user in self.users.get(instruction.name, []):
            found = user_location(self.module, user.attribute("metadata"), self.user)
            if found is not None:
                return found
        return None


def _users(module: HloModule) -> dict[str, list[Instruction]]:
    """Each instruction's users, in program order."""
    users: dict[str, list[Instruction]] = {}
    for body in module.computations.values():
        for instruction in body:
            for operand in instruction.operands:
                users.setdefault(operand, []).append(instruction)
    return users


def _gathered_dimension(instruction: Instruction) -> int | None:
    found = re.match(r"\{(\d+)\}", instruction.attribute("dimensions") or "")
    return int(found.group(1)) if found else None


def _buffer_text(shapes: Sequence[str]) -> str:
    if not shapes:
        return "?"
    if len(set(shapes)) == 1 and len(shapes) > 1:
        return f"{len(shapes)}x {shapes[0]}"
    return ", ".join(shapes)


def user_location(module: HloModule, metadata: str | None, user: UserCode) -> SourceLocation | None:
    """An instruction's line: the innermost frame of its ``metadata`` in the user's code;
    else the innermost outside any library (an installed package of the user's)."""
    frames = [f for f in stack(module, metadata) if f.path]
    for accept in (_is_user, _not_library):
        for frame in frames:
            if accept(user, frame.path):
                return SourceLocation(_relative(user, frame.path), frame.line, frame.function)
    return None


# A module's frames name a handful of files many times over: each resolved once.
@functools.lru_cache(maxsize=1024)
def _is_user(user: UserCode, path: str) -> bool:
    return user.is_user(path)


@functools.lru_cache(maxsize=1024)
def _not_library(user: UserCode, path: str) -> bool:
    return not user.is_library(path)


@functools.lru_cache(maxsize=1024)
def _relative(user: UserCode, path: str) -> str:
    return user.relative(path)


def line_text(user: UserCode, location: SourceLocation | None) -> str | None:
    if location is None:
        return None
    path = location.path if location.path.startswith("/") else str(user.repo_root / location.path)
    return linecache.getline(path, location.line).strip() or None
