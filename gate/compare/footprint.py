"""Whether the base has a region's footprint as the head's run found it (`Footprint`).

A region whose every file the base has (the same sha256 at the same path under its git top
level, or, for a Python source, the same code: `same_code`), whose absent paths are absent
there too, whose listed folders list the same names, and whose policy entry is the same
(parsed), would run the same code on the same data from the base: it runs once, from the
head, and its comparison says so (`BaseStatus.UNCHANGED`). Anything Python did not see is
outside the footprint (`gate.witness.footprint`; docs/compare.md, "What a change can reach").
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from gate.results.footprint import Footprint
from gate.witness.footprint import file_sha256, names_sha256


@dataclass(frozen=True)
class InBase:
    """How the base has a footprint: all its files, and how many of them only as the same code."""

    files: int
    same_code: int  # Python sources whose bytes differ, in comments or layout only


def in_base(footprint: Footprint, base_top: Path, head_top: Path) -> InBase | None:
    """How the tree at ``base_top`` has ``footprint``'s files, absences and listings; None
    where it does not. ``head_top``: the tree the footprint was recorded in.

    A footprint without a file proves nothing (the step came from outside the tree)."""
    if not footprint.files:
        return None
    same_code = 0
    for path, digest in footprint.files:
        if not digest:
            return None
        if file_sha256(str(base_top / path)) == digest:
            continue
        if not same_code_as(head_top / path, digest, base_top / path):
            return None
        same_code += 1
    if any(os.path.lexists(base_top / path) for path in footprint.absent):
        return None
    for folder, digest in footprint.listed:
        try:
            names = os.listdir(base_top / folder)
        except OSError:
            return None
        if names_sha256(names) != digest:
            return None
    return InBase(len(footprint.files), same_code)


def same_code_as(head: Path, digest: str, base: Path) -> bool:
    """Whether two Python sources are the same code, differing only in comments, blank lines,
    line breaks, spacing, parentheses or quotes: the same syntax tree without positions.

    Only where ``head`` is still the file the region ran (its sha256 is ``digest``). A
    docstring is code (a module may read its ``__doc__``); what reads a source's text or
    line numbers (``inspect.getsource``, a hash of the file) is a limit docs/compare.md states.
    """
    return file_sha256(str(head)) == digest and same_code(head, base)


def same_code(head: Path, base: Path) -> bool:
    """Whether ``head`` and ``base`` are Python sources of the same code (`same_code_as`)."""
    if head.suffix != ".py" or base.suffix != ".py":
        return False
    try:
        trees = [ast.parse(path.read_bytes(), filename=str(path)) for path in (head, base)]
    except (OSError, SyntaxError, ValueError):  # no base copy; a file that does not parse
        return False
    first, second = (ast.dump(tree, include_attributes=False) for tree in trees)
    return first == second
