"""The base's own definition of a region, for a callable of the head's policy the base lacks.

The base runs the head's policy (`gate.compare.base_policy`), so a step renamed
in the change (and its policy line updated) is a name the base's code does not
have. Then the base runs the same region as its own copy of the policy file
defines it: its ``step``, ``setup`` and ``boundaries``, with every other setting
still the head's. The base's file is read leniently, as plain YAML: it may be
of an older shape, and only these three keys are taken from it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from gate.compare.base_policy import base_document
from gate.policy.model import CallableRef, Policy, Region
from gate.results.comparison import Renamed

# The policy schema's pattern for `module:qualname` (`gate/policy/policy.schema.json`).
_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_REF = re.compile(rf"{_NAME}:{_NAME}")


@dataclass(frozen=True)
class OwnDefinition:
    """The region as the base defines it, and what in it differs from the head's."""

    region: Region
    renamed: tuple[Renamed, ...]


def own_definition(
    policy: Policy, region: Region, head_root: Path, base_root: Path
) -> OwnDefinition | str:
    """``region`` with the base's own callables; or, when there is none to run, why not.

    The reason reads after "the base's copy of the policy ...", e.g. "names the
    same step steps:clean2 for region 'clean'".
    """
    file = policy.path.as_posix()
    regions = base_document(policy, head_root, base_root)
    mine = next(
        (
            r
            for r in regions or ()
            if isinstance(r, dict) and "name" in r and str(r["name"]) == region.name
        ),
        None,
    )
    if mine is None:
        return f"the base's {file} has no region '{region.name}'"
    step = _ref(mine.get("step"), region.step.line)
    setup = _ref(mine.get("setup"), region.setup.line if region.setup else region.line)
    boundaries = mine.get("boundaries", [])
    listed = [_ref(b, region.line) for b in boundaries] if isinstance(boundaries, list) else [None]
    unusable = [
        what
        for what, bad in (
            ("step", step is None),
            ("setup", "setup" in mine and setup is None),
            ("boundaries", None in listed),
        )
        if bad
    ]
    if step is None or unusable:
        return (
            f"the base's {file} region '{region.name}' has no usable {', '.join(unusable)} "
            "(not a module:qualname string)"
        )
    ours = dataclasses.replace(
        region,
        step=step,
        setup=setup,
        boundaries=tuple(b for b in listed if b is not None),
    )
    renamed = _renamed(region, ours)
    if not renamed:
        return (
            f"the base's {file} names the same step{', setup' if region.setup else ''} "
            f"and boundaries for region '{region.name}' ({region.step}), so the base has no "
            "other definition of it to run"
        )
    return OwnDefinition(ours, renamed)


def _ref(value: object, line: int) -> CallableRef | None:
    """A `module:qualname` string as a reference; None for anything else.

    ``line`` is the head's: an error about it is shown at the head's policy, the one the
    reader has open.
    """
    if not isinstance(value, str) or _REF.fullmatch(value) is None:
        return None
    module, qualname = value.split(":")
    return CallableRef(spec=value, module=module, qualname=qualname, line=line)


def _renamed(head: Region, base: Region) -> tuple[Renamed, ...]:
    """Each place where the base's definition names another callable than the head's."""
    pairs: list[tuple[str, CallableRef | None, CallableRef | None]] = [
        ("step", base.step, head.step),
        ("setup", base.setup, head.setup),
    ]
    if [b.spec for b in base.boundaries] != [h.spec for h in head.boundaries]:
        width = max(len(base.boundaries), len(head.boundaries))
        bases: list[CallableRef | None] = [*base.boundaries, *[None] * width][:width]
        heads: list[CallableRef | None] = [*head.boundaries, *[None] * width][:width]
        pairs += [("boundary", b, h) for b, h in zip(bases, heads, strict=True)]
    # A callable the head adds (a new boundary or setup the base lacks) is a difference too.
    return tuple(
        Renamed(role, base_ref.spec if base_ref else "", head_ref.spec if head_ref else "")
        for role, base_ref, head_ref in pairs
        if (base_ref.spec if base_ref else None) != (head_ref.spec if head_ref else None)
    )
