"""The head's policy as the base tree runs it, and which of its regions the base has at all.

"Same inputs (the head's)": the base runs each region exactly as the head's
policy file says (guard levels, runs, setup, boundaries), from the base's
code. How the base's code runs is the base's own: its worker starts with the
``env:`` of the base's copy of the policy file, and imports from that copy's
``python_path`` folders, as the base would run alone (a change to ``env:``,
``JAX_ENABLE_X64`` say, is then a change the comparison sees). The base's
result checks are off (they are the head's to pass), and so is its comparison
with anything. A callable the base cannot import, renamed in the change, is
taken from the base's own copy of the policy instead
(`gate.compare.own_definition`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path

import yaml

from gate.policy.model import Checks, Policy, Region
from gate.policy.problems import absolute_path


def in_tree(path: Path, head_root: Path, base_root: Path) -> Path:
    """``path`` (absolute, or relative to the head's root) at the same place in the base."""
    absolute = path if path.is_absolute() else head_root / path
    try:
        relative = absolute.resolve().relative_to(head_root.resolve())
    except ValueError:
        return absolute  # outside the repository: the same folder for both trees
    return base_root / relative


def _base_file(policy: Policy, head_root: Path, base_root: Path) -> dict[object, object] | None:
    """The base's copy of this policy file as plain YAML; None when it has none, or none that
    reads. Read leniently (nothing validated): the base's file may be of an older shape the
    head's gate would refuse, and its regions and settings still count."""
    return _read(in_tree(policy.path, head_root, base_root))


def base_document(policy: Policy, head_root: Path, base_root: Path) -> list[object] | None:
    """The base's copy of this policy file's ``regions:`` as plain YAML; None when it has no file.

    A file without a list of regions gives [].
    """
    document = _base_file(policy, head_root, base_root)
    if document is None:
        return None
    regions = document.get("regions")
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
    """``policy``'s regions without result checks, under the base's own ``env:`` and
    ``python_path`` (its copy of the file's; the head's folders taken in the base checkout
    where it has no readable copy)."""
    document = _base_file(policy, head_root, base_root)
    if document is None:
        return dataclasses.replace(
            policy,
            python_path=tuple(in_tree(p, head_root, base_root) for p in policy.python_path),
            regions=tuple(base_region(r) for r in policy.regions),
        )
    folder = in_tree(policy.path, head_root, base_root).parent
    paths = document.get("python_path")
    env = document.get("env")
    return dataclasses.replace(
        policy,
        python_path=tuple(absolute_path(folder / str(p)) for p in paths if isinstance(p, str | int))
        if isinstance(paths, list)
        else (),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items()))
        if isinstance(env, dict)
        else (),
        regions=tuple(base_region(r) for r in policy.regions),
    )


def base_region(region: Region) -> Region:
    """``region`` as the base runs it: the head's settings, without the result checks."""
    checks = Checks(
        finite=False, reference=None, rtol=region.checks.rtol, atol=region.checks.atol, custom=None
    )
    return dataclasses.replace(region, checks=checks)


# The keys of a policy file every region shares: a change to one changes each region's run.
SHARED_KEYS = ("defaults", "env", "python_path", "suite", "version")


def head_entry(policy: Policy, head_root: Path, name: str) -> str:
    """`entry_digest` of region ``name`` in the head's policy file ("" when unreadable)."""
    return entry_digest(
        _read(policy.path if policy.path.is_absolute() else head_root / policy.path), name
    )


def base_entry(policy: Policy, head_root: Path, base_root: Path, name: str) -> str:
    """`entry_digest` of region ``name`` in the base's copy of the policy file."""
    return entry_digest(_base_file(policy, head_root, base_root), name)


def entry_digest(document: dict[object, object] | None, name: str) -> str:
    """sha256 of region ``name``'s mapping and the file's `SHARED_KEYS`, as parsed: equal
    for two files that differ only in other regions, comments or layout. "" without one."""
    if document is None:
        return ""
    regions = document.get("regions")
    entries = [
        r
        for r in (regions if isinstance(regions, list) else [])
        if isinstance(r, dict) and str(r.get("name")) == name
    ]
    if len(entries) != 1:
        return ""
    shared = {key: document.get(key) for key in SHARED_KEYS}
    text = json.dumps([entries[0], shared], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _read(file: Path) -> dict[object, object] | None:
    """``file`` as plain YAML (its callers only read it); None when it has none that reads."""
    try:
        return _parsed(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None


# Each region of a run reads both trees' copies of its policy file, twice each: parsed once
# per text, 20 regions' reads took 0.6 s of a run that compared none of them (issue 55).
@functools.lru_cache(maxsize=32)
def _parsed(text: str) -> dict[object, object]:
    document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return document if isinstance(document, dict) else {}
