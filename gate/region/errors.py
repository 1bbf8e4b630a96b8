"""Exceptions turned into records: the user's code raising (an error for the
report) and JAX's guard refusing a transfer (a failing transfer)."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

from gate.jaxhooks.guard import EXPLICIT_ENTRY_POINTS, parse_refusal
from gate.jaxhooks.interpose import is_trampoline_frame
from gate.levels import Direction
from gate.region.callables import RegionCode
from gate.region.sharding_mismatch import describe_mismatch
from gate.region.verdict import fails
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import Phase, Transfer
from gate.user_code import UserCode, frames_of, user_frames_text


class RegionAbort(Exception):
    """The region cannot be judged; carries the error for the report."""

    def __init__(self, error: RegionError) -> None:
        super().__init__(error.message)
        self.error = error


def error_from(user: UserCode, kind: ErrorKind, exc: BaseException) -> RegionError:
    """What the user's code raised: one line, their frames first, then the full traceback.

    A jitted call JAX refused for its arguments' shardings is said as that, naming the
    argument and both shardings (`gate.region.sharding_mismatch`).
    """
    frames = frames_of(exc.__traceback__)
    text = str(exc).strip().splitlines()
    summary = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    mismatch = describe_mismatch(user, exc)
    if mismatch is not None:
        kind, summary = ErrorKind.SHARDING, mismatch
    if _buffer_export_refused(exc):
        summary += (
            " (the gate turns off device arrays' buffer export while it watches "
            "device-to-host reads, so memoryview(x), bytes(x) and np.frombuffer(x) raise "
            "under it; read the value with np.asarray(x), which the gate sees, or "
            "jax.device_get(x) at a declared boundary)"
        )
    user_tb = user_frames_text(user, frames)
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    details = (
        f"Traceback (your code):\n{user_tb}{summary}\n\nFull traceback:\n{full}"
        if user_tb
        else full
    )
    return RegionError(kind, summary, details, user.locate(frames))


def refused_transfer(code: RegionCode, exc: BaseException, phase: Phase) -> Transfer:
    """The transfer JAX's guard refused with ``exc`` (a `parse_refusal` of it must exist)."""
    import jax

    violation = parse_refusal(exc, jax.device_count())
    assert violation is not None
    own = [f for f in frames_of(exc.__traceback__) if not is_trampoline_frame(f.filename)]
    inner = _callback_frames(exc)
    # JAX marks a transfer explicit when it happens inside jax.device_put & co., whoever called
    # it: the user, or JAX itself handing a host callback its operands.
    stack = inner or own
    last_user = max((i for i, f in enumerate(stack) if code.user.is_user(f.filename)), default=-1)
    entry_points = EXPLICIT_ENTRY_POINTS
    if violation.direction is Direction.DEVICE_TO_HOST:
        # Only jax.device_get reads explicitly: JAX refuses the host read inside
        # jax.device_put (a sharded array resharded through the host) as implicit
        # (jax-ml/jax#40285), and the transfer map counts it so too.
        entry_points = frozenset({"device_get"})
    explicit = any(
        f.name in entry_points and f"{Path('jax', '_src')}" in f.filename
        for f in stack[last_user + 1 :]
    )
    boundary = code.boundary_in(stack) or code.boundary_in(own)
    location = code.user.locate(stack) or code.user.locate(own) or code.step_location()
    return Transfer(
        direction=violation.direction,
        explicit=explicit,
        dtype=violation.dtype,
        shape=violation.shape,
        location=location,
        phase=phase,
        failing=fails(code.region.guard, violation.direction, explicit, boundary),
        message="JAX's guard, refusing the transfer: " + _refusal_line(exc),
        boundary=boundary,
        source=code.source_line(location),
        destination=violation.destination,
    )


# A refusal inside a host callback reaches the step as XLA's error ("CpuCallback error calling
# callback: Traceback ..."), its message holding the callback's Python stack as text: deeper
# than the exception's own traceback, which ends at the jitted call.
_CALLBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)')


def _callback_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    text = str(exc)
    if "Traceback (most recent call last):" not in text:
        return []
    found = (_CALLBACK_FRAME.match(line) for line in text.splitlines())
    frames = [
        traceback.FrameSummary(m["file"], int(m["line"]), m["name"], lookup_line=False)
        for m in found
        if m is not None
    ]
    return [f for f in frames if not is_trampoline_frame(f.filename)]


def _refusal_line(exc: BaseException) -> str:
    """The line of ``exc``'s message that names the refused transfer."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    named = [line for line in lines if "Disallowed" in line]
    return (named or lines or [type(exc).__name__])[0]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _buffer_export_refused(exc: BaseException) -> bool:
    """A TypeError from reading a jax array through the buffer protocol, which
    `gate.witness.detector` switches off while it watches."""
    text = str(exc)
    return (
        isinstance(exc, TypeError)
        and "ArrayImpl" in text
        and ("bytes-like object" in text or "buffer" in text or "to bytes" in text)
    )
