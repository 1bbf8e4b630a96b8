"""Comparing output leaves within a tolerance: what the reference check and ``--base`` share.

Each leaf is compared as ``numpy.isclose`` does (``|a - b| <= atol + rtol * |b|``,
NaN equal to NaN), so a tolerance means the same in a reference file and against the
base; a difference names the leaf's pytree path and how far off it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gate.results.comparison import LeafDifference

# (path of each leaf, e.g. "[0]['w']", its value on the host)
Leaves = Sequence[tuple[str, np.ndarray[Any, Any]]]


def leaf_differences(
    got: Leaves, want: Sequence[np.ndarray[Any, Any]], rtol: float, atol: float, other: str
) -> list[LeafDifference]:
    """Every leaf of ``got`` not within tolerance of its counterpart in ``want`` (same order).

    ``other`` names what ``want`` is in the messages ("reference", "base").
    Callers check the leaf counts first.
    """
    found = []
    for (leaf_path, value), expected in zip(got, want, strict=False):
        where = leaf_path or "output"
        if value.shape != expected.shape:
            shapes = f"shape {value.shape} != {other} {expected.shape}"
            found.append(LeafDifference(leaf_path, f"{where}: {shapes}"))
            continue
        try:
            close = np.isclose(value, expected, rtol=rtol, atol=atol, equal_nan=True)
        except TypeError as exc:
            types = f"cannot compare {value.dtype} with {expected.dtype} ({exc})"
            found.append(LeafDifference(leaf_path, f"{where}: {types}"))
            continue
        if close.all():
            continue
        a, b = value.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(a - b)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(b != 0, diff / np.abs(b), np.where(diff == 0, 0.0, np.inf))
        found.append(
            LeafDifference(
                leaf_path,
                f"{where}: {int(close.size - close.sum())} of {close.size} values differ, "
                f"max abs diff {float(np.nanmax(diff)):.3g}, max rel diff "
                f"{float(np.nanmax(rel)):.3g} (rtol={rtol:g}, atol={atol:g})",
            )
        )
    return found
