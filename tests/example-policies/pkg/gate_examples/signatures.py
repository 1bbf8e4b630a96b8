"""Setups whose return annotations say how many values they give, and steps that take them.

String annotations (this module's `from __future__ import annotations`) are
what `validate` must resolve; `Array` stands in for jax.Array, since these
helpers import no JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from gate_examples.nowhere import Unresolvable  # type: ignore[import-not-found]

Array = list[float]


class Params(NamedTuple):
    w: float
    b: float


class Batch(NamedTuple):
    x: Array
    y: Array
    mask: Array


def make_three() -> tuple[Params, Array, Array]:
    return Params(1.0, 0.0), [1.0], [2.0]


def make_batch() -> Batch:
    return Batch([1.0], [2.0], [1.0])


def make_any_number() -> tuple[Array, ...]:
    return ([1.0], [2.0])


def make_unresolvable() -> tuple[Unresolvable, Array]:
    return None, [1.0]


def train_step(params: Params, x: Array, y: Array, lr: float) -> float:
    return params.w * x[0] * y[0] * lr


def train_step_with_default(params: Params, x: Array, y: Array, lr: float = 0.1) -> float:
    return params.w * x[0] * y[0] * lr


def step_xy(x: Array, y: Array) -> float:
    return x[0] * y[0]


# A boundary that is a lambda: refused, as every lambda is named "<lambda>".
fetch_lambda = lambda x: x  # noqa: E731
