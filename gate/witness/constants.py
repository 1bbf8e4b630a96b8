"""The constants compiled into a program's text: each array of at least a size, at its line.

A constant's own metadata rarely survives XLA's passes (a folded transpose of it has none),
so its line is the first line in the user's code of an op that reads it: where the closed-over
array is used, the line a reader changes to pass it as an argument instead. A constant XLA
folded from JAX's ops keeps the metadata of the op it replaced (its ``op_name``); one the
function captured has none (`EmbeddedConstant.folded_from`).
"""

from __future__ import annotations

from gate.jaxhooks.executables import Executed
from gate.results.constants import EmbeddedConstant
from gate.user_code import SourceLocation, UserCode
from gate.witness.collectives import line_text, user_location
from gate.witness.hlo_text import (
    HloModule,
    Instruction,
    array_bytes,
    arrays,
    op_name,
    shape_text,
)


def program_constants(
    module: HloModule, program: Executed, user: UserCode, floor: int
) -> tuple[EmbeddedConstant, ...]:
    """Every constant of ``module`` of at least ``floor`` bytes, named after ``user``'s files."""
    found = []
    for computation, body in module.computations.items():
        for instruction in body:
            if instruction.opcode != "constant":
                continue
            parts = arrays(instruction.shape)
            size = sum(array_bytes(element, dims) for element, dims in parts)
            if size < floor or not parts:
                continue
            location = _located(module, instruction, computation, user)
            found.append(
                EmbeddedConstant(
                    program.name,
                    shape_text(*parts[0]),
                    size,
                    location.path if location is not None else "",
                    location.line if location is not None else 0,
                    line_text(user, location),
                    _folded_from(instruction),
                )
            )
    return tuple(found)


def _folded_from(constant: Instruction) -> str:
    """The primitive XLA folded into ``constant`` (``reduce_window_sum``), from its own
    ``op_name`` (``jit(step)/jvp(loss)/reduce_window_sum``); "" where it has none."""
    return op_name(constant.attribute("metadata")).rsplit("/", 1)[-1]


def _located(
    module: HloModule, constant: Instruction, computation: str, user: UserCode
) -> SourceLocation | None:
    """The constant's own line, else the first of the ops in its computation that read it,
    else the line of the fusion (or call) its computation is the body of."""
    body = module.computations[computation]
    readers = [i for i in body if constant.name in i.operands]
    callers = [
        i
        for caller in module.computations.values()
        for i in caller
        if f"%{computation}" in i.attributes and i.opcode != "constant"
    ]
    for instruction in (constant, *readers, *callers):
        metadata = instruction.attribute("metadata")
        if metadata:
            location = user_location(module, metadata.strip("{}"), user)
            if location is not None:
                return location
    return None
