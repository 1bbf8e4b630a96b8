"""Arrays compiled into a program as constants, and which of them are new against the base.

A jitted function that closes over a NumPy array (or a concrete ``jax.Array``) captures it as
a constant: each compile copies it into the program, so program size, compile time and host
memory grow with it, while XLA's cost figures barely move. XLA makes such a constant itself
when it folds an op whose operands are all constants (``reduce_window`` of
``jnp.ones_like(x)``): it computes the whole result while compiling, often for seconds, and
stores it. Each one of at least `CONSTANT_BYTES` is reported at the line that used (or
computed) it, with the fix for its kind; one the base (or the stored baseline) did not embed
fails the comparison.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gate.text import size_text

CONSTANT_BYTES = 1 << 20  # 1 MiB: smaller constants (a table of coefficients) are cheap
CONSTANT_FIX = (
    "pass the array to the jitted function as an argument (or make it inside the function) "
    "instead of closing over it"
)
FOLDED_FIX = (
    "compute it from the smallest shape it varies over and let broadcasting do the rest "
    "(jnp.ones(shape) with 1 on the axes it does not vary over, not jnp.ones_like(x)), or "
    "from an argument: XLA folds an op whose operands are all constants into a constant "
    "of its whole result while compiling"
)


@dataclass(frozen=True)
class EmbeddedConstant:
    """One constant array of at least `CONSTANT_BYTES` in one compiled program."""

    function: str  # the program's function, ``jit(step)``
    shape: str  # ``f32[1024,512]``
    size_bytes: int
    path: str  # the user's line that used it; "" where none is known
    line: int
    source: str | None = None  # that line's text
    # The op XLA computed it from while compiling (``reduce_window_sum``), where it folded
    # constants into it; "" for an array the function captured (it carries no op of JAX's).
    folded_from: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else "(no source line)"

    def text(self) -> str:
        """``constant f32[1024,512] (2.0 MiB) compiled into jit(step) at train.py:8``; a
        folded one says so: ``..., folded from reduce_window_sum by XLA, compiled into ...``."""
        folded = f", folded from {self.folded_from} by XLA," if self.folded_from else ""
        return (
            f"constant {self.shape} ({size_text(self.size_bytes)}){folded} compiled into "
            f"{self.function} at {self.where}"
        )

    @property
    def fix(self) -> str:
        return FOLDED_FIX if self.folded_from else CONSTANT_FIX


def new_constants(
    base: Sequence[EmbeddedConstant], head: Sequence[EmbeddedConstant]
) -> tuple[EmbeddedConstant, ...]:
    """The head's constants the base does not embed: by function and shape, counted (a line
    that moved is the same constant; a second one of a shape is new)."""
    left = Counter((c.function, c.shape) for c in base)
    found = []
    for constant in head:
        key = (constant.function, constant.shape)
        if left[key]:
            left[key] -= 1
        else:
            found.append(constant)
    return tuple(found)
