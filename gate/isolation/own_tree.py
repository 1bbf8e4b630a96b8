"""A base tree's worker imports from the base's checkout, not from the head's.

Under ``run --base`` each tree's regions run in a worker of its own (`gate.compare.session`),
started in that tree's root. But the interpreter's own start put folders of the head's
checkout on `sys.path` that the base's code would import from:
- ``pip install -e .`` of the head's package: a ``.pth`` file that names the head's folder
  (hatchling, setuptools' src layout), or setuptools' editable finder, a module whose
  ``MAPPING`` names the head's package folders;
- ``PYTHONPATH`` set to a folder of the head's checkout (``$PWD/src`` in a CI step);
- a monorepo run from a subfolder, whose shared code elsewhere in the repository is on the
  path the same ways.

Each such folder is taken at the same place in the base's checkout (``moved``: the head's git
top level and the base's), before the worker imports any code of the tree's; a folder outside
the head's repository (site-packages, the system's) stays. What still comes from the head's
checkout is refused by `gate.compare.session` (the base's step file must lie in the base).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gate.user_code import owning_root


def take_from_own_tree(moved: Sequence[tuple[Path, Path]]) -> None:
    """Point `sys.path` and editable finders' folders under each ``(head, base)`` pair's
    head at the base. Doing it again changes nothing."""
    if not moved:
        return
    path = [_moved(entry, moved) for entry in sys.path]
    changed = path != sys.path
    sys.path[:] = path
    for finder in sys.meta_path:
        module = sys.modules.get(getattr(finder, "__module__", "") or "")
        mapping = getattr(module, "MAPPING", None)
        if isinstance(mapping, dict):  # setuptools' `__editable___<name>_finder`
            for name, folder in list(mapping.items()):
                taken = _moved(folder, moved) if isinstance(folder, str) else folder
                if taken != folder:
                    mapping[name] = taken
                    changed = True
        namespaces = getattr(module, "NAMESPACES", None)
        if isinstance(namespaces, dict):
            for name, folders in list(namespaces.items()):
                if isinstance(folders, list):
                    moved_all = [_moved(f, moved) if isinstance(f, str) else f for f in folders]
                    changed = changed or moved_all != folders
                    namespaces[name] = moved_all
    if changed:  # finders made for the old folders would still answer for them
        sys.path_importer_cache.clear()


def _moved(entry: str, moved: Sequence[tuple[Path, Path]]) -> str:
    """``entry`` at the same place under the base, when it is a folder of the head's code:
    under the head's top level, and not an installed one (a virtual environment in the
    repository, as the README makes ``.venv``, is git-ignored and installed: the base has
    none, and both trees' workers import the same packages from it)."""
    if not entry:
        return entry
    real = os.path.realpath(entry)
    for head, base in moved:
        top = os.path.realpath(head)
        inside = real == top or real.startswith(top + os.sep)
        # A stand-in file in the folder: the rule that says whose a file's code is.
        if inside and owning_root(os.path.join(real, "__init__.py"), [top + os.sep]):
            return os.path.join(os.path.realpath(base), os.path.relpath(real, top))
    return entry
