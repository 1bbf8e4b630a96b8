"""How quantities read in everything the gate prints: counts, durations, sizes, figures.

One place for each, so that a step time, a byte count or "1 region" reads the same in the
terminal, JUnit, the job summary and the JSON's headlines; and the one "did you mean" every
message about a misspelt name ends with.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence


def counted(n: int, one: str, many: str | None = None) -> str:
    """``1 region``, ``0 regions``; ``many`` for a plural that is not ``one`` + s (``policies``)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


# Largest unit first; a value is shown in the first unit where it reads >= 1.
_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def duration_text(seconds: float) -> str:
    """``1.23 ms``: three significant digits in the largest unit where the number is >= 1."""
    if seconds == 0:
        return "0 s"
    for unit, scale in _UNITS:
        value = seconds / scale
        # 0.9995 rather than 1 so 999.7 µs reads "1.00 ms", not "1000 µs".
        if abs(value) >= 0.9995 or unit == _UNITS[-1][0]:
            return f"{_three_significant(value)} {unit}"
    raise AssertionError("unreachable: the last unit always matches")


def _three_significant(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 10_000:  # "1.70e308", not its 309 digits
        return number_text(value)
    if magnitude >= 99.95:
        return f"{value:.0f}"
    if magnitude >= 9.995:
        return f"{value:.1f}"
    return f"{value:.2f}"


def si_text(value: float, unit: str) -> str:
    """``1.2 GFLOP``, ``524 kFLOP``, ``0 FLOP``."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def size_text(n: float) -> str:
    """``1.5 GiB``, ``12 KiB``, ``512 B``: binary units, as memory is counted."""
    for factor, prefix in ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")):
        if abs(n) >= factor:
            return f"{n / factor:.3g} {prefix}B"
    return f"{n:.0f} B"


def bytes_text(n: float) -> str:
    """``32.8 kB``, ``1.2 MB``, ``512 B``: decimal units, as link bandwidths are quoted."""
    return si_text(n, "B") if abs(n) >= 1e3 else f"{n:.0f} B"


def number_text(value: float | None) -> str:
    """``2.10e6`` for a figure, ``12`` for a small whole number, ``absent`` for None."""
    if value is None:
        return "absent"
    if value == int(value) and abs(value) < 10_000:
        return str(int(value))
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The one of ``choices`` that ``word`` most likely misspells, or None."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    return suggesting(closest(word, choices))


def suggesting(close: str | None) -> str:
    """`` (did you mean 'x'?)`` for a match `closest` found, or an empty string."""
    return f" (did you mean {close!r}?)" if close is not None else ""


def accepted_text(accepted: str) -> str:
    """``; accepted at policies/train.yaml:9: adds a metric``: what the line of a change the
    head's policy accepts ends with (`gate.compare.acceptance`); "" for one not accepted."""
    return f"; accepted at {accepted}" if accepted else ""
