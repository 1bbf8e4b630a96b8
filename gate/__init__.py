"""jax-transfer-gate: fail CI on implicit host/device transfers in JAX code."""

import os

__version__ = "0.1.0"

# The folder of this `gate` package: frames under it are the gate's, never the user's line.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
