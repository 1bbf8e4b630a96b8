"""What a region whose worker was lost looks like in the report.

The error says how the worker ended (a signal, an exit code, a failed import),
in which phase of the region, with the worker's last output lines and its
Python stack (faulthandler) when it could still give one.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from gate.isolation.worker_output import StackDump, split_output
from gate.results.errors import ErrorKind, RegionError
from gate.user_code import UserCode

# Lines of the worker's output shown in an error's body.
_SHOWN_LINES = 20


def how_it_ended(returncode: int | None, lines: Sequence[str] = ()) -> str:
    """``was killed by SIGSEGV (Segmentation fault)``, ``exited with code 3``.

    When the worker's last output ``lines`` show an import error, that is said instead of
    guessing at memory: ``exited with code 1 after an import error (ModuleNotFoundError: ...)``.
    """
    if returncode is None:
        return "did not exit even after SIGKILL"
    failed_import = _import_error(split_output(lines)[0])
    after = f" after an import error ({failed_import})" if failed_import else ""
    if returncode >= 0:
        return f"exited with code {returncode}{after}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    description = signal.strsignal(number) or name
    if number == signal.SIGKILL and not failed_import:
        description += ", e.g. by the kernel's out-of-memory killer"
    return f"was killed by {name} ({description}){after}"


# The last line of a traceback that ends in a failed import.
_IMPORT_ERROR = re.compile(r"^(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError): \S")


def _import_error(printed: Sequence[str]) -> str | None:
    """The last import error among the lines a report shows, as one line, if there is one."""
    for line in reversed(printed[-_SHOWN_LINES:]):
        if _IMPORT_ERROR.match(line.strip()):
            return " ".join(line.split())[:200]
    return None


def _last_printed(printed: Sequence[str], message: str) -> str:
    for line in reversed(printed):
        if line.strip():
            last = " ".join(line.split())[:200]
            return "" if last in message else f"; last output: {last}"
    return ""


def lost_region_error(
    kind: ErrorKind,
    message: str,
    headline: str,
    *,
    lines: Sequence[str],
    code: UserCode,
    crashed: bool,
) -> RegionError:
    """The error of a region whose worker was lost, from what the worker printed.

    ``message`` is the short form (the report's message and the log line),
    ``headline`` the sentence that opens the body.
    """
    printed, dumped = split_output(lines)
    dump = StackDump.parse(dumped)
    parts = [headline]
    shown = printed[-_SHOWN_LINES:]
    if shown:
        what = "line" if len(shown) == 1 else f"{len(shown)} lines"
        parts.append(f"The last {what} the worker printed:\n" + "\n".join(shown).rstrip("\n"))
    else:
        parts.append("The worker printed nothing in this region.")
    if dump.threads:
        parts.append("Its Python stack (faulthandler, most recent call first):\n" + dump.text(code))
    phase = _phase_of(dump)
    return RegionError(
        kind,
        message + (f" {phase}" if phase else "") + _last_printed(printed, message),
        "\n\n".join(parts) + "\n",
        dump.location(code, crashed),
    )


# The runner's functions, innermost first, and the phase each one runs: a
# stack dump that passes through one of them says when the region was lost.
_PHASES = (
    ("fresh_inputs", "while setup ran"),
    ("run_checks", "during the result checks"),
    ("timed_calls", "during the timed runs"),
    ("unguarded_call", "during warm-up"),
    ("guarded_call", "during the run under the region's guard"),
    ("mapped_calls", "during a watched run (the first call, which compiles, or steady state)"),
)


def _phase_of(dump: StackDump) -> str:
    """``during warm-up``: the phase the main thread was in, from the runner's frames."""
    for thread in dump.threads:
        names = {frame.name for frame in thread.frames}
        for function, phase in _PHASES:
            if function in names:
                return phase
    return ""


def seconds(value: float) -> str:
    """``3300 s``, ``0.5 s``: a duration as the errors and the cancellation reason say it."""
    return f"{value:g} s"
