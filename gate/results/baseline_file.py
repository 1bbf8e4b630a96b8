"""The stored baseline file: its schema, in every version the gate has written; read and written.

A reviewer edits the file by hand and resolves merge conflicts in it, so every value is
checked as it is read (`gate.documents`), before anything runs: a wrong type, a missing or
unknown key, a negative count or time, an unknown direction. What the gate wrote before is
read when it can be, whole, and refused with "regenerate" when it cannot; never half-read:

- version 1 (the first gate): one fingerprint per line, not per array. Refused.
- version 2: per-array fingerprints; its ``format`` was ``jax-transfer-gate.baseline`` until
  the gate was laid out in folders. Read; it has no timing.
- version 3: each region's step times too, under ``timing``, keyed by a device string.
  Read, whole; its timing is not compared, as it does not say which machine measured it.
- version 4: each timing records its `Machine`.

In every version, each entry's fingerprint must be that of the fields it shows
(`entry_fingerprint`): an entry that shows one line and accepts another is refused whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from gate.documents import DocumentError, Record, encode, read_document
from gate.files import write_text_atomically
from gate.results.baseline import Accepted, entry_fingerprint, entry_order
from gate.results.timing_baseline import Amount, Samples, StoredCost, StoredTiming

FORMAT: Literal["jax-transfer-gate.results.baseline"] = "jax-transfer-gate.results.baseline"
VERSION: Literal[4] = 4
# The name version 2 files had too, before the gate's modules moved into folders.
_FORMATS = (FORMAT, "jax-transfer-gate.baseline")
FIX = "regenerate it with `transfer-gate baseline`"
_COMMENT = (
    "Implicit transfers accepted by `transfer-gate baseline`; the gate fails only on "
    "transfers not listed here. Step times by region, and the machine that measured them, "
    "under 'timing'."
)


class BaselineError(Exception):
    """The baseline file is unreadable or not a baseline; one line, names the file and the fix."""


class Baseline(Record, frozen=True, kw_only=True):
    """A transfer-gate baseline, version 4: accepted transfers; each region's timing and machine."""

    # Another kind of accepted finding (unused donations, say) is one more list here, of
    # records that name their region as `Accepted` does, with a default so that a file
    # without it still reads; `uncovered`/`rebaselined` show how a list is re-recorded.

    format: Literal["jax-transfer-gate.results.baseline"] = FORMAT
    version: Literal[4] = VERSION
    comment: str = _COMMENT
    accepted: tuple[Accepted, ...]
    timing: dict[str, StoredTiming] = msgspec.field(default_factory=dict)


class _TimingV3(Record, frozen=True, kw_only=True):
    """A version 3 timing: keyed by a device string, which names no processor."""

    device: str
    median_s: Amount
    p25_s: Amount
    p75_s: Amount
    samples: Samples
    cost: StoredCost | None = None


class _BaselineV3(Record, frozen=True, kw_only=True):
    format: str
    version: int
    comment: str = ""
    accepted: tuple[Accepted, ...]
    timing: dict[str, _TimingV3] = msgspec.field(default_factory=dict)


class _BaselineV2(Record, frozen=True, kw_only=True):
    format: str
    version: int
    comment: str = ""
    accepted: tuple[Accepted, ...]


_VERSIONS: dict[int, type[msgspec.Struct] | str] = {
    1: "predates per-array fingerprints (one finding per array moved) and cannot be read",
    2: _BaselineV2,
    3: _BaselineV3,
    VERSION: Baseline,
}


@dataclass(frozen=True)
class StoredBaseline:
    """What a baseline file holds, as `run` and `baseline` use it."""

    accepted: tuple[Accepted, ...] = ()
    timing: Mapping[str, StoredTiming] = field(default_factory=dict)
    # Why none of the file's timing can be compared (a file from before machines were
    # recorded), with what records it; None when it can.
    no_timing: str | None = None


def load_baseline(path: Path, shown: str | None = None) -> StoredBaseline:
    """The baseline in ``path``, every value checked; BaselineError (one line, naming the file
    ``shown``) when it is unusable."""
    try:
        document = read_document(
            path,
            formats=_FORMATS,
            versions=_VERSIONS,
            what="transfer-gate baseline",
            fix=FIX,
            shown=shown,
        )
    except DocumentError as exc:
        raise BaselineError(str(exc)) from exc
    _check_fingerprints(document.accepted, str(path) if shown is None else shown)
    if isinstance(document, Baseline):
        return StoredBaseline(document.accepted, document.timing)
    if isinstance(document, _BaselineV3) and document.timing:
        why = "the baseline's timing does not say which machine measured it (a version 3 file)"
    else:
        why = "the baseline has no timing"
    return StoredBaseline(document.accepted, {}, why)


def _check_fingerprints(accepted: Sequence[Accepted], name: str) -> None:
    """BaselineError for the first entry whose fingerprint is not that of the transfer it
    shows: it would accept a line a reviewer of the file's diff never sees (issue 54)."""
    for index, entry in enumerate(accepted):
        if entry.fingerprint != entry_fingerprint(entry):
            raise BaselineError(
                f"{name}: accepted[{index}]: fingerprint {entry.fingerprint} is not that of the "
                f"transfer the entry shows ({entry.region}: {entry.describe()}); an entry "
                f"accepts only what it shows: {FIX}"
            )


def write_baseline(
    path: Path, accepted: Sequence[Accepted], timing: Mapping[str, StoredTiming]
) -> None:
    """Write the baseline atomically, sorted and stable for diffs."""
    document = Baseline(accepted=tuple(sorted(accepted, key=entry_order)), timing=dict(timing))
    write_text_atomically(path, encode(document))
