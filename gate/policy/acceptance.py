"""A region's ``accept:``: the changes a pull request means to make, read from the policy.

One reviewed place: the entry sits in the region's own policy entry, so it is in the pull
request's diff, beside the step it is about, with the reason a reviewer reads. It names a
kind of comparison with the base (results, cost, timing, collectives, donations,
recompiles), never a transfer: a transfer outlives the pull request (every later run, with
or without a base, meets it), so it is accepted in the baseline file, line by line.

Scoped to the pull request: an entry accepts only while the base's copy of the policy lacks
it, the same kind with the same reason (`new_in_head`). Once merged, the base has it, and it
accepts nothing more: a later change of the same kind needs a new reason, in its own diff.
Which entries apply is decided in `gate.compare.acceptance`; this module reads them and
words the edit that accepts a change.
"""

from __future__ import annotations

import yaml

from gate.policy.model import AcceptedChange, ChangeKind, Region
from gate.policy.nodes import line_of, mapping_of
from gate.policy.schema import scalar_value

# What a reviewer reads where the writer has not yet said why: the edit is exact but for this.
REASON_PLACEHOLDER = "<why this change is meant>"


def accepted_of(node: yaml.Node | None) -> tuple[AcceptedChange, ...]:
    """The entries of a validated ``accept:`` mapping, in the order written."""
    return tuple(
        AcceptedChange(ChangeKind(kind), str(scalar_value(value)).strip(), line_of(value))
        for kind, value in mapping_of(node).items()
    )


def base_reasons(region: object) -> dict[str, str]:
    """``{kind: reason}`` of a region as the base's copy of the policy has it, read leniently
    (plain YAML, nothing validated: the base's file is not the head's to judge)."""
    if not isinstance(region, dict):
        return {}
    accept = region.get("accept")
    if not isinstance(accept, dict):
        return {}
    return {str(k): str(v).strip() for k, v in accept.items() if isinstance(v, str)}


def new_in_head(entry: AcceptedChange, base: dict[str, str]) -> bool:
    """Whether ``entry`` is this change's own: the base has no entry of its kind with its reason."""
    return base.get(entry.kind.value) != entry.reason


def accept_edit(
    kind: ChangeKind, region: Region, policy_path: str, stale: AcceptedChange | None = None
) -> str:
    """The exact edit that accepts a ``kind`` change of ``region`` (of the policy file at
    ``policy_path``): what every failing comparison with the base ends with.

    ``stale``: the head's entry of that kind, which the base has too, so it no longer applies.
    """
    if stale is not None:
        return (
            f"to accept it, give `accept: {kind.value}:` at {policy_path}:{stale.line} a new "
            f"reason for this change: the base has {stale.reason!r} too, which accepted the "
            "change that merged it, not this one"
        )
    entry = f"{kind.value}: {REASON_PLACEHOLDER}"
    if region.accept_line:
        return f"to accept it, add `{entry}` under `accept:` at {policy_path}:{region.accept_line}"
    return (
        f"to accept it, add `accept: {{{entry}}}` to region {region.name} at "
        f"{policy_path}:{region.line}"
    )
