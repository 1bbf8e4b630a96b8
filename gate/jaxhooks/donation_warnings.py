"""JAX's "Some donated buffers were not usable" warning, caught (not printed) with what it omits.

JAX lowers a jitted function once, at its first call, and drops each donation it can match
to no output, with a ``UserWarning`` listing only the avals. The gate needs the program and
the argument too, so while the block runs it reads them from the frame that warns,
``jax._src.interpreters.mlir.lower_jaxpr_to_module`` (jax 0.10.1 to 0.12): its locals
``module_name`` (the program's name, ``jit(step)``, as the cost run knows it),
``arg_names`` (pytree paths) and ``sharded_in_avals`` with ``donated_args`` (still set for
exactly the unused donations when it warns). A JAX where they moved still gives the avals,
from the message.

The warning is always caught inside the block, even where Python's registry has seen it
(its "default" action shows one text once per process: a second region would miss it)
and where warnings are errors: the gate reports it instead. Everything is put back on exit.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

MESSAGE = "Some donated buffers were not usable"
_LOWERING = "lower_jaxpr_to_module"


@dataclass(frozen=True)
class WarnedDonation:
    """One donation JAX dropped while lowering."""

    module: str | None  # the program's name (``jit(step)``); None when JAX did not say
    argument: str | None  # the argument's pytree path; None when JAX did not say
    aval: str  # ``float32[8,16]``, per device for a sharded program


@dataclass
class DonationWarnings:
    """What `donation_warnings_caught` saw."""

    found: list[WarnedDonation] = field(default_factory=list)


@contextmanager
def donation_warnings_caught() -> Iterator[DonationWarnings]:
    """Catch JAX's unusable-donation warnings in the block; other warnings go on as before."""
    log = DonationWarnings()
    with warnings.catch_warnings():
        shown = warnings.showwarning  # what catch_warnings puts back

        # The standard library's signature, which warnings calls it with.
        def showwarning(  # noqa: PLR0917
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if str(message).startswith(MESSAGE):
                log.found.extend(_read(str(message), sys._getframe(1)))
                return
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning
        warnings.filterwarnings("always", message=re.escape(MESSAGE), category=UserWarning)
        yield log


def _read(message: str, frame: FrameType | None) -> list[WarnedDonation]:
    """The dropped donations, from the lowering frame's locals, else from the message."""
    while frame is not None and frame.f_code.co_name != _LOWERING:
        frame = frame.f_back
    if frame is not None:
        found = _from_locals(frame.f_locals)
        if found:
            return found
    avals = message[len(MESSAGE) :].lstrip(":").split("\n", 1)[0].strip().rstrip(".")
    return [WarnedDonation(None, None, aval.strip()) for aval in _split_avals(avals)]


def _from_locals(scope: dict[str, Any]) -> list[WarnedDonation]:
    module, avals, donated = (
        scope.get("module_name"),
        scope.get("sharded_in_avals"),
        scope.get("donated_args"),
    )
    names = scope.get("arg_names")
    if not isinstance(module, str) or avals is None or donated is None:
        return []
    try:
        avals, donated = list(avals), list(donated)
        names = list(names) if names is not None else [None] * len(avals)
    except TypeError:
        return []
    if not (len(avals) == len(donated) == len(names)):
        return []
    return [
        WarnedDonation(module, str(name) if name else None, str(aval))
        for aval, unused, name in zip(avals, donated, names, strict=True)
        if unused
    ]


def _split_avals(text: str) -> list[str]:
    """``float32[8,16], int32[3]`` -> each aval (commas inside brackets stay)."""
    found, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += 1 if char in "[(" else -1 if char in "])" else 0
        if char == "," and depth == 0:
            found.append(text[start:i])
            start = i + 1
    found.append(text[start:])
    return [a.strip() for a in found if a.strip()]
