"""What a region read of its tree: the files, the paths it found missing, the folders it listed.

Recorded in the worker while the head's region runs (`gate.witness.footprint`), and read by
``run --base`` (`gate.compare.footprint`): a region whose footprint the base has, byte for
byte or as the same code, runs once, from the head. Paths are relative to the tree's git top
level, with ``/``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Footprint:
    """Every file of its tree a region's run reached, as far as Python saw it."""

    files: tuple[tuple[str, str], ...]  # (path, sha256 hex) of each file read or imported
    absent: tuple[str, ...]  # paths probed (opened, or a module's candidates) and missing
    listed: tuple[tuple[str, str], ...]  # (folder, sha256 hex of its sorted names)
    # sha256 hex of the region's policy entry and the file's shared keys, parsed ("": not
    # known; `gate.compare.footprint` fills it in, the worker reads no YAML).
    policy: str = ""
