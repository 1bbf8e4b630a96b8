"""A GitHub Actions step's own files: its outputs, its job's environment and PATH, its job
summary, and its error lines.

GitHub hands a step the paths in ``GITHUB_OUTPUT``, ``GITHUB_ENV``, ``GITHUB_PATH`` and
``GITHUB_STEP_SUMMARY``; a line ``::error title=T::M`` on stdout becomes an annotation. Nothing
here but the standard library and `gate.printable`: the workflow's jobs without the gate
installed run these steps from its checkout (a TPU VM's python3 too, which may be older than
the gate's 3.11: see gate/ci/tpu_vm.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gate.printable import say, say_command


def one_line(text: str) -> str:
    """``text`` with its line breaks as spaces: an input shown in an error or an output can
    never start a line of its own (``image=evil`` in ``$GITHUB_OUTPUT``)."""
    return text.replace("\r", " ").replace("\n", " ")


def _append(environ: Mapping[str, str], name: str, text: str) -> None:
    path = environ.get(name)
    if path:
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(text)


def set_outputs(environ: Mapping[str, str], **values: str) -> None:
    """The step's outputs, one ``name=value`` line each (every value one line)."""
    _append(environ, "GITHUB_OUTPUT", "".join(f"{k}={one_line(v)}\n" for k, v in values.items()))


def set_env(environ: Mapping[str, str], **values: str) -> None:
    """Environment variables for the job's later steps, one ``NAME=value`` line each."""
    _append(environ, "GITHUB_ENV", "".join(f"{k}={one_line(v)}\n" for k, v in values.items()))


def add_path(environ: Mapping[str, str], folder: str) -> None:
    """``folder`` in front of PATH for the job's later steps."""
    _append(environ, "GITHUB_PATH", one_line(folder) + "\n")


def add_summary(environ: Mapping[str, str], text: str) -> None:
    """``text`` at the end of the job's summary."""
    _append(environ, "GITHUB_STEP_SUMMARY", text)


def error(title: str, message: str) -> None:
    """One ``::error`` annotation line."""
    say_command(f"::error title={title}::{one_line(message)}")


def fail(environ: Mapping[str, str], title: str, message: str) -> int:
    """A step's one error: the ``::error`` line, the same words as its output ``error`` (which
    the job's output carries to the verdict), and the exit status 1."""
    error(title, message)
    set_outputs(environ, error=message)
    return 1


def tell(text: str) -> None:
    """A line of the step's log; never one the runner takes as a command (`gate.printable`)."""
    say(text)


def env(name: str, environ: Mapping[str, str] = os.environ) -> str:
    """A step's ``env:`` value; '' where it is unset, as a shell reads it."""
    return environ.get(name, "")
