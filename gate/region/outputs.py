"""The step's outputs: waited for, refused when there is no array among them, and
fetched to the host for the result checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gate.region.errors import RegionAbort
from gate.region.inputs import Inputs
from gate.results.errors import ErrorKind, RegionError
from gate.results.leaf_diff import Leaves


def call_step(step: Callable[..., Any], inputs: Inputs) -> Any:
    """The step's outputs once the device has computed them."""
    import jax

    args, kwargs = inputs
    outputs = step(*args, **kwargs)
    jax.block_until_ready(outputs)
    return outputs


def check_outputs(step_spec: str, outputs: Any) -> None:
    """Refuse outputs with no array to block on and check.

    Any pytree will do (an equinox model with functions among its
    leaves, a flax ``TrainState``, an optax state): the gate keeps its
    array leaves and ignores the rest. Only outputs without a single
    array leaf (``None``, a string) are refused.
    """
    import jax

    leaves = jax.tree_util.tree_leaves(outputs)
    if any(is_array_leaf(leaf) for leaf in leaves):
        return
    got = "None" if outputs is None else type(outputs).__name__
    others = {type(leaf).__name__ for leaf in leaves if leaf is not outputs}
    detail = f" containing only {', '.join(sorted(others))}" if others else ""
    raise RegionAbort(
        RegionError(
            ErrorKind.BAD_OUTPUT,
            f"{step_spec} returned {got}{detail}; return the step's "
            "outputs (arrays, or a pytree with arrays among its leaves) so the gate "
            "can wait for them and check them",
            f"step returned {outputs!r:.500}",
        )
    )


def is_array_leaf(leaf: Any) -> bool:
    """A leaf the gate blocks on, times and checks; any other leaf is ignored.

    Models carry more than arrays: an equinox module's activation functions
    (``custom_jvp`` objects), static fields, strings. NumPy arrays of Python
    objects are no data either (and ``np.savez`` could only pickle them).
    """
    import jax
    import numpy as np

    if isinstance(leaf, jax.Array):
        return True
    if isinstance(leaf, np.ndarray | np.generic):
        return not leaf.dtype.hasobject
    return isinstance(leaf, int | float | complex)


def host_leaves(outputs: Any) -> tuple[Any, Leaves]:
    """The outputs with their array leaves fetched to the host, explicitly, and
    those leaves as NumPy arrays with their paths (``jax.tree_util.keystr``).

    Non-array leaves stay in the host copy as they were (a custom check gets
    the whole model back) and are left out of the leaves: writing a
    reference and comparing with one see the same list.
    """
    import jax

    flat, treedef = jax.tree_util.tree_flatten_with_path(outputs)
    values = [value for _, value in flat]
    kept = [i for i, value in enumerate(values) if is_array_leaf(value)]
    for i, value in zip(kept, jax.device_get([values[i] for i in kept]), strict=True):
        values[i] = value
    leaves = [(jax.tree_util.keystr(flat[i][0]), _numpy_of(values[i])) for i in kept]
    return jax.tree_util.tree_unflatten(treedef, values), leaves


def _numpy_of(value: Any) -> Any:
    """A fetched leaf as NumPy; a typed PRNG key (an NNX model's ``Rngs``) as its key data."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    dtype = getattr(value, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(value))
    return np.asarray(value)
