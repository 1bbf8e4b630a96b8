"""Binding setup's outputs to the step's signature, and counting annotated return values.

`gate.policy.signature` in isolation; `tests/test_run.py` runs the same misfits
through the CLI, and the bad example policies cover `validate`.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from result_samples import callable_ref, one_region_policy

from gate.policy.model import Policy
from gate.policy.signature import (
    Misfit,
    annotation_problem,
    call_problem,
    misfit,
    misfit_text,
    step_signature,
)


def train(params: Any, x: Any, y: Any, lr: Any) -> Any:
    return (params, x, y, lr)


def with_default(params: Any, x: Any, lr: float = 0.1, *, seed: int) -> Any:
    return (params, x, lr, seed)


def spread(x: Any, *rest: Any, **options: Any) -> Any:
    return (x, rest, options)


def by_position(x: Any, /, y: Any) -> Any:
    return (x, y)


def passes_through(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def supplies_lr(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that gives the step an argument itself: the call takes fewer."""

    @functools.wraps(fn)
    def wrapper(params: Any, x: Any, y: Any) -> Any:
        return fn(params, x, y, 0.1)

    return wrapper


class Opaque:
    """Callable through a builtin, so its own signature cannot be read (as equinox.filter_jit)."""

    __call__ = staticmethod(print)


def fits(step: Callable[..., Any], *args: Any, **kwargs: Any) -> Misfit | None:
    signature = step_signature(step)
    assert signature is not None
    return misfit(signature, args, kwargs)


def test_a_tuple_too_short_or_too_long_is_counted() -> None:
    assert fits(train, 1, 2, 3) == Misfit("3 values", "4 (params, x, y, lr)")
    assert fits(train, 1, 2, 3, 4, 5) == Misfit("5 values", "4 (params, x, y, lr)")
    assert fits(train, 1, 2, 3, 4) is None


def test_defaults_and_keyword_only_parameters() -> None:
    assert fits(with_default, 1) == Misfit("1 value", "2 to 3 (params, x, lr=..., *, seed)")
    assert fits(with_default, 1, 2, seed=0) is None
    # A tuple cannot give a keyword-only argument, however many values it has.
    assert fits(with_default, 1, 2, 3) == Misfit(
        "a tuple",
        "keyword-only argument 'seed' (params, x, lr=..., *, seed), which only a dict can give",
    )


def test_star_args_and_star_kwargs() -> None:
    assert fits(spread, 1, 2, 3, 4) is None
    assert fits(spread, x=1, anything=2) is None
    assert fits(spread) == Misfit("0 values", "at least 1 (x, *rest, **options)")


def test_a_dict_names_what_is_missing_and_what_is_unexpected() -> None:
    found = fits(train, params=1, x=2, y=3, z=4)
    assert found == Misfit(
        "a dict (keys: params, x, y, z): missing 'lr', unexpected 'z'", "(params, x, y, lr)"
    )
    assert fits(train, params=1, x=2, y=3, lr=4) is None
    assert fits(by_position, x=1, y=2) == Misfit(
        "a dict (keys: x, y): positional-only 'x' (return a tuple)", "(x, y)"
    )
    assert fits(by_position, y=2) == Misfit(
        "a dict (keys: y): positional-only 'x' (return a tuple)", "(x, y)"
    )


def test_anything_else_keeps_pythons_own_words() -> None:
    # Not what a setup hands over (a tuple or a dict), but `misfit` is general.
    assert fits(train, 1, 2, 3, params=4) == Misfit(
        "what the step cannot take (multiple values for argument 'params')",
        "(params, x, y, lr)",
    )


def test_wrapped_steps_are_read_through_their_wrapper() -> None:
    import jax

    expected = Misfit("3 values", "4 (params, x, y, lr)")
    assert fits(jax.jit(train), 1, 2, 3) == expected
    assert fits(passes_through(train), 1, 2, 3) == expected
    opaque = Opaque()
    opaque.__wrapped__ = train  # type: ignore[attr-defined]
    assert fits(opaque, 1, 2, 3) == expected
    # The wrapper's own parameters win when it has some: it supplies `lr`.
    assert fits(supplies_lr(train), 1, 2, 3) is None
    assert fits(supplies_lr(train), 1, 2, 3, 4) == Misfit("4 values", "3 (params, x, y)")


def test_equinox_filter_jit_is_read_through() -> None:
    eqx = pytest.importorskip("equinox")  # not a test dependency; Opaque stands in for it
    assert fits(eqx.filter_jit(train), 1, 2, 3) == Misfit("3 values", "4 (params, x, y, lr)")


def test_an_unreadable_signature_is_not_checked() -> None:
    assert step_signature(Opaque()) is None
    assert step_signature(dict) is None  # a builtin with no text signature


# --- the region error -----------------------------------------------------------


def policy_of(step: str, setup: str | None) -> Policy:
    return one_region_policy(
        callable_ref(step, 5),
        callable_ref(setup, 6) if setup else None,
        path="policies/p.yaml",
        region_line=4,
        timeout_s=1.0,
    )


def test_the_misfit_text_names_both_policy_lines() -> None:
    policy = policy_of("m:train", "m:make")
    found = misfit_text(policy, policy.regions[0], train, ((1, 2, 3), {}))
    assert found is not None
    message, details = found
    assert message == (
        "setup m:make (policies/p.yaml:6) returned 3 values; step m:train (policies/p.yaml:5)"
        " takes 4 (params, x, y, lr); make setup return what the step takes"
    )
    assert "\n" not in message
    assert "(params: 'Any', x: 'Any', y: 'Any', lr: 'Any') -> 'Any'" in details
    assert misfit_text(policy, policy.regions[0], train, ((1, 2, 3, 4), {})) is None
    assert misfit_text(policy, policy.regions[0], Opaque(), ((1,), {})) is None


def test_no_setup_is_not_this_check() -> None:
    policy = policy_of("m:train", None)
    assert misfit_text(policy, policy.regions[0], train, ((), {})) is None


# --- a step without setup ------------------------------------------------------------------


def only_defaults(lr: float = 0.1, *rest: Any, seed: int = 0, **options: Any) -> Any:
    return (lr, rest, seed, options)


def test_a_step_with_required_parameters_and_no_setup_cannot_be_called() -> None:
    import jax

    policy = policy_of("m:train", None)
    for step in (train, jax.jit(train), passes_through(train)):
        problem = call_problem(policy, 0, None, step)
        assert problem is not None, step
        assert (problem.path, problem.line, problem.where) == (
            "policies/p.yaml",
            5,
            "regions[0].step",
        )
        assert problem.message == (
            "step m:train takes arguments 'params', 'x', 'y', 'lr' and the region has no setup "
            "to give them; add `setup: MODULE:FUNCTION` to the region, a function that returns "
            "them (a tuple in that order, or a dict by name), or give them a default"
        )
    # A keyword-only parameter without a default needs giving too.
    keyword = call_problem(policy, 0, None, functools.partial(with_default, 1, 2))
    assert keyword is not None
    assert "takes argument 'seed' and the region has no setup to give it;" in keyword.message


def test_a_step_callable_with_nothing_needs_no_setup() -> None:
    policy = policy_of("m:train", None)
    assert call_problem(policy, 0, None, only_defaults) is None
    assert call_problem(policy, 0, None, spread) is not None  # `x` is required
    assert call_problem(policy, 0, None, functools.partial(train, 1, 2, 3, 4)) is None
    assert call_problem(policy, 0, None, supplies_lr(lambda p, x, y, lr: 0)) is not None
    assert call_problem(policy, 0, None, Opaque()) is None  # unreadable: not refused


def test_with_a_setup_the_annotation_is_what_is_checked() -> None:
    policy = policy_of("m:train", "m:make")
    assert call_problem(policy, 0, make_three, train) == annotation_problem(
        policy, 0, make_three, train
    )
    assert call_problem(policy, 0, make_plain, train) is None


# --- return annotations -----------------------------------------------------------


class Batch(NamedTuple):
    x: int
    y: int
    mask: int


def make_three() -> tuple[int, str, float]:
    return (1, "", 0.0)


def make_batch() -> Batch:
    return Batch(1, 2, 3)


def make_strings() -> tuple[Batch, Unresolvable]:  # type: ignore[name-defined]  # noqa: F821
    raise NotImplementedError


def make_open() -> tuple[int, ...]:
    return (1,)


def make_bare() -> tuple:  # type: ignore[type-arg]
    return ()


def make_old_style() -> typing.Tuple:  # type: ignore[type-arg]  # noqa: UP006
    return ()


def make_optional() -> tuple[int, int] | None:
    return None


def make_dict() -> dict[str, int]:
    return {}


def make_evaluated() -> None:
    raise NotImplementedError


# What a module without `from __future__ import annotations` holds: the type itself.
make_evaluated.__annotations__["return"] = tuple[Batch, typing.Optional[int], float]  # noqa: UP045


def make_plain():  # type: ignore[no-untyped-def]
    return (1,)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (make_three, "setup returns 3 values (tuple[int, str, float] annotation); step m:train"),
        (make_batch, "setup returns 3 values (NamedTuple Batch annotation); step m:train"),
        (
            make_evaluated,
            "setup returns 3 values (tuple[Batch, int | None, float] annotation); step m:train",
        ),
    ],
)
def test_an_annotated_count_the_step_cannot_take(setup: Callable[..., Any], message: str) -> None:
    policy = policy_of("m:train", "m:make")
    problem = annotation_problem(policy, 0, setup, train)
    assert problem is not None
    assert (problem.path, problem.line, problem.where) == ("policies/p.yaml", 6, "regions[0].setup")
    assert problem.message.startswith(message)
    assert problem.message.endswith(
        " (line 5) takes 4 (params, x, y, lr); make setup return what the step takes,"
        " or fix the annotation"
    )


@pytest.mark.parametrize(
    "setup",
    [make_strings, make_open, make_bare, make_old_style, make_optional, make_dict, make_plain],
    ids=lambda f: f.__name__,
)
def test_annotations_that_give_no_count_are_not_checked(setup: Callable[..., Any]) -> None:
    policy = policy_of("m:train", "m:make")
    assert annotation_problem(policy, 0, setup, train) is None


def test_an_annotated_count_that_fits_is_fine() -> None:
    policy = policy_of("m:spread", "m:make")
    assert annotation_problem(policy, 0, make_three, spread) is None
