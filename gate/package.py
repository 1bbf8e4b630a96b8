"""This package itself: its version, the folder it is installed in, and where its docs are.

At the bottom of the gate's layers: every module may ask, and `gate/__init__.py` (the
package's face, which also hands on the public API) only repeats it.
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

# The folder of this `gate` package: frames under it are the gate's, never the user's line.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# The repository's pages at this version's tag: a pip install has no docs/ folder, so what the
# gate prints points here. `.ci/repository.py set` names the real repository, as everywhere.
REPOSITORY_URL = "https://github.com/OWNER/jax-transfer-gate"


def docs_url(page: str, section: str = "") -> str:
    """The address of ``page`` (``docs/policy.md``, ``README.md``) as this version ships it,
    at heading anchor ``section`` if given."""
    anchor = f"#{section}" if section else ""
    return f"{REPOSITORY_URL}/blob/v{__version__}/{page}{anchor}"
