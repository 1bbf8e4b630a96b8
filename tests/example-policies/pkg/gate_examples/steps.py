"""Callables the example policies name, good and bad."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

CONFIG = {"learning_rate": 0.1}  # not callable: naming it as a step is an error


def make_inputs() -> tuple[float]:
    return (1.0,)


# The example policies name no setup, so their steps take nothing they must be given:
# `validate` refuses a step with a required parameter and no setup (bad/no-setup.yaml).
def train_step(x: float = 1.0) -> float:
    return fetch_metrics(x * 0.5)


def step_needing_x(x: float) -> float:
    return x


def fetch_metrics(x: float) -> float:
    return x


def check_outputs(outputs: Any) -> None:
    del outputs


class Trainer:
    @staticmethod
    def step(x: float = 1.0) -> float:
        return x


class _Wrapped:
    """Stands in for a jax.jit-wrapped function: callable, has __wrapped__, not a function."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


wrapped_fetch = _Wrapped(fetch_metrics)
partial_fetch = functools.partial(fetch_metrics)
