"""The head's outputs against the base's, leaf by leaf, within the region's tolerance.

Only comparable when both trees computed from the same inputs: setup must give
the same arrays on every call (checked in each worker, `gate.region.held`) and
the same arrays in both trees. Otherwise the comparison says why it was not
made, rather than failing a change for a difference it did not cause.

Both sides' outputs always arrive: a region that ran to its end in its worker hands
them over, and a worker that cannot fetch them reports that as the region's own error
(a gate fault, `gate.isolation.worker`), never as a comparison that was not made.
"""

from __future__ import annotations

from gate.policy.model import Checks
from gate.results.comparison import ResultComparison, ResultStatus, StepOutputs
from gate.results.leaf_diff import leaf_differences
from gate.text import counted


def compare_outputs(base: StepOutputs, head: StepOutputs, checks: Checks) -> ResultComparison:
    """Every array leaf of ``head`` against ``base``'s of the same path, within
    ``checks.rtol``/``checks.atol``."""
    if head.setup_digest is None or base.setup_digest is None:
        which = "head" if head.setup_digest is None else "base"
        return _not_compared(
            f"setup is not deterministic (two calls in the {which} gave different inputs); "
            "seed it, e.g. with a fixed jax.random.key"
        )
    if head.setup_digest != base.setup_digest:
        return _not_compared("setup gives the base and the head different inputs")
    tolerance = f"rtol={checks.rtol:g}, atol={checks.atol:g}"
    differences = leaf_differences(head.leaves, base.leaves, checks.rtol, checks.atol, "base")
    if differences:
        return ResultComparison(
            ResultStatus.DIFFERS,
            f"{counted(len(differences), 'leaf differs', 'leaves differ')} from the base: "
            + "; ".join(d.detail for d in differences),
            differences=tuple(differences),
        )
    return ResultComparison(
        ResultStatus.MATCHES, f"{_leaves(len(head.leaves))} the base within {tolerance}"
    )


def _not_compared(why: str) -> ResultComparison:
    return ResultComparison(ResultStatus.NOT_COMPARED, f"results not compared: {why}")


def _leaves(count: int) -> str:
    return "1 output leaf matches" if count == 1 else f"{count} output leaves match"
