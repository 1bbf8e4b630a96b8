"""Comparing output leaves within a tolerance: what the reference check and ``--base`` share.

Leaves are matched by their pytree path (``['params']['w']``), never by position: a leaf
renamed, added or gone is reported as such instead of being diffed against whichever
leaf now sits in its place. Only a reference file written before paths were stored has
none; its leaves are matched by position, after their counts are checked.

Each matched leaf is compared as ``numpy.isclose`` does (``|a - b| <= atol + rtol * |b|``,
NaN equal to NaN), in float32 for the low-precision floats NumPy cannot compare
(`gate.results.dtypes`), so a tolerance means the same in a reference file and against
the base; a difference names the leaf's path and how far off it is. A changed dtype or
shape is a difference in itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gate.results.comparison import LeafDifference
from gate.results.dtypes import widened

# (path of each leaf, e.g. "[0]['w']", its value on the host)
Leaves = Sequence[tuple[str, np.ndarray[Any, Any]]]
# The other side: a path of None when the file that held it stored none (matched by position).
OtherLeaves = Sequence[tuple[str | None, np.ndarray[Any, Any]]]


def _where(path: str) -> str:
    return path or "output"


def leaf_differences(
    got: Leaves, want: OtherLeaves, rtol: float, atol: float, other: str
) -> list[LeafDifference]:
    """Every leaf of ``got`` that is not ``want``'s leaf of the same path within tolerance,
    every leaf only one side has, and a count that differs.

    ``other`` names what ``want`` is in the messages ("reference", "base").
    """
    if any(path is None for path, _ in want):
        if len(got) != len(want):
            return [
                LeafDifference(
                    "",
                    f"the outputs have {len(got)} array leaves, the {other} {len(want)}",
                )
            ]
        matched = zip(got, want, strict=True)
        pairs = [(path, value, expected) for (path, value), (_, expected) in matched]
        return _value_differences(pairs, rtol, atol, other)
    wanted = {path: value for path, value in want if path is not None}
    found: list[LeafDifference] = []
    for path, value in got:
        if path in wanted:
            found.extend(_value_differences([(path, value, wanted[path])], rtol, atol, other))
        else:
            found.append(LeafDifference(path, f"{_where(path)}: a leaf the {other} does not have"))
    have = {path for path, _ in got}
    found.extend(
        LeafDifference(path, f"{_where(path)}: the {other} has this leaf, the outputs do not")
        for path in wanted
        if path not in have
    )
    return found


def _value_differences(
    pairs: Sequence[tuple[str, np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    rtol: float,
    atol: float,
    other: str,
) -> list[LeafDifference]:
    found = []
    for leaf_path, value, expected in pairs:
        where = _where(leaf_path)
        if value.dtype != expected.dtype:
            kinds = f"dtype {value.dtype} != {other} {expected.dtype}"
            found.append(LeafDifference(leaf_path, f"{where}: {kinds}"))
            continue
        if value.shape != expected.shape:
            shapes = f"shape {value.shape} != {other} {expected.shape}"
            found.append(LeafDifference(leaf_path, f"{where}: {shapes}"))
            continue
        a, b = widened(value), widened(expected)
        try:
            close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        except TypeError as exc:
            types = f"cannot compare {value.dtype} with {expected.dtype} ({exc})"
            found.append(LeafDifference(leaf_path, f"{where}: {types}"))
            continue
        if close.all():
            continue
        precision = np.complex128 if np.iscomplexobj(a) else np.float64
        diff = np.abs(a.astype(precision) - b.astype(precision))
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
