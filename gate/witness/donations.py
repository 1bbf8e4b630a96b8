"""Donated arguments no output reuses, from both witnesses (`gate.results.donations`).

- XLA: the compiled program's header lists ``buffer_donor={ (0, {}), ... }``, the entry
  parameters it received as donated but aliased to no output (``input_output_alias``
  lists those it did). The parameter's ``op_name`` is its pytree path.
- JAX: the lowering warning, caught with its program and argument
  (`gate.jaxhooks.donation_warnings`), for a donation JAX dropped before XLA saw it.

The header's ``input_output_alias`` also names the donations an output reuses
(`reused_donations`): what a head that no longer donates an argument is compared with.

Only the programs the step ran count: a donation of setup's is not the step's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gate.jaxhooks.donation_warnings import WarnedDonation
from gate.jaxhooks.executables import Executed
from gate.results.donations import JAX, XLA, ReusedDonation, UnusedDonation
from gate.witness.hlo_text import JAX_DTYPES, HloModule, arrays, op_name

_PAIR = re.compile(r"\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}")


def header_donations(module: HloModule, program: Executed) -> tuple[UnusedDonation, ...]:
    """The entry parameters the program's header lists as donated but not aliased."""
    donors = _parameters(module.header_field("buffer_donor"))
    aliased = _parameters(module.header_field("input_output_alias"))
    unused = [d for d in donors if d not in aliased]
    return tuple(
        UnusedDonation(program.name, path, aval, XLA, module.devices > 1)
        for path, aval in _described(module, unused)
    )


def reused_donations(module: HloModule, program: Executed) -> tuple[ReusedDonation, ...]:
    """The entry parameters the program's header aliases to an output: donations it reuses."""
    aliased = _parameters(module.header_field("input_output_alias"))
    return tuple(
        ReusedDonation(program.name, path, aval, module.devices > 1)
        for path, aval in _described(module, aliased)
    )


def _described(
    module: HloModule, pairs: list[tuple[int, tuple[int, ...]]]
) -> list[tuple[str, str]]:
    """Each ``(parameter, index within it)`` as its pytree path and aval, from the entry
    parameter's ``op_name`` and shape."""
    if not pairs:
        return []
    parameters = {
        int(i.operands[0]): i
        for i in module.computations.get(module.entry, ())
        if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()
    }
    found = []
    for number, index in pairs:
        parameter = parameters.get(number)
        path = op_name(parameter.attribute("metadata")) if parameter is not None else ""
        if index:
            path += "".join(f"[{i}]" for i in index)
        avals = arrays(parameter.shape) if parameter is not None else []
        aval = ", ".join(_aval(element, dims) for element, dims in avals) or "?"
        found.append((path or f"parameter {number}", aval))
    return found


def _parameters(text: str | None) -> list[tuple[int, tuple[int, ...]]]:
    """``(parameter, index within it)`` of each ``(0, {})`` in ``buffer_donor`` or the
    right-hand side of each ``{}: (0, {}, may-alias)`` in ``input_output_alias``."""
    return [
        (int(number), tuple(int(i) for i in index.split(",") if i.strip()))
        for number, index in _PAIR.findall(text or "")
    ]


def _aval(element: str, dims: tuple[int, ...]) -> str:
    return f"{JAX_DTYPES.get(element, element)}[{','.join(str(d) for d in dims)}]"


def warned_donations(
    warned: Sequence[WarnedDonation], programs: Sequence[tuple[str, Executed]]
) -> tuple[UnusedDonation, ...]:
    """JAX's dropped donations that belong to a program the step ran.

    ``programs`` pairs each program's name (``jit(step)``, as JAX's lowering names it too)
    with the program. A warning that names no
    module (a JAX where the lowering frame moved) is kept, without a function: it may be
    setup's, but a pass must not hide it.
    """
    by_module = dict(programs)
    found: dict[UnusedDonation, None] = {}
    for donation in warned:
        if donation.module is None:
            program = None
        elif donation.module in by_module:
            program = by_module[donation.module]
        else:
            continue  # another program's (setup's): not the step's donation
        found[
            UnusedDonation(
                program.name if program is not None else "",
                donation.argument,
                donation.aval,
                JAX,
                program is not None and len(program.devices) > 1,
            )
        ] = None
    return tuple(found)
