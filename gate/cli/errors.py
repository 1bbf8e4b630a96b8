"""The one place where an exception becomes an exit code, with its message on stderr.

Every subcommand runs inside `exit_code_of`: what the user got wrong exits 2
with one ``error:`` line per problem; anything else is the gate's bug and
exits 3 with the traceback (`gate.cli.exit_codes`).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

from gate.cli.exit_codes import ExitCode
from gate.compare.worktree import BaseRefError
from gate.machine.requirements import RequirementsError
from gate.plan import UnknownRegionError
from gate.policy.problems import PolicyError
from gate.printable import flat, say, write
from gate.report.history_series import HistoryError
from gate.report.junit import ReportWriteError
from gate.report.merge import MergeError
from gate.results.baseline_file import BaselineError


class UsageError(Exception):
    """The command line asks for something impossible; nothing was run."""


# Mistakes in what the user asked for: one line, exit 2.
_USAGE_ERRORS = (
    UsageError,
    UnknownRegionError,
    ReportWriteError,
    BaselineError,
    MergeError,
    HistoryError,
    BaseRefError,
    RequirementsError,
)

_BUG = (
    "error: transfer-gate itself failed; this is a bug, please report it with the traceback above"
)
# doctor says it in its own words: it is the command people run when the gate seems broken.
_BUGS = {"doctor": "error: transfer-gate doctor itself failed; this is a bug"}


def exit_code_of(command: str, body: Callable[[], int]) -> int:
    """Run ``body`` (the subcommand ``command``) and return its exit code, or the error's."""
    try:
        return body()
    except PolicyError as exc:
        for problem in exc.problems:
            say(f"error: {flat(str(problem))}", sys.stderr)
        return ExitCode.USAGE
    except _USAGE_ERRORS as exc:
        say(f"error: {flat(str(exc))}", sys.stderr)
        return ExitCode.USAGE
    except Exception:
        # The traceback quotes the user's code and values: through the text gate like the rest.
        write(traceback.format_exc(), sys.stderr)
        say(_BUGS.get(command, _BUG), sys.stderr)
        return ExitCode.INTERNAL
