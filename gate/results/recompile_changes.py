"""The head's recompiles against the base's: the same recompile where git's line map says so.

``run --base`` judges what the change brought in. A recompile names the line of the user's
that called the function JAX compiled again, and `gate.results.moves` pairs it with the base's
by the rule transfers and collectives follow: on the line its line was (an edit above only
shifted it, its file only moved), on the line its change replaced (a comment appended, a
variable renamed: the same function of the user's compiling the same program), or moved
with its code (the same program, function of the user's and call text, now in another file
or below another function). Only what has no counterpart is new.

The two kinds of recompile are paired apart: compilations after warm-up
(`after_warmup_vs_base`: one the base has as often passes, "already in the base"), and the
programs a function compiled in the first call and warm-up (`startup_pairs`, which
`gate.witness.recompiles.startup_recompiles` judges against the base's count).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from gate.results.baseline import line_change
from gate.results.line_map import MOVED, LineMap
from gate.results.moves import Pair, Spot, function_name, matched
from gate.results.records import ProgramsCompiled, Recompile
from gate.user_code import SourceLocation

AFTER_WARMUP, STARTUP = "after warm-up", "first call and warm-up"
_LINE_IN_NAME = re.compile(r" at \S+:\d+(?=\))")
T = TypeVar("T", Recompile, ProgramsCompiled)


def _spot(kind: str, program: str, location: SourceLocation | None, source: str | None) -> Spot:
    """A recompile at its call line: the same program of the same kind (its count is what
    changed, not which); moved, the same program, caller and call text."""
    # A pmap's program is named with its function's line (``pmap(<lambda> at a.py:25)``): an
    # edit above that line is no other program.
    program = _LINE_IN_NAME.sub("", program)
    if location is None:
        return Spot("", 0, "", (kind, program))
    text = " ".join((source or "").split())
    caller = function_name(location.function)
    alike = (kind, program, caller, text) if caller and text else None
    return Spot(location.path, location.line, location.function, (kind, program), alike)


def recompile_spot(recompile: Recompile) -> Spot:
    kind = STARTUP if recompile.startup else AFTER_WARMUP
    return _spot(kind, recompile.function, recompile.location, recompile.source)


def programs_spot(programs: ProgramsCompiled) -> Spot:
    return _spot(STARTUP, programs.function, programs.location, programs.source)


def told(
    lines: LineMap, where: SourceLocation | None, pair: Pair[T, T] | None, *, new: bool
) -> str:
    """What the change did to a recompile's line, as `gate.results.baseline.line_change` tells
    it (``new``: one the change brought in, with the change that can have caused it); code
    the change took elsewhere says where its counterpart was: ``moved from a.py:3``."""
    if pair is not None and pair.how == MOVED and pair.old.location is not None:
        return f"moved from {pair.old.location.path}:{pair.old.location.line}"
    return line_change(lines, where, new=new)


def after_warmup_vs_base(
    head: Sequence[Recompile], base: Sequence[Recompile], lines: LineMap
) -> tuple[Recompile, ...]:
    """The head's compilations after warm-up, each with what the change did to its line
    (`Recompile.line_change`): one the base's counterpart compiled at least as often is
    ``in_base`` and passes; one it compiled less often fails with the base's count
    (`Recompile.base_count`); one with none fails as new."""
    pairs = {id(p.new): p for p in matched(head, base, recompile_spot, recompile_spot, lines)}
    judged = []
    for recompile in head:
        pair = pairs.get(id(recompile))
        base_count = pair.old.count if pair is not None else None
        in_base = base_count is not None and recompile.count <= base_count
        # New, or more often than the base: say what the change can have caused.
        label = told(lines, recompile.location, pair, new=not in_base)
        judged.append(
            replace(
                recompile,
                failing=recompile.failing and not in_base,
                in_base=in_base,
                base_count=base_count,
                line_change=label,
            )
        )
    return tuple(judged)


def startup_pairs(
    head: Sequence[ProgramsCompiled], base: Sequence[ProgramsCompiled], lines: LineMap
) -> dict[int, Pair[ProgramsCompiled, ProgramsCompiled]]:
    """Each head function's programs in the first call and warm-up and the base's they are,
    by the head's ``id``."""
    return {id(p.new): p for p in matched(head, base, programs_spot, programs_spot, lines)}
