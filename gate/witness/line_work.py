"""Work by source line, counted from every op of the step's optimized programs.

The cost run already has each program the step ran and how often (`gate.witness.costs`);
this reads each one's optimized HLO (`gate.witness.hlo_text`) and charges every op to its
own source line: the user's innermost frame of its ``stack_frame_id`` (or, on newer JAX,
its ``source_file``/``source_line``), never a line of JAX's. An op inside a fusion keeps
its own line; one with none takes its fusion's; one with neither (work the compiler added:
copies, layout changes, ``copy-start``/``copy-done``) takes the line of the op whose data
it moves (`_Served`).

What each op counts, from its shapes (XLA's cost analysis gives only program totals):
- flops: a dot 2·(result elements)·(contracted size); a convolution 2·(result
  elements)·(kernel elements per output feature); an elementwise op one per element; a
  reduce one per input element; a reduce-window one per window element; a sort n·log2(n);
- transcendentals: one per element of exp, log, tanh, logistic, sqrt, rsqrt, sin, ... (as
  XLA counts them, in place of flops);
- bytes accessed: an unfused op reads its operands and writes its result; inside a fusion,
  only reading the fusion's inputs and writing its result touch memory, so only those count.

Ops in a loop body count its trip count where it is known (`gate.witness.trip_counts`),
and once otherwise, as collectives do (`gate.witness.collectives.multiplicities`); a
reducer's body (``to_apply``) is the reduce's per-element work, already counted.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from gate.results.line_work import MOST_OPS, LineWork
from gate.user_code import SourceLocation, UserCode
from gate.witness.collectives import (
    call_graph,
    line_text,
    multiplicities,
    once_a_loop,
    user_location,
)
from gate.witness.hlo_text import HloModule, Instruction, array_bytes, arrays, shape_text

_TRANSCENDENTAL = frozenset((
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "power", "rsqrt",
    "sqrt", "cbrt", "tanh", "tan", "sine", "cosine", "atan2", "erf",
))  # fmt: skip
_ELEMENTWISE = frozenset((
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "compare", "select", "negate",
    "abs", "and", "or", "xor", "not", "clamp", "remainder", "sign", "floor", "ceil",
    "round-nearest-afz", "round-nearest-even", "shift-left", "shift-right-logical",
    "shift-right-arithmetic", "convert", "is-finite", "popcnt", "count-leading-zeros", "real",
    "imag", "complex", "reduce-precision", "stochastic-convert",
))  # fmt: skip
# The program's plumbing: no data of their own is read or written.
_PLUMBING = frozenset((
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
    "add-dependency", "opt-barrier", "partition-id", "replica-id",
))  # fmt: skip
# Their work is their callees' ops, counted there.
_CONTROL = frozenset((
    "fusion", "call", "while", "conditional", "async-start", "async-update", "async-done",
))  # fmt: skip
_WINDOW_SIZE = re.compile(r"size=([\dx]+)")
_METADATA = re.compile(r'metadata=\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_DIMS = re.compile(r"\{([\d,\s]*)\}")


@dataclass(frozen=True)
class OpWork:
    """One op of a program and its work per step, charged to its line."""

    module: str  # the program's module name (``jit_train_step``), as a profiler names it
    name: str  # the instruction's name
    top: str  # the name a profiler shows: the op itself, or the fusion it sits in
    location: SourceLocation | None
    kind: str  # ``dot f32[1024,256]·f32[256,1024]``
    flops: float
    bytes_accessed: float
    transcendentals: float
    # The share of this op's work that XLA's cost analysis leaves out: all but one run of
    # each loop it sits in (`gate.witness.collectives.once_a_loop`); 0 outside loops.
    beyond_xla: float = 0.0


def program_ops(module: HloModule, runs: int, user: UserCode) -> Iterator[OpWork]:
    """Every op of ``module`` that does work, weighed by ``runs`` and its loops' trip counts."""
    places: dict[str, SourceLocation | None] = {}  # by metadata: a few frames, many ops

    def place(instruction: Instruction) -> SourceLocation | None:
        metadata = _metadata(instruction)
        if metadata not in places:
            places[metadata] = user_location(module, metadata, user)
        return places[metadata]

    graph = call_graph(module, leaving_out=frozenset({"to_apply"}))
    times_of = multiplicities(module, graph)
    once_of = multiplicities(module, once_a_loop(graph))
    defined = module.defined()
    fused: dict[str, Instruction] = {}  # fused computation -> the fusion instruction calling it
    home: dict[str, str] = {}  # fusion instruction -> the computation it sits in
    for computation, body in module.computations.items():
        for instruction in body:
            if instruction.opcode == "fusion":
                home[instruction.name] = computation
                callee = _called(instruction)
                if callee is not None:
                    fused.setdefault(callee, instruction)
    served = _Served(module, place, fused)
    for computation, body in module.computations.items():
        times, _ = times_of.get(computation, (0, ""))
        if not times or not body:
            continue
        fusion = fused.get(computation)
        outer = _outermost(fusion, fused, home) if fusion is not None else None
        written = _written(body) if fusion is not None else set()
        for instruction in body:
            if instruction.opcode in _PLUMBING or instruction.opcode in _CONTROL:
                continue
            flops, transcendentals = _arithmetic(instruction, defined)
            if fusion is None:
                moved = sum(_bytes(defined.get(o)) for o in instruction.operands)
                moved += _bytes(instruction)
            else:
                moved = sum(
                    _bytes(defined.get(o))
                    for o in instruction.operands
                    if _reads_input(defined.get(o), defined)
                )
                moved += _bytes(instruction) if instruction.name in written else 0
            if not (flops or transcendentals or moved):
                continue  # a broadcast of a constant inside a fusion: nothing to charge
            location = place(instruction)
            if location is None and fusion is not None:
                location = place(fusion)
            if location is None:
                location = served(instruction, outer)
            scale = runs * times
            once, _ = once_of.get(computation, (0, ""))
            yield OpWork(
                module.name,
                instruction.name,
                outer.name if outer is not None else instruction.name,
                location,
                _kind(instruction, defined),
                flops * scale,
                moved * scale,
                transcendentals * scale,
                max(0.0, 1.0 - once / times),
            )


class _Served:
    """The line an op of no line of its own serves: work the compiler added (a ``copy``, a
    ``copy-start``/``copy-done`` pair, a layout change, a fusion wrapping only such ops)
    moves the data of an op of the user's, and is that line's cost.

    The nearest op along the data that has a line: what consumes the op's result first
    (a copy made for a dot's operand is the dot's), else what produced its operands, each
    searched a few steps out through the program's plumbing and other lineless ops. A
    fusion's line is its own, else its first op's with one. None (``(no source line)``)
    only where no op near its data has a line.
    """

    STEPS = 6  # how far along the data to look: the compiler's chains are short

    def __init__(
        self,
        module: HloModule,
        place: Callable[[Instruction], SourceLocation | None],
        fused: dict[str, Instruction],
    ) -> None:
        self.place = place
        self.defined = module.defined()
        self.computations = module.computations
        self.users: dict[str, list[Instruction]] = {}
        for body in module.computations.values():
            for instruction in body:
                for operand in instruction.operands:
                    self.users.setdefault(operand, []).append(instruction)
        self.fused = fused
        self.inside: dict[str, SourceLocation | None] = {}

    def __call__(
        self, instruction: Instruction, fusion: Instruction | None
    ) -> SourceLocation | None:
        found = self._along(instruction)
        if found is None and fusion is not None:  # lineless inside a lineless fusion
            found = self._along(fusion)
        return found

    def _along(self, start: Instruction) -> SourceLocation | None:
        for step in (self._consumers, self._producers):
            seen = {start.name}
            frontier = [start]
            for _ in range(self.STEPS):
                nearer: list[Instruction] = []
                for instruction in frontier:
                    for neighbour in step(instruction):
                        if neighbour.name in seen:
                            continue
                        seen.add(neighbour.name)
                        found = self._own(neighbour)
                        if found is not None:
                            return found
                        nearer.append(neighbour)
                frontier = nearer
                if not frontier:
                    break
        return None

    def _consumers(self, instruction: Instruction) -> list[Instruction]:
        return self.users.get(instruction.name, [])

    def _producers(self, instruction: Instruction) -> list[Instruction]:
        return [self.defined[o] for o in instruction.operands if o in self.defined]

    def _own(self, instruction: Instruction) -> SourceLocation | None:
        """``instruction``'s own line; a fusion's, else the first of its ops' with one."""
        if instruction.opcode in _PLUMBING:
            return None
        found = self.place(instruction)
        if found is not None or instruction.opcode != "fusion":
            return found
        callee = _called(instruction)
        if callee is None:
            return None
        if callee not in self.inside:
            self.inside[callee] = None  # a fusion calling itself is no fusion: stop there
            self.inside[callee] = next(
                (
                    line
                    for op in self.computations.get(callee, ())
                    if (line := self._own(op)) is not None
                ),
                None,
            )
        return self.inside[callee]


def _called(instruction: Instruction) -> str | None:
    callee = instruction.attribute("calls")
    return callee.lstrip("%") if callee else None


def _outermost(
    fusion: Instruction, fused: dict[str, Instruction], home: dict[str, str]
) -> Instruction:
    """The fusion a profiler names: a fusion nested in another is run as the outer one."""
    seen = set()
    while fusion.name not in seen:
        seen.add(fusion.name)
        outer = fused.get(home.get(fusion.name, ""))
        if outer is None:
            return fusion
        fusion = outer
    return fusion


def line_table(ops: Iterator[OpWork] | Sequence[OpWork], user: UserCode) -> tuple[LineWork, ...]:
    """The ops summed per line, lines in file and line order (no line last)."""
    sums: dict[SourceLocation | None, list[float]] = {}
    kinds: dict[SourceLocation | None, dict[str, list[float]]] = {}
    for op in ops:
        total = sums.setdefault(op.location, [0.0, 0.0, 0.0, 0])
        total[0] += op.flops
        total[1] += op.bytes_accessed
        total[2] += op.transcendentals
        total[3] += 1
        kind = kinds.setdefault(op.location, {}).setdefault(op.kind, [0, 0.0, 0.0])
        kind[0] += 1
        kind[1] += op.flops + op.transcendentals
        kind[2] += op.bytes_accessed
    table = []
    for location, (flops, moved, transcendentals, count) in sums.items():
        heaviest = sorted(kinds[location].items(), key=lambda kv: (-kv[1][1], -kv[1][2], kv[0]))
        kept = tuple(
            f"{int(n)}x {kind}" if n > 1 else kind for kind, (n, _, _) in heaviest[:MOST_OPS]
        )
        table.append(
            LineWork(
                path=location.path if location else "",
                line=location.line if location else 0,
                function=location.function if location else "",
                source=line_text(user, location),
                flops=flops,
                bytes_accessed=moved,
                transcendentals=transcendentals,
                ops=kept,
                op_count=int(count),
            )
        )
    return tuple(sorted(table, key=lambda w: (not w.path, w.path, w.line)))


def _written(body: Sequence[Instruction]) -> set[str]:
    """What a fused computation writes to memory: its root, or each part of a root tuple."""
    root = next((i for i in body if i.root), body[-1])
    if root.opcode == "tuple":
        return set(root.operands)
    return {root.name}


def _reads_input(operand: Instruction | None, defined: dict[str, Instruction]) -> bool:
    """Whether an operand inside a fusion is one of the fusion's inputs (through bitcasts)."""
    seen = 0
    while operand is not None and seen < 64:
        if operand.opcode == "parameter":
            return True
        if operand.opcode not in ("bitcast", "get-tuple-element") or not operand.operands:
            return False
        operand, seen = defined.get(operand.operands[0]), seen + 1
    return False


def _metadata(instruction: Instruction) -> str:
    """An instruction's ``metadata={...}`` contents, "" without; a regex, not `attribute`'s
    walk character by character: every op of a large program asks."""
    if "metadata={" not in instruction.attributes:
        return ""
    found = _METADATA.search(instruction.attributes)
    return found.group(1) if found else ""


@functools.lru_cache(maxsize=8192)
def _arrays(shape: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """`arrays`, remembered: a program repeats a few shapes over thousands of ops."""
    return tuple(arrays(shape))


def _bytes(instruction: Instruction | None) -> int:
    if instruction is None:
        return 0
    return sum(array_bytes(element, dims) for element, dims in _arrays(instruction.shape))


def _elements(shape: str) -> int:
    found = _arrays(shape)
    return math.prod(found[0][1]) if found else 0


def _arithmetic(instruction: Instruction, defined: dict[str, Instruction]) -> tuple[float, float]:
    """``(flops, transcendentals)`` of one op, from its shapes."""
    opcode = instruction.opcode
    out = _elements(instruction.shape)
    operands = [defined.get(o) for o in instruction.operands]
    first = _arrays(operands[0].shape) if operands and operands[0] is not None else ()
    if opcode in _TRANSCENDENTAL:
        return 0.0, float(out)
    if opcode in _ELEMENTWISE:
        return float(out), 0.0
    if opcode == "dot" and first:
        contracted = _dims(instruction.attribute("lhs_contracting_dims"))
        size = math.prod(first[0][1][d] for d in contracted if d < len(first[0][1]))
        return 2.0 * out * size, 0.0
    if opcode == "convolution" and len(operands) > 1 and operands[1] is not None:
        kernel = _arrays(operands[1].shape)
        labels = instruction.attribute("dim_labels") or ""
        rhs = labels.split("_", 1)[1].split("->", 1)[0] if "_" in labels else ""
        if kernel and "o" in rhs and rhs.index("o") < len(kernel[0][1]):
            features = kernel[0][1][rhs.index("o")] or 1
            return 2.0 * out * math.prod(kernel[0][1]) / features, 0.0
        return 0.0, 0.0
    if opcode == "reduce" and first:
        return float(math.prod(first[0][1])), 0.0
    if opcode == "reduce-window":
        window = _WINDOW_SIZE.search(instruction.attribute("window") or "")
        size = math.prod(int(s) for s in window.group(1).split("x")) if window else 1
        return float(out * size), 0.0
    if opcode == "sort" and first:
        along = _dims(instruction.attribute("dimensions"))
        dims = first[0][1]
        n = dims[along[0]] if along and along[0] < len(dims) else 1
        return float(math.prod(dims) * math.ceil(math.log2(max(n, 2)))), 0.0
    return 0.0, 0.0


def _dims(value: str | None) -> list[int]:
    found = _DIMS.match(value or "")
    if found is None:
        return []
    return [int(d) for d in found.group(1).split(",") if d.strip()]


def _kind(instruction: Instruction, defined: dict[str, Instruction]) -> str:
    """``dot f32[1024,256]·f32[256,1024]``; ``reduce f32[128,256]`` (its input);
    ``sort f32[128,256]``; a custom call by its target."""
    opcode = instruction.opcode
    if opcode == "custom-call":
        target = (instruction.attribute("custom_call_target") or "").strip('"')
        opcode = f"custom-call {target}" if target else opcode
    if opcode in ("dot", "convolution"):
        shapes = [
            shape_text(*arrays(defined[o].shape)[0])
            for o in instruction.operands
            if o in defined and arrays(defined[o].shape)
        ]
        return f"{opcode} {'·'.join(shapes)}"
    source = instruction
    if opcode in ("reduce", "reduce-window", "scatter") and instruction.operands:
        source = defined.get(instruction.operands[0], instruction)
    found = arrays(source.shape)
    return f"{opcode} {shape_text(*found[0])}" if found else opcode
