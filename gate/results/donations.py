"""Donated arguments the step's programs could not reuse: the memory a donation was meant to save.

``jax.jit(f, donate_argnums=...)`` lets XLA write an output into an argument's buffer. When
no output fits (another dtype or shape, an output sharding left to XLA), the donation is
silently dropped and the step holds both buffers. Two witnesses, each blind where the other
sees (`gate.witness.donations`): JAX's lowering drops a donation it can match to no output,
with a warning it gives once; XLA's compiled program lists each donation it received but did
not alias (``buffer_donor``), which JAX never warns about (a same-size dtype change, any
program on several devices without ``out_shardings``).

The donations an output does reuse (`ReusedDonation`) are kept too: one the base's program
reused that the head no longer donates at all (a ``donate_argnums`` dropped in a refactor)
doubles that buffer as surely as one that stopped fitting, and no unused donation shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

XLA: Final = "xla"  # the compiled program's header: donated (buffer_donor), not aliased
JAX: Final = "jax"  # JAX's lowering: "Some donated buffers were not usable"

_WHY = {
    XLA: "XLA received it but aliased no output to it",
    JAX: "JAX found no output of its shape and dtype and dropped it",
}


@dataclass(frozen=True)
class UnusedDonation:
    """One donated argument of one program that no output reuses."""

    function: str  # the program, ``jit(train_step)``; "" when JAX did not say which
    argument: str | None  # its pytree path, ``params['w']``; None when JAX did not say
    aval: str  # ``float32[8,16]``: per device when the program spans several
    seen_by: str  # XLA or JAX
    per_device: bool = False  # the program spans several devices: `aval` is one device's
    failing: bool = False  # ``donation: fail``, or lost against the base under ``fail_new``
    warning: bool = False  # ``donation: warn``

    def identity(self) -> tuple[str, str]:
        """What makes a donation "the same" in base and head: its program and argument.

        Not its aval: a donation whose argument changed dtype and is still unused is the same
        donation, still lost; not the witness either (XLA in one tree, JAX in the other when
        a change makes JAX drop it first). Without a path, the aval stands in for it.
        """
        return (self.function, self.argument if self.argument is not None else self.aval)

    def text(self, also: str = "") -> str:
        """``jit(step): donated argument 'x' float32[8,16] is not reused (XLA received ...)``;
        ``also`` ends the parenthesis (``base: reused``)."""
        what = f"'{self.argument}' " if self.argument else ""
        shape = f"{self.aval} per device" if self.per_device else self.aval
        where = f"{self.function}: " if self.function else ""
        why = _WHY[self.seen_by] + (f"; {also}" if also else "")
        return f"{where}donated argument {what}{shape} is not reused ({why})"


@dataclass(frozen=True)
class ReusedDonation:
    """One donated argument of one program that an output reuses (``input_output_alias``)."""

    function: str  # the program, ``jit(train_step)``
    argument: str  # its pytree path, ``grads``; ``parameter 2`` where XLA kept no name
    aval: str  # ``float32[512,512]``: per device when the program spans several
    per_device: bool = False

    def identity(self) -> tuple[str, str]:
        """`UnusedDonation.identity`'s: the same argument, reused or not."""
        return (self.function, self.argument)

    def dropped_text(self, against: str) -> str:
        """``jit(fbo): argument 'grads' float32[512,512] is no longer donated (base: donated,
        and an output reused its buffer)``."""
        shape = f"{self.aval} per device" if self.per_device else self.aval
        where = f"{self.function}: " if self.function else ""
        return (
            f"{where}argument '{self.argument}' {shape} is no longer donated ({against}: "
            "donated, and an output reused its buffer)"
        )


DONATION_FIX = (
    "make the output that should reuse the buffer match the donated argument's shape and "
    "dtype (cast back before returning it), give a sharded jit out_shardings, or stop "
    "donating the argument"
)
DROPPED_FIX = (
    "donate it again (donate_argnums or donate_argnames of the jitted function): without it "
    "the step holds the argument's buffer and the output's at once"
)
