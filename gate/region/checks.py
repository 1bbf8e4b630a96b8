"""Result checks on a region's outputs: finite, reference, custom.

The outputs arrive here already fetched to the host (explicitly, outside
the guard), as a pytree of NumPy arrays, so a check never moves data itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gate.policy.model import Checks
from gate.results.leaf_diff import leaf_differences
from gate.results.records import CheckName, CheckOutcome
from gate.wording import counted

# Host copy of the outputs: (path of each leaf, e.g. "[0]['w']", its value).
Leaves = Sequence[tuple[str, np.ndarray[Any, Any]]]


def check_finite(leaves: Leaves) -> CheckOutcome:
    bad = []
    for path, value in leaves:
        if np.issubdtype(value.dtype, np.inexact):
            count = int(value.size - np.count_nonzero(np.isfinite(value)))
            if count:
                bad.append(f"{path or 'output'}: {count} of {value.size} values are NaN or Inf")
    if bad:
        return CheckOutcome(CheckName.FINITE, False, "; ".join(bad))
    return CheckOutcome(CheckName.FINITE, True, f"all {len(leaves)} output leaves are finite")


def load_reference(path: Path) -> list[np.ndarray[Any, Any]]:
    """The reference leaves, in order (``arr_0``, ``arr_1``... as ``np.savez`` writes them)."""
    with np.load(path, allow_pickle=False) as data:
        names = sorted(data.files, key=_leaf_order)
        return [np.asarray(data[name]) for name in names]


def _leaf_order(name: str) -> tuple[int, str]:
    # np.savez(*leaves) names them arr_0..arr_N; sort numerically so arr_10
    # comes after arr_9.
    prefix, _, number = name.rpartition("_")
    return (int(number), prefix) if number.isdigit() else (1 << 30, name)


def write_reference(path: Path, leaves: Leaves) -> None:
    """Save the outputs as a reference file the ``reference`` check reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Through a temporary file: a run killed mid-write must not leave a
    # truncated reference that every later run fails on.
    temp = path.with_name(f".{path.name}.tmp")
    with temp.open("wb") as out:
        np.savez(out, *[value for _, value in leaves])
    temp.replace(path)


def check_reference(leaves: Leaves, path: Path, rtol: float, atol: float) -> CheckOutcome:
    try:
        expected = load_reference(path)
    except Exception as exc:  # a corrupt file is a failed check, with the reason
        return CheckOutcome(CheckName.REFERENCE, False, f"cannot read {path}: {exc}")
    if len(expected) != len(leaves):
        return CheckOutcome(
            CheckName.REFERENCE,
            False,
            f"outputs have {len(leaves)} leaves, {path.name} has {len(expected)}; "
            "regenerate it with `transfer-gate run --write-references`",
        )
    problems = [d.detail for d in leaf_differences(leaves, expected, rtol, atol, "reference")]
    if problems:
        return CheckOutcome(CheckName.REFERENCE, False, "; ".join(problems))
    return CheckOutcome(
        CheckName.REFERENCE,
        True,
        f"{counted(len(leaves), 'leaf', 'leaves')} {'matches' if len(leaves) == 1 else 'match'} "
        f"{path.name} within rtol={rtol:g}, atol={atol:g}",
    )


def check_custom(outputs: Any, check: Callable[[Any], Any], name: str) -> CheckOutcome:
    try:
        verdict = check(outputs)
    except Exception as exc:
        return CheckOutcome(CheckName.CUSTOM, False, f"{name} raised {type(exc).__name__}: {exc}")
    if verdict is False:
        return CheckOutcome(CheckName.CUSTOM, False, f"{name} returned False")
    return CheckOutcome(CheckName.CUSTOM, True, f"{name} accepted the outputs")


def run_checks(
    checks: Checks,
    outputs: Any,
    leaves: Leaves,
    custom: Callable[[Any], Any] | None,
) -> tuple[CheckOutcome, ...]:
    """Every check the policy asks for, in a fixed order."""
    found: list[CheckOutcome] = []
    if checks.finite:
        found.append(check_finite(leaves))
    if checks.reference is not None and checks.write_reference:
        write_reference(checks.reference, leaves)
        found.append(
            CheckOutcome(
                CheckName.REFERENCE,
                True,
                f"wrote {counted(len(leaves), 'leaf', 'leaves')} to {checks.reference} "
                "(--write-references)",
            )
        )
    elif checks.reference is not None:
        found.append(check_reference(leaves, checks.reference, checks.rtol, checks.atol))
    if custom is not None and checks.custom is not None:
        found.append(check_custom(outputs, custom, checks.custom.spec))
    return tuple(found)
