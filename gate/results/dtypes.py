"""Output dtypes NumPy does not know: bfloat16, float8, float6 and float4, as JAX has them.

JAX's low-precision floats are ``ml_dtypes`` types. NumPy computes with them
(``np.isfinite`` works), but does not call them floating
(``np.issubdtype(bfloat16, np.inexact)`` is False) and ``np.savez`` writes them as raw
bytes (``|V2``) that load back as nothing it can compare. So every check of the gate asks
here whether a leaf is floating, widens it to float32 before comparing (each of these
types is exactly representable in float32), and stores it as its bits plus its name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def is_floating(dtype: np.dtype[Any]) -> bool:
    """Real or complex floating point, the low-precision kinds JAX has included."""
    import jax.numpy as jnp

    return bool(jnp.issubdtype(dtype, jnp.inexact))


def is_numpy_native(dtype: np.dtype[Any]) -> bool:
    """A dtype NumPy itself defines (``np.savez`` keeps it), not one ``ml_dtypes`` adds."""
    return dtype.type.__module__ == "numpy"


def widened(value: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``value`` in a dtype NumPy compares exactly: low-precision floats as float32, ``ml_dtypes``'
    narrow integers (int4, uint2, ...) as int32, NumPy's own as they are."""
    if is_numpy_native(value.dtype):
        return value
    return value.astype(np.float32 if is_floating(value.dtype) else np.int32)


def as_bits(value: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """What a file stores of ``value``: itself, or for a dtype NumPy lacks its bits as uints."""
    if is_numpy_native(value.dtype):
        return value
    return value.view(np.dtype(f"u{value.dtype.itemsize}"))


def from_bits(bits: npt.NDArray[Any], dtype_name: str) -> npt.NDArray[Any]:
    """`as_bits` read back: ``bits`` viewed as ``dtype_name`` (a name JAX knows, e.g. "bfloat16").

    ValueError when this JAX has no such dtype, or the sizes disagree.
    """
    import jax.numpy as jnp

    if str(bits.dtype) == dtype_name:
        return bits
    try:
        dtype = np.dtype(jnp.dtype(dtype_name))
    except TypeError as exc:
        raise ValueError(f"dtype {dtype_name!r} is unknown to this JAX") from exc
    if dtype.itemsize != bits.dtype.itemsize:
        raise ValueError(
            f"stored as {bits.dtype} ({bits.dtype.itemsize} bytes per value), "
            f"but {dtype_name} takes {dtype.itemsize}"
        )
    return bits.view(dtype)
