"""An eager operator's host operand: what ``x * 100`` moves, read from the operator's call.

``x * 100`` on a device array runs ``ArrayImpl.__mul__(x, 100)``, a Python function in every
JAX the gate supports, which hands both operands to a jitted ufunc; the host one (a Python
number, a NumPy value) is moved to the device by that call, as JAX's canonical dtype and
shape (``int32[]`` for ``100``). jit's C++ fast path logs the move with an empty description
once the op's program has run anywhere before (the same ``* 100`` a line earlier), so the
transfer map reads the operand from the operator's frame as it is called
(`gate.witness.transfer_map`), never running the user's code to find it.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass

from gate.jaxhooks.internals import InternalMissing, array_operator_codes, array_type
from gate.witness.arguments import ON_DEVICE, host_leaf

# ``(dtype, shape)`` as JAX names a moved host value: ``("int32", ())``.
HostValue = tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class Operators:
    """jax.Array's eager binary operators, as this JAX's Python runs them."""

    codes: frozenset[types.CodeType] = frozenset()  # none: operands are never read
    array: type | None = None  # ArrayImpl: a concrete array, not a tracer

    @classmethod
    @functools.cache  # one JAX a process: looked up once, not at every mapped run
    def of_this_jax(cls) -> Operators:
        """The operators of the JAX imported here (`internals.array_operator_codes`)."""
        try:
            array = array_type()
        except InternalMissing:
            return cls()
        return cls(array_operator_codes(array), array)

    def host_operand(self, frame: types.FrameType) -> HostValue | None:
        """What the operator call starting in ``frame`` moves: its other operand, when that is a
        host value and the array a concrete one; None otherwise (a tracer's operator moves
        nothing, two device arrays neither, and an operand of a type the gate does not know
        is not guessed at)."""
        code = frame.f_code
        if self.array is None or code not in self.codes:
            return None
        scope = frame.f_locals
        this, other = (scope.get(name) for name in code.co_varnames[:2])
        if type(this) is not self.array:
            return None
        found = host_leaf(other)
        if found is None or found is ON_DEVICE:
            return None
        return found
