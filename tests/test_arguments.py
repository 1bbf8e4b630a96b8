"""Naming the argument of a jitted call that moved, from the call's own arguments."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gate.witness.arguments import CallPlan, Moved, is_jitted, match, plan_call


@jax.jit
def sgd_update(params: Any, x: Any, y: Any, lr: Any) -> Any:
    return params - lr * (x.mean() + y.mean())


def labels(plan: CallPlan | None) -> list[tuple[str, str, tuple[int, ...]]]:
    assert plan is not None
    return [(m.label, m.dtype, m.shape) for m in plan.moves]


def test_host_leaves_in_argument_order_device_arrays_skipped() -> None:
    params = jnp.zeros((256, 1))
    plan = plan_call(
        sgd_update, (params, np.ones((32, 16, 16, 1), np.float32), np.ones(32, np.int32), 0.1), {}
    )
    assert plan is not None
    assert plan.function == "sgd_update"
    assert labels(plan) == [
        ("x", "float32", (32, 16, 16, 1)),
        ("y", "int32", (32,)),
        ("lr", "float32", ()),  # a Python float: float32 with x64 off, as JAX logs it
    ]


def test_pytree_leaves_are_named_by_their_path_in_jaxs_order() -> None:
    step = jax.jit(lambda state, batch: batch["image"].sum() + batch["label"].sum())
    batch = {"label": np.ones(3, np.int32), "image": np.ones((2, 2), np.float64)}
    assert labels(plan_call(step, (jnp.zeros(()), batch), {})) == [
        ("batch['image']", "float32", (2, 2)),  # dict keys sorted; float64 canonicalised
        ("batch['label']", "int32", (3,)),
    ]


def test_keyword_arguments_come_after_positional_ones_sorted_by_name() -> None:
    f = jax.jit(lambda p, z, a: p + z + a)
    plan = plan_call(f, (np.zeros(1, np.float32),), {"z": np.ones(2), "a": np.int32(3)})
    assert [m.label for m in labels_plan(plan)] == ["p", "a", "z"]


def labels_plan(plan: CallPlan | None) -> tuple[Moved, ...]:
    assert plan is not None
    return plan.moves


def test_static_arguments_move_nothing() -> None:
    f = jax.jit(lambda a, n, *, scale: a * n * scale, static_argnums=1, static_argnames="scale")
    plan = plan_call(f, (np.ones(2, np.float32), 3), {"scale": 2.0})
    assert labels(plan) == [("a", "float32", (2,))]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((np.ones(2), "text"), {}),  # a leaf JAX would refuse: nothing to name
        ((np.ones(2),), {}),  # does not bind to the signature
        ((np.ones(2), object()), {}),
    ],
    ids=["string leaf", "missing argument", "unknown leaf"],
)
def test_nothing_is_named_when_it_cannot_be_known(args: tuple[Any, ...], kwargs: Any) -> None:
    f = jax.jit(lambda a, b: a)
    assert plan_call(f, args, kwargs) is None


def test_only_jitted_functions() -> None:
    assert is_jitted(sgd_update)
    assert not is_jitted(lambda x: x)
    assert not is_jitted(np.add)


def test_match_names_moves_only_when_count_and_every_described_aval_agree() -> None:
    plan = CallPlan("f", (Moved("x", "float32", (8,)), Moved("y", "int32", (8,))))
    assert match(plan, [("float32", (8,)), ("int32", (8,))]) == plan.moves
    # The fast path's empty lines cannot confirm an order: two of them name nothing...
    assert match(plan, [(None, None), (None, None)]) is None
    assert match(plan, [("float32", (8,)), (None, None)]) is None
    # ...one can: a call that moves one value has one order.
    single = CallPlan("f", (Moved("x", "float32", (8,)),))
    assert match(single, [(None, None)]) == single.moves
    assert match(plan, [("float32", (8,))]) is None  # fewer: something else is going on
    assert match(plan, [("float32", (8,)), ("int32", (8,)), ("float32", ())]) is None
    assert match(plan, [("int32", (8,)), ("float32", (8,))]) is None  # another order
    assert match(CallPlan("f", ()), []) is None


def test_jax_moves_a_calls_host_values_in_the_order_the_plan_says() -> None:
    # Pins the fact `plan_call` builds on, on this JAX: the guard logs one line
    # per host value, positional arguments first, then keywords sorted by name,
    # each in pytree order; the first call describes them, warm calls log them empty.
    script = textwrap.dedent(
        """
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
        import jax, numpy as np
        f = jax.jit(lambda p, b, z, a: p.sum() + b["q"].sum() + b["c"].sum() + z.sum() + a.sum())
        with jax.transfer_guard("log"):
            for _ in range(2):
                jax.block_until_ready(f(
                    np.zeros(1, np.float32),
                    {"q": np.zeros(2, np.int8), "c": np.zeros(3, np.int16)},
                    z=np.zeros(4, np.uint8), a=np.zeros(5, np.float16)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    lines = [line for line in done.stderr.splitlines() if "host-to-device transfer" in line]
    described = [line.split("aval=")[1].split(")")[0] for line in lines[:5]]
    assert described == [
        "ShapedArray(float32[1]",
        "ShapedArray(int16[3]",
        "ShapedArray(int8[2]",
        "ShapedArray(float16[5]",
        "ShapedArray(uint8[4]",
    ]
    assert all(line.rstrip().endswith("transfer:") for line in lines[5:]), lines[5:]
    assert len(lines) == 10


def test_an_argument_the_function_does_not_use_is_not_moved_so_nothing_is_named() -> None:
    # JAX prunes unused arguments (keep_unused=False): the plan then has one
    # move more than JAX logs, and `match` refuses to name any of them.
    unused = textwrap.dedent(
        """
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
        import jax, numpy as np
        f = jax.jit(lambda a, b: a)
        with jax.transfer_guard("log"):
            jax.block_until_ready(f(np.zeros(1, np.float32), np.zeros(2, np.int32)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", unused], capture_output=True, text=True, timeout=120, check=True
    )
    logged = [line for line in done.stderr.splitlines() if "host-to-device transfer" in line]
    assert len(logged) == 1
    f = jax.jit(lambda a, b: a)
    plan = plan_call(f, (np.zeros(1, np.float32), np.zeros(2, np.int32)), {})
    assert plan is not None
    assert match(plan, [("float32", (1,))]) is None


def test_keyword_arguments_are_named_in_whichever_order_jax_described() -> None:
    # JAX orders keyword arguments by name on one path and by the signature on
    # another: the plan keeps both, and a described call picks the one it fits.
    def upd(p, x, y, lr):  # type: ignore[no-untyped-def]
        return p

    jitted = jax.jit(upd)
    x, big = np.ones((2,), np.float32), np.ones((4, 3), np.float32)
    plan = plan_call(jitted, [jnp.ones(()), x], {"y": big, "lr": 0.2})
    assert plan is not None
    signature_order = [("float32", (2,)), ("float32", (4, 3)), ("float32", ())]
    named = match(plan, signature_order)
    assert named is not None
    assert [m.label for m in named] == ["x", "y", "lr"]
    by_name = [("float32", (2,)), ("float32", ()), ("float32", (4, 3))]
    named = match(plan, by_name)
    assert named is not None
    assert [m.label for m in named] == ["x", "lr", "y"]
    # Undescribed, three moves could be either order: no names.
    assert match(plan, [(None, None)] * 3) is None
    # Two keywords of one dtype and shape fit both orders with other names: none.
    same = plan_call(
        jitted, [jnp.ones(()), x], {"y": np.ones(3, np.float32), "lr": np.ones(3, np.float32)}
    )
    assert same is not None
    assert match(same, [("float32", (2,)), ("float32", (3,)), ("float32", (3,))]) is None
