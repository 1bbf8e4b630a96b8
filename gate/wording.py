"""Counted nouns in what the gate prints: ``1 region``, ``2 regions``, ``1 policy``."""

from __future__ import annotations


def counted(n: int, one: str, many: str | None = None) -> str:
    """``1 region``, ``0 regions``; ``many`` for a plural that is not ``one`` + s (``policies``)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
