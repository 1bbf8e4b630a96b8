"""This package itself: its version, and the folder it is installed in.

At the bottom of the gate's layers: every module may ask, and `gate/__init__.py` (the
package's face, which also hands on the public API) only repeats it.
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

# The folder of this `gate` package: frames under it are the gate's, never the user's line.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
