"""Whether the base has a region's footprint as the head's run found it (`Footprint`).

A region whose every file the base has byte for byte (the same sha256 at the same path under
its git top level), whose absent paths are absent there too, whose listed folders list the
same names, and whose policy entry is the same (parsed), would run the same code on the same
data from the base: it runs once, from the head, and its comparison says so
(`BaseStatus.UNCHANGED`). Anything Python did not see is outside the footprint
(`gate.witness.footprint`; docs/compare.md, "What a change can reach").
"""

from __future__ import annotations

import os
from pathlib import Path

from gate.results.footprint import Footprint
from gate.witness.footprint import file_sha256, names_sha256


def same_in_base(footprint: Footprint, base_top: Path) -> bool:
    """Whether the tree at ``base_top`` has ``footprint``'s files, absences and listings.

    A footprint without a file proves nothing (the step came from outside the tree)."""
    if not footprint.files:
        return False
    for path, digest in footprint.files:
        if not digest or file_sha256(str(base_top / path)) != digest:
            return False
    if any(os.path.lexists(base_top / path) for path in footprint.absent):
        return False
    for folder, digest in footprint.listed:
        try:
            names = os.listdir(base_top / folder)
        except OSError:
            return False
        if names_sha256(names) != digest:
            return False
    return True
