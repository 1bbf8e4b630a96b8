"""The head's outputs against the base's, leaf by leaf, within the region's tolerance.

Only comparable when both trees computed from the same inputs: setup must give
the same arrays on every call (checked in each worker, `gate.region.held`) and
the same arrays in both trees. Otherwise the comparison says why it was not
made, rather than failing a change for a difference it did not cause.
"""

from __future__ import annotations

from gate.policy.model import Checks
from gate.results.comparison import ResultComparison, StepOutputs
from gate.results.leaf_diff import leaf_differences
from gate.wording import counted


def compare_outputs(
    base: StepOutputs | None, head: StepOutputs | None, checks: Checks
) -> ResultComparison:
    """Every array leaf of ``head`` against ``base`` within ``checks.rtol``/``checks.atol``."""
    missing = [name for name, side in (("head", head), ("base", base)) if side is None]
    if missing or base is None or head is None:
        return _not_compared(f"the {' and '.join(missing)}'s outputs could not be fetched")
    if head.setup_digest is None or base.setup_digest is None:
        which = "head" if head.setup_digest is None else "base"
        return _not_compared(
            f"setup is not deterministic (two calls in the {which} gave different inputs); "
            "seed it, e.g. with a fixed jax.random.key"
        )
    if head.setup_digest != base.setup_digest:
        return _not_compared("setup gives the base and the head different inputs")
    tolerance = f"rtol={checks.rtol:g}, atol={checks.atol:g}"
    if len(head.leaves) != len(base.leaves):
        return ResultComparison(
            compared=True,
            passed=False,
            detail=f"the outputs have {counted(len(head.leaves), 'array leaf', 'array leaves')}, "
            f"the base's {len(base.leaves)}",
        )
    differences = leaf_differences(
        head.leaves, [value for _, value in base.leaves], checks.rtol, checks.atol, "base"
    )
    if differences:
        return ResultComparison(
            compared=True,
            passed=False,
            detail=f"{len(differences)} of {counted(len(head.leaves), 'output leaf', 'leaves')}"
            f" {'differs' if len(differences) == 1 else 'differ'} from the base: "
            + "; ".join(d.detail for d in differences),
            differences=tuple(differences),
        )
    return ResultComparison(
        compared=True,
        passed=True,
        detail=f"{_leaves(len(head.leaves))} the base within {tolerance}",
    )


def _not_compared(why: str) -> ResultComparison:
    return ResultComparison(compared=False, passed=True, detail=f"results not compared: {why}")


def _leaves(count: int) -> str:
    return "1 output leaf matches" if count == 1 else f"{count} output leaves match"
