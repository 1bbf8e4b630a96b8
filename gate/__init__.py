"""jax-transfer-gate: fail CI on implicit host/device transfers in JAX code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gate.package import PACKAGE_DIR, __version__

if TYPE_CHECKING:
    from gate.api import check_region, format_failure

__all__ = ["PACKAGE_DIR", "__version__", "check_region", "format_failure"]


def __getattr__(name: str) -> object:
    # Imported on first use: `import gate` (the CLI, every worker) must not pay for the
    # engine, nor import jax (`gate.api`).
    if name in ("check_region", "format_failure"):
        from gate import api

        return getattr(api, name)
    raise AttributeError(f"module 'gate' has no attribute {name!r}")
