"""Warnings a platform's runtime prints in every process that loads it, known to be harmless.

Every worker imports jax, so a warning JAX or its runtime prints at start-up appears once per
worker, and a run of twenty regions repeats it twenty times, prefixed ``[worker]``. The gate
shows each of these once per run, with a note (`gate.isolation.worker_output`). This is the one
list of them, each with the reason it is harmless.

A warning is known by the line Python's `warnings` prints, ``<file>:<line>: <Category>:
<message>``, with the file that raises it: JAX's own source. The same words raised from the
user's code come from another file, and are always shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gate.package import docs_url


@dataclass(frozen=True)
class KnownWarning:
    """A platform start-up warning that every process repeats, and why it is harmless."""

    name: str
    line: re.Pattern[str]  # the line `warnings` prints for it (its source line follows)
    why: str  # why it is harmless, and how to make it go away


_JAX_SOURCE = r"[/\\]jax[/\\]_src[/\\]"

KNOWN_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        "transparent hugepages",
        # jax/_src/cloud_tpu_init.py warns at `import jax` on a TPU v5e or newer whose VM has
        # transparent hugepages off.
        re.compile(
            _JAX_SOURCE + r"cloud_tpu_init\.py:\d+: UserWarning: Transparent hugepages are not "
            r"enabled\."
        ),
        "it slows the TPU runtime's start and shutdown, not a step the gate times; enabling "
        f"transparent hugepages on the VM removes it ({docs_url('docs/runner-host.md')})",
    ),
)


def known_warning(line: str) -> KnownWarning | None:
    """The known warning ``line`` starts, or None (any other line, the user's warnings included)."""
    for warning in KNOWN_WARNINGS:
        if warning.line.search(line):
            return warning
    return None
