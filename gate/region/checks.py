"""Result checks on a region's outputs: finite, reference, custom.

The outputs arrive here already fetched to the host (explicitly, outside
the guard), as a pytree of NumPy arrays, so a check never moves data itself.

A check never passes on a value it could not read: every floating leaf is checked,
bfloat16 and float8 included (`gate.results.dtypes`); a reference file keeps each leaf's
dtype and path; a custom check's answer must say pass or fail, or the region errors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gate.files import write_bytes_atomically
from gate.policy.model import Checks
from gate.region.errors import RegionAbort
from gate.results.dtypes import as_bits, from_bits, is_floating
from gate.results.errors import ErrorKind, RegionError
from gate.results.leaf_diff import Leaves, OtherLeaves, leaf_differences
from gate.results.records import CheckName, CheckOutcome
from gate.text import counted
from gate.user_code import SourceLocation

# The reference file's own entries beside the leaves (``arr_0``, ``arr_1``... as
# ``np.savez`` names them): each leaf's pytree path and dtype name, in leaf order.
_PATHS = "__leaf_paths__"
_DTYPES = "__leaf_dtypes__"
REGENERATE = "regenerate it with `transfer-gate run --write-references`"


def check_finite(leaves: Leaves) -> CheckOutcome:
    bad = []
    floating: dict[str, None] = {}
    for path, value in leaves:
        if is_floating(value.dtype):
            floating[str(value.dtype)] = None
            count = int(value.size - np.count_nonzero(np.isfinite(value)))
            if count:
                bad.append(
                    f"{path or 'output'} ({value.dtype}): {count} of {value.size} values "
                    "are NaN or Inf"
                )
    if bad:
        return CheckOutcome(CheckName.FINITE, False, "; ".join(bad))
    kinds = f" ({', '.join(floating)} checked)" if floating else " (none is floating)"
    return CheckOutcome(
        CheckName.FINITE, True, f"all {len(leaves)} output leaves are finite{kinds}"
    )


def load_reference(path: Path) -> list[tuple[str | None, np.ndarray[Any, Any]]]:
    """The reference leaves in order, each with its pytree path (None in a file that has none).

    ValueError when the file holds a leaf it cannot give back as it was written.
    """
    with np.load(path, allow_pickle=False) as data:
        names = sorted((n for n in data.files if n not in (_PATHS, _DTYPES)), key=_leaf_order)
        values = [np.asarray(data[name]) for name in names]
        paths = [str(p) for p in data[_PATHS]] if _PATHS in data.files else None
        dtypes = [str(d) for d in data[_DTYPES]] if _DTYPES in data.files else None
    if dtypes is None:
        for value in values:
            if value.dtype.kind == "V":  # np.savez of a bfloat16 or float8 leaf, before dtypes
                raise ValueError(
                    f"it holds a leaf as raw {value.dtype} bytes (a bfloat16 or float8 output "
                    f"written by an older transfer-gate), which cannot be compared; {REGENERATE}"
                )
        return [(None, value) for value in values]
    if paths is None or not len(paths) == len(dtypes) == len(values):
        raise ValueError(f"its leaf paths and dtypes do not match its leaves; {REGENERATE}")
    kept = zip(paths, values, dtypes, strict=True)
    return [(leaf, from_bits(value, dtype)) for leaf, value, dtype in kept]


def _leaf_order(name: str) -> tuple[int, str]:
    # np.savez(*leaves) names them arr_0..arr_N; sort numerically so arr_10
    # comes after arr_9.
    prefix, _, number = name.rpartition("_")
    return (int(number), prefix) if number.isdigit() else (1 << 30, name)


def write_reference(path: Path, leaves: Leaves) -> None:
    """Save the outputs as a reference file the ``reference`` check reads: each leaf as its
    bits, with its path and dtype name, so bfloat16 and float8 leaves come back as they were."""
    import io

    buffer = io.BytesIO()
    own: dict[str, Any] = {
        _PATHS: np.array([leaf for leaf, _ in leaves], dtype=str),
        _DTYPES: np.array([str(value.dtype) for _, value in leaves], dtype=str),
    }
    np.savez(buffer, *[as_bits(value) for _, value in leaves], **own)
    # Atomically: a run killed mid-write must not leave a truncated reference that every
    # later run fails on.
    write_bytes_atomically(path, buffer.getvalue())


def check_reference(leaves: Leaves, path: Path, rtol: float, atol: float) -> CheckOutcome:
    try:
        expected: OtherLeaves = load_reference(path)
    except Exception as exc:  # a corrupt file is a failed check, with the reason
        return CheckOutcome(CheckName.REFERENCE, False, f"cannot read {path}: {exc}")
    problems = [d.detail for d in leaf_differences(leaves, expected, rtol, atol, "reference")]
    if problems:
        if any(leaf is None for leaf, _ in expected) and len(expected) != len(leaves):
            problems.append(REGENERATE)
        return CheckOutcome(CheckName.REFERENCE, False, "; ".join(problems))
    return CheckOutcome(
        CheckName.REFERENCE,
        True,
        f"{counted(len(leaves), 'leaf', 'leaves')} {'matches' if len(leaves) == 1 else 'match'} "
        f"{path.name} within rtol={rtol:g}, atol={atol:g}",
    )


def custom_verdict(answer: Any) -> bool | None:
    """A custom check's answer as pass (True) or fail (False); None when it says neither.

    ``True`` and ``None`` pass; ``False`` fails, and so does NumPy's or JAX's false
    (``np.all(...)`` returns ``np.bool_``, which ``is False`` never matches). A single
    boolean array element counts as a bool; anything else says neither.
    """
    if answer is None:
        return True
    if isinstance(answer, bool | np.bool_):
        return bool(answer)
    dtype = getattr(answer, "dtype", None)
    shape = getattr(answer, "shape", None)
    if dtype is not None and shape is not None and np.dtype(dtype) == np.bool_ and _one(shape):
        return bool(np.asarray(answer).reshape(()))
    return None


def _one(shape: Any) -> bool:
    return int(np.prod(shape)) == 1


def check_custom(
    outputs: Any, check: Callable[[Any], Any], name: str, where: SourceLocation | None
) -> CheckOutcome:
    try:
        answer = check(outputs)
    except Exception as exc:
        return CheckOutcome(CheckName.CUSTOM, False, f"{name} raised {type(exc).__name__}: {exc}")
    verdict = custom_verdict(answer)
    got = f"{type(answer).__module__}.{type(answer).__qualname__}".removeprefix("builtins.")
    if verdict is None:
        shape = getattr(answer, "shape", None)
        got += f" of shape {tuple(shape)}" if shape is not None else f" ({answer!r:.60})"
        message = (
            f"custom check {name} returned {got}, which says neither pass nor fail; return "
            "True or None to pass and False to fail (reduce an array with np.all(...))"
        )
        raise RegionAbort(RegionError(ErrorKind.CHECK, message, message, where))
    if not verdict:
        kind = "" if isinstance(answer, bool) else f" ({got})"
        return CheckOutcome(CheckName.CUSTOM, False, f"{name} returned False{kind}")
    return CheckOutcome(CheckName.CUSTOM, True, f"{name} accepted the outputs")


def run_checks(
    checks: Checks,
    outputs: Any,
    leaves: Leaves,
    custom: Callable[[Any], Any] | None,
    custom_at: SourceLocation | None = None,
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
        found.append(check_custom(outputs, custom, checks.custom.spec, custom_at))
    return tuple(found)
