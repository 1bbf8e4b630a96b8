"""How many times each while loop of a compiled program runs its body: one count for every reader.

XLA's CPU compiler writes a loop's count in its backend config
(``"known_trip_count":{"n":"8"}``); its TPU compiler does not (jax 0.10.2, TPU v5e:
docs/policy.md's Cost). Where the config gives none, the count is read from the loop itself, in the
form every ``fori_loop`` and ``scan`` compiles to, as XLA's own while-loop analysis reads it:

- the condition's root compares one element of the loop's tuple, the counter, with a
  constant (``LT``, ``LE``, ``GT``, ``GE``, ``NE`` or ``EQ``, the counter on either side);
- the body's root tuple puts the counter plus (or minus) a constant at the counter's place;
- the tuple the loop starts from holds a constant there.

A constant may come through ``copy``, ``bitcast``, ``convert`` or ``reshape``, from a fusion's
operand, or from an element of the tuple that the body passes on unchanged and that starts as a
constant (a step or bound the compiler kept in the tuple). Constants the compiler moved into
the body or condition (``constant.0..sunk``) are constants like any other. Anything else (a
bound computed from the data, a condition that is not one comparison) has no count: None,
and the readers count its body once a run and say so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from gate.witness.hlo_text import HloModule, Instruction

_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
# Ops whose result is their operand's value (a scalar counter's, at least).
_SAME_VALUE = frozenset(("copy", "bitcast", "convert", "reshape"))
# A direction read with its operands swapped: ``b < i`` is ``i > b``.
_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE", "EQ": "EQ"}
_DEPTH = 32  # how far an expression is followed: the loops' own are a few ops deep


def trip_counts(module: HloModule) -> dict[str, int | None]:
    """Each while instruction's trip count by name: XLA's where its backend config gives
    one, else read from the loop's counter; None where neither gives one."""
    values = _Values(module.defined(), module.computations)
    return {
        instruction.name: _trip_count(instruction, values)
        for body in module.computations.values()
        for instruction in body
        if instruction.opcode == "while"
    }


def loops_not_counted(module: HloModule) -> int:
    """How many while loops of ``module`` have no trip count: each counted once a run."""
    return sum(1 for trips in trip_counts(module).values() if trips is None)


def _trip_count(loop: Instruction, values: _Values) -> int | None:
    known = _TRIP_COUNT.search(loop.attributes)
    if known is not None:
        return int(known.group(1))
    return _Loop.of(loop, values).count() if loop.operands else None


@dataclass(frozen=True)
class _Affine:
    """A scalar integer: element ``element`` of the loop's tuple plus ``offset``; with
    ``element`` None, the constant ``offset``."""

    element: int | None
    offset: int


_STATE = "the loop's tuple"  # what the body's and condition's parameter holds
_Value = _Affine | str | None


@dataclass(frozen=True, eq=False)  # each scope is its own: `_Values.memo` keys on it
class _Scope:
    """What a computation's parameters hold, and the loop tuple's elements, as one
    expression of the loop reads them."""

    parameter: Callable[[int], _Value]  # a parameter's number -> its value
    element: Callable[[int], _Value]  # an element of the loop's tuple -> its value


@dataclass(frozen=True)
class _Values:
    """Evaluates the few integer expressions a loop's counter is made of; None for the rest."""

    defined: dict[str, Instruction]
    computations: dict[str, tuple[Instruction, ...]]
    memo: dict[tuple[str, _Scope], _Value] = field(default_factory=dict)

    def of(self, name: str, scope: _Scope, depth: int = 0) -> _Value:
        """``name``'s value in ``scope``: a constant, an element of the loop's tuple plus a
        constant, the tuple itself (`_STATE`); None for anything else."""
        key = (name, scope)
        if key not in self.memo:  # an expression may reach one value by many paths
            self.memo[key] = self._of(name, scope, depth)
        return self.memo[key]

    def _of(self, name: str, scope: _Scope, depth: int) -> _Value:
        instruction = self.defined.get(name)
        if instruction is None or depth > _DEPTH:
            return None
        opcode, operands = instruction.opcode, instruction.operands
        if opcode == "parameter":
            return scope.parameter(int(operands[0])) if _is_int(operands) else None
        if opcode == "constant":
            return _Affine(None, int(operands[0])) if _is_int(operands) else None
        if opcode == "fusion":
            root = self.root(instruction.attribute("calls"))
            inner = self._fused(instruction, scope, depth)
            return None if root is None else self.of(root.name, inner, depth + 1)
        if opcode == "get-tuple-element" and len(operands) == 1:
            index = instruction.attribute("index")
            if self.of(operands[0], scope, depth + 1) == _STATE and index and index.isdigit():
                return scope.element(int(index))
            return None
        if opcode in _SAME_VALUE and len(operands) == 1:
            return self.of(operands[0], scope, depth + 1)
        if opcode in ("add", "subtract") and len(operands) == 2:
            left, right = (self.of(o, scope, depth + 1) for o in operands)
            if isinstance(left, _Affine) and isinstance(right, _Affine):
                return _sum(left, right, -1 if opcode == "subtract" else 1)
        return None

    def comparison(
        self, name: str, scope: _Scope, depth: int = 0
    ) -> tuple[_Value, str, _Value] | None:
        """``(left, direction, right)`` of the comparison ``name`` is, through fusions and
        copies; None when it is none."""
        instruction = self.defined.get(name)
        if instruction is None or depth > _DEPTH:
            return None
        if instruction.opcode == "compare" and len(instruction.operands) == 2:
            left, right = (self.of(o, scope, depth + 1) for o in instruction.operands)
            return left, instruction.attribute("direction") or "", right
        if instruction.opcode == "fusion":
            root = self.root(instruction.attribute("calls"))
            inner = self._fused(instruction, scope, depth)
            return None if root is None else self.comparison(root.name, inner, depth + 1)
        if instruction.opcode in _SAME_VALUE and len(instruction.operands) == 1:
            return self.comparison(instruction.operands[0], scope, depth + 1)
        return None

    def root(self, computation: str | None) -> Instruction | None:
        body = self.computations.get((computation or "").lstrip("%"), ())
        return next((i for i in body if i.root), body[-1] if body else None)

    def _fused(self, fusion: Instruction, scope: _Scope, depth: int) -> _Scope:
        """A fused computation's scope: its parameters are the fusion's operands, as the
        fusion's caller sees them."""

        def operand(number: int) -> _Value:
            if 0 <= number < len(fusion.operands):
                return self.of(fusion.operands[number], scope, depth + 1)
            return None

        return _Scope(operand, scope.element)


@dataclass(frozen=True)
class _Loop:
    """One while loop, as reading its counter needs it."""

    loop: Instruction
    values: _Values
    start: tuple[_Value, ...]  # each element of the tuple it starts from, in its caller
    passed_on: frozenset[int]  # the elements the body returns unchanged

    @staticmethod
    def of(loop: Instruction, values: _Values) -> _Loop:
        start = _start(loop, values)
        body = values.root(loop.attribute("body"))
        itself = _inside(loop, lambda index: _Affine(index, 0))
        passed = frozenset(
            i
            for i in range(len(start))
            if body is not None and _returned(body, i, values, itself) == _Affine(i, 0)
        )
        return _Loop(loop, values, start, passed)

    def element(self, index: int) -> _Value:
        """Element ``index`` of the tuple, inside the loop: a constant where the body passes
        it on unchanged and it starts as one (a step or bound the compiler kept there)."""
        start = self.start[index] if index < len(self.start) else None
        if index in self.passed_on and isinstance(start, _Affine) and start.element is None:
            return start
        return _Affine(index, 0)

    def count(self) -> int | None:
        condition = self.values.root(self.loop.attribute("condition"))
        body = self.values.root(self.loop.attribute("body"))
        if condition is None or body is None:
            return None
        scope = _inside(self.loop, self.element)
        compared = self.values.comparison(condition.name, scope)
        if compared is None:
            return None
        left, direction, right = compared
        if isinstance(right, _Affine) and right.element is not None:  # the counter on the right
            left, direction, right = right, _SWAPPED.get(direction, ""), left
        if not (isinstance(left, _Affine) and isinstance(right, _Affine)):
            return None
        counter = left.element
        if counter is None or right.element is not None or counter >= len(self.start):
            return None
        first = self.start[counter]
        step = _returned(body, counter, self.values, scope)
        if not (isinstance(first, _Affine) and first.element is None):
            return None
        if not (isinstance(step, _Affine) and step.element == counter and step.offset):
            return None
        # ``counter + left.offset  DIRECTION  bound`` is ``counter  DIRECTION  bound - offset``.
        return runs(first.offset, step.offset, direction, right.offset - left.offset)


def runs(start: int, step: int, direction: str, bound: int) -> int | None:
    """How many times ``i = start; while i DIRECTION bound: i += step`` runs its body; None
    where it would not stop (or stop only when the counter wraps around)."""
    holds = {
        "LT": start < bound,
        "LE": start <= bound,
        "GT": start > bound,
        "GE": start >= bound,
        "NE": start != bound,
        "EQ": start == bound,
    }.get(direction)
    if holds is None:
        return None
    if not holds:
        return 0
    if direction == "EQ":
        return 1
    if direction in ("LT", "LE") and step > 0:
        last = bound - 1 if direction == "LT" else bound
        return (last - start) // step + 1
    if direction in ("GT", "GE") and step < 0:
        last = bound + 1 if direction == "GT" else bound
        return (start - last) // -step + 1
    if direction == "NE" and step and (bound - start) % step == 0 and (bound - start) // step > 0:
        return (bound - start) // step
    return None


def _start(loop: Instruction, values: _Values) -> tuple[_Value, ...]:
    """The elements the loop starts from, evaluated in its caller (whose parameters are not
    followed: only what the text spells there as a constant is one)."""
    init = values.defined.get(loop.operands[0])
    while init is not None and init.opcode in _SAME_VALUE and len(init.operands) == 1:
        init = values.defined.get(init.operands[0])
    caller = _Scope(_unknown, _unknown)
    if init is None:
        return ()
    if not _is_tuple(loop.shape):
        return (values.of(init.name, caller),)
    if init.opcode != "tuple":
        return ()
    return tuple(values.of(o, caller) for o in init.operands)


def _inside(loop: Instruction, element: Callable[[int], _Value]) -> _Scope:
    """The scope of the loop's body and condition: their one parameter is the loop's tuple
    (or, where the loop carries a lone value, that value: element 0)."""
    whole = _is_tuple(loop.shape)

    def parameter(number: int) -> _Value:
        if number != 0:
            return None
        return _STATE if whole else element(0)

    return _Scope(parameter, element)


def _returned(body: Instruction, index: int, values: _Values, scope: _Scope) -> _Value:
    """Element ``index`` of what the body's root returns, read in ``scope``."""
    if body.opcode != "tuple":
        return values.of(body.name, scope) if index == 0 else None
    if index >= len(body.operands):
        return None
    return values.of(body.operands[index], scope)


def _unknown(number: int) -> _Value:
    return None


def _sum(left: _Affine, right: _Affine, sign: int) -> _Affine | None:
    if right.element is not None and (sign < 0 or left.element is not None):
        return None  # something minus a counter, or two counters: not a counter's step
    if right.element is not None:
        return _Affine(right.element, left.offset + right.offset)
    return _Affine(left.element, left.offset + sign * right.offset)


def _is_int(operands: tuple[str, ...]) -> bool:
    return len(operands) == 1 and re.fullmatch(r"-?\d+", operands[0]) is not None


def _is_tuple(shape: str) -> bool:
    return shape.startswith("(")
