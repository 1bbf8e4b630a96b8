"""The head's policy as the base tree runs it, and which of its regions the base has at all.

"Same policy (the head's)": the base runs each region exactly as the head's
policy file says (guard levels, runs, setup, boundaries), from the base's
code. Only what points into the tree moves: the policy's ``python_path``
folders are taken in the base checkout. The base's result checks are off
(they are the head's to pass), and so is its comparison with anything. A
callable the base cannot import, renamed in the change, is taken from the
base's own copy of the policy instead (`gate.compare.own_definition`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from gate.policy.model import Checks, Policy, Region


def in_tree(path: Path, head_root: Path, base_root: Path) -> Path:
    """``path`` (absolute, or relative to the head's root) at the same place in the base."""
    absolute = path if path.is_absolute() else head_root / path
    try:
        relative = absolute.resolve().relative_to(head_root.resolve())
    except ValueError:
        return absolute  # outside the repository: the same folder for both trees
    return base_root / relative


def base_document(policy: Policy, head_root: Path, base_root: Path) -> list[object] | None:
    """The base's copy of this policy file's ``regions:`` as plain YAML; None when it has no file.

    Read leniently (plain YAML, nothing validated): the base's file may be of an
    older shape the head's gate would refuse, and its regions still count as there.
    A file without a list of regions gives [].
    """
    file = in_tree(policy.path, head_root, base_root)
    try:
        document = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    regions = document.get("regions") if isinstance(document, dict) else None
    return list(regions) if isinstance(regions, list) else []


def regions_in_base(policy: Policy, head_root: Path, base_root: Path) -> frozenset[str] | None:
    """The region names the base's copy of this policy file has; None when it has no such file."""
    regions = base_document(policy, head_root, base_root)
    if regions is None:
        return None
    return frozenset(
        str(region["name"]) for region in regions if isinstance(region, dict) and "name" in region
    )


def for_base(policy: Policy, head_root: Path, base_root: Path) -> Policy:
    """``policy`` with its folders in the base checkout and no result checks."""
    return dataclasses.replace(
        policy,
        python_path=tuple(in_tree(p, head_root, base_root) for p in policy.python_path),
        regions=tuple(base_region(r) for r in policy.regions),
    )


def base_region(region: Region) -> Region:
    """``region`` as the base runs it: the head's settings, without the result checks."""
    checks = Checks(
        finite=False, reference=None, rtol=region.checks.rtol, atol=region.checks.atol, custom=None
    )
    return dataclasses.replace(region, checks=checks)
