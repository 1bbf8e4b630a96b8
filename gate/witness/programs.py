"""What the step's compiled programs say about it: their collectives and unused donations.

One reading of each program's text per cost run (`gate.witness.costs` calls this with
what it counted, and hands the same parsed modules to `gate.witness.line_work`). A
program whose text jaxlib will not give makes the whole reading absent, with the reason:
a partial inventory would compare as "collectives gone".
"""

from __future__ import annotations

from collections.abc import Sequence

from gate.jaxhooks.donation_warnings import WarnedDonation
from gate.jaxhooks.executables import Executed, program_texts
from gate.jaxhooks.internals import jax_version
from gate.results.collectives import Collective, Communication, not_read
from gate.results.donations import UnusedDonation
from gate.user_code import UserCode
from gate.witness.collectives import program_collectives
from gate.witness.donations import header_donations, warned_donations
from gate.witness.hlo_text import HloModule, parse_module


def parsed_programs(executed: Sequence[Executed]) -> list[tuple[HloModule, Executed]] | str:
    """Each program's modules, parsed, with the program; why not, where one cannot be read."""
    modules: list[tuple[HloModule, Executed]] = []
    for program in executed:
        texts = program_texts(program.executable)
        if isinstance(texts, str):
            why = f"{program.name}'s compiled program could not be read: {texts}"
            return f"{why} (jax {jax_version()})"
        try:
            modules.extend((parse_module(text), program) for text in texts)
        except ValueError as exc:
            return f"{program.name}'s compiled program could not be read: {exc}"
    return modules


def read_programs(
    executed: Sequence[Executed],
    user: UserCode,
    warned: Sequence[WarnedDonation] = (),
    modules: list[tuple[HloModule, Executed]] | str | None = None,
) -> tuple[Communication, tuple[UnusedDonation, ...] | None]:
    """Every collective of ``executed`` and every donation no output reuses (None: unread);
    ``modules``: `parsed_programs` of ``executed``, where the caller has them already."""
    if modules is None:
        modules = parsed_programs(executed)
    if isinstance(modules, str):
        return not_read(modules), None
    collectives: list[Collective] = []
    donations: list[UnusedDonation] = []
    try:
        for module, program in modules:
            collectives.extend(program_collectives(module, program, user))
            donations.extend(header_donations(module, program))
    except ValueError as exc:  # replica groups in a form the gate does not read
        return not_read(str(exc)), None
    named = [(program.name, program) for program in executed]
    donations.extend(d for d in warned_donations(warned, named) if d not in donations)
    uncounted = sorted({c.uncounted for c in collectives if c.uncounted})
    return Communication(tuple(collectives), note="; ".join(uncounted)), tuple(donations)
