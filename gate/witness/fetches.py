"""What the device-to-host detector records: one `Fetch` per read, a `FetchLog` per block.

`gate.witness.detector` installs the hooks and calls `FetchLog._record` from
the thread that read; this module decides what a read is called (``__float__``,
``device_get``, ...) and which user line made it.
"""

from __future__ import annotations

import os
import threading
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gate.jaxhooks.guard_text import parse_sharding
from gate.jaxhooks.interpose import is_trampoline_frame
from gate.levels import Direction
from gate.results.cause import HOST_READS
from gate.results.placement import Placement
from gate.results.records import Phase, Transfer
from gate.user_code import SourceLocation, UserCode


class DetectorUnavailable(RuntimeError):
    """A JAX hook the detector relies on is missing: device-to-host is not checked."""


@dataclass(frozen=True)
class Fetch:
    """One read of a device array's value by host code."""

    direction: Direction  # always DEVICE_TO_HOST; kept so fetches read like transfers
    dtype: str  # e.g. "float32"
    shape: tuple[int, ...]
    nbytes: int
    explicit: bool  # inside jax.device_get
    boundary: str | None  # the declared boundary running in that thread, if any
    location: SourceLocation | None  # the user's line
    thread: str  # threading name of the thread that fetched
    what: str  # how the host read it: "__str__", "__array__", "copy_to_host_async", ...
    in_callback: bool = False  # inside a host callback counted by gate.witness.callbacks
    # The read raised, so nothing reached the host: on GPU/TPU the guard
    # refuses it this way under ``disallow``. JAX's message, one line.
    refused: str | None = None
    # Where the array lay when it lies over several devices (a split one is gathered).
    fetched_from: Placement | None = None

    def describe(self) -> str:
        """``device-to-host float32[8,4]``, as `Transfer.describe` spells it."""
        return f"{self.direction.label} {self.dtype}[{','.join(str(d) for d in self.shape)}]"

    def as_transfer(self, phase: Phase, failing: bool) -> Transfer:
        """The record reporters read; the runner decides ``phase`` and ``failing``."""
        kind = "explicit" if self.explicit else "implicit"
        message = (
            f"gate detector: {kind} {self.describe()} ({self.nbytes} bytes) read by "
            f"{self.what} in thread {self.thread}"
        )
        if self.refused is not None:
            message += f"; refused: {self.refused}"
        return Transfer(
            direction=self.direction,
            explicit=self.explicit,
            dtype=self.dtype,
            shape=self.shape,
            location=self.location,
            phase=phase,
            failing=failing,
            message=message,
            boundary=self.boundary,
        )


@dataclass
class FetchLog:
    """What one `detect_fetches` block saw. Safe to read from any thread."""

    code: UserCode
    boundary_of: Callable[[], str | None]
    blind_spots: tuple[str, ...] = ()  # what this log cannot see on this interpreter
    _fetches: list[Fetch] = field(default_factory=list)
    # id(array) -> weak reference: arrays are unhashable, and ids are reused
    # once an array dies, so the reference confirms it is the same object.
    _seen: dict[int, weakref.ref[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def fetches(self) -> tuple[Fetch, ...]:
        """Every fetch, in the order seen.

        Each moved data (or tried to, if refused): a read of a host-cached
        array (see `gate.witness.host_copies`) is not recorded.
        """
        with self._lock:
            return tuple(self._fetches)

    def fetched_earlier(self, tree: Any) -> bool:
        """True if any array leaf of ``tree`` is an object this log saw fetched."""
        import jax

        with self._lock:
            return any(self._is_seen(leaf) for leaf in jax.tree_util.tree_leaves(tree))

    def _is_seen(self, array: Any) -> bool:
        ref = self._seen.get(id(array))
        return ref is not None and ref() is array

    def _record(
        self,
        array: Any,
        frames: Sequence[traceback.FrameSummary],
        explicit: bool,
        in_callback: bool,
        refused: str | None,
        *,
        hook: str,
    ) -> None:
        user = _user_index(self.code, frames)
        fetch_what = _what(frames, user, hook)
        location = self.code.locate(frames)
        boundary = self.boundary_of()
        with self._lock:
            if refused is None:
                self._seen[id(array)] = weakref.ref(array)
            self._fetches.append(
                Fetch(
                    direction=Direction.DEVICE_TO_HOST,
                    dtype=str(array.dtype),
                    shape=tuple(int(d) for d in array.shape),
                    nbytes=int(array.nbytes),
                    explicit=explicit,
                    boundary=boundary,
                    location=location,
                    thread=threading.current_thread().name,
                    what=fetch_what,
                    in_callback=in_callback,
                    refused=refused,
                    fetched_from=_placement(array),
                )
            )


def _placement(array: Any) -> Placement | None:
    """Where a device array lies, over several devices; None on one (or if it cannot say)."""
    try:
        sharding = array.sharding
        return parse_sharding(repr(sharding), len(sharding.device_set))
    except Exception:  # a reading aid: never let it break the detector
        return None


# --- how the host read the value -----------------------------------------------------------------

# Frames between the user's line and ``_value`` that name the operation,
# mapped to the name reported. ``_item`` is how jax spells ``Array.item``.
_READERS = {name: name for name in HOST_READS} | {"_item": "item"}
_JAX_DIR = f"{os.sep}jax{os.sep}"


def _user_index(code: UserCode, frames: Sequence[traceback.FrameSummary]) -> int | None:
    """Index of the frame `UserCode.locate` names, with the same fallback."""
    for accept in (code.is_user, lambda f: not code.is_library(f)):
        for index in range(len(frames) - 1, -1, -1):
            if accept(frames[index].filename):
                return index
    return None


def _what(frames: Sequence[traceback.FrameSummary], user: int | None, hook: str) -> str:
    """The outermost jax reader between the user's line and the hook (``_value`` or
    ``copy_to_host_async``).

    Outermost, because jax readers call each other (``device_get`` ends in
    ``__array__``) and the one the user's line called says what they did.
    ``copy_to_host_async`` called by the user's line itself is named so;
    a ``_value`` read falls back to the frame that read it (e.g. a jax
    internal that folds a closed-over array into a constant).
    """
    after = frames[user + 1 :] if user is not None else frames
    for frame in after:
        name = _READERS.get(frame.name)
        if name and (_JAX_DIR in frame.filename or is_trampoline_frame(frame.filename)):
            return name
    if hook != "_value":
        return hook
    return after[-1].name if after else "_value"
