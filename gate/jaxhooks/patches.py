"""Replacing a class (or module) attribute of JAX's for a block, and putting the original back.

As chex's ``restrict_backends`` does, the restore checks that what it removes
is still the gate's own: if something replaced the attribute meanwhile (a
test double, another tool's patch), silently writing the original back would
throw theirs away. AssertionError names the attribute instead, and theirs
stays.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def attribute_replaced(
    owner: type | types.ModuleType, name: str, replacement: Any, *, label: str
) -> Iterator[None]:
    """``owner.name`` is ``replacement`` while the block runs.

    ``label`` is how refusals spell the attribute (``ArrayImpl._value``). The
    attribute must be defined on ``owner`` itself (not inherited), so the
    original can be written back exactly.
    """
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if owner.__dict__.get(name) is not replacement:
            raise AssertionError(
                f"{label} was replaced by someone else while the gate had it patched; left as it is"
            )
        setattr(owner, name, original)
