"""The inputs that name files of the caller's repository: ``policies`` and ``requirements``.

The job "transfer-gate inputs" checks them in a checkout of the caller's repository, before any
gate job takes a runner: a path that is not there fails at once, with one ``::error`` line that
names the input and the fix (its output ``error`` carries it to the verdict), not after a GPU
or TPU runner was taken and the install ran. The words are the ones the gate jobs' own shell
checks used to print.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from gate.ci.inputs import InputError
from gate.ci.step import env, fail

# The words of an input as the gate jobs read them (`read -r -a` in the composite action):
# separated by blanks; a line break is refused before, so that nothing is read past it.
_BLANKS = re.compile(r"[ \t]+")
_BREAKS = ("\n", "\r")


def words(value: str) -> list[str]:
    """``value``'s paths, as the shell's ``read -r -a`` splits one line."""
    return [word for word in _BLANKS.split(value) if word]


def check_paths(checkout: str, policies: str, requirements: str) -> None:
    """Raise `InputError` for the first of ``policies`` (files or folders) or ``requirements``
    (files) that is not in ``checkout``, relative to its root; ``requirements`` may be empty."""
    if any(mark in policies for mark in _BREAKS):
        raise InputError(
            "input 'policies': write the policy files and folders on one line, separated by "
            "spaces, like policies: policies/ more/train.yaml."
        )
    named = words(policies)
    if not named:
        raise InputError(
            "input 'policies' is empty: name the policy files or folders, like policies: policies/."
        )
    for path in named:
        if not os.path.exists(os.path.join(checkout, path)):
            raise InputError(
                f"input 'policies': '{path}' is not in the repository; name policy files or "
                "folders relative to its root, like policies: policies/."
            )
    if any(mark in requirements for mark in _BREAKS):
        raise InputError(
            "input 'requirements': write the requirements files on one line, separated by "
            "spaces, like requirements: requirements.txt pyproject.toml."
        )
    for path in words(requirements):
        # doctor reads files, not folders.
        if not os.path.isfile(os.path.join(checkout, path)):
            raise InputError(
                f"input 'requirements': '{path}' is not a file in the repository; name "
                "requirements files or pyproject.toml relative to its root, like requirements: "
                "requirements.txt."
            )


def paths_step(environ: Mapping[str, str]) -> int:
    """The step "Check the policies and requirements": nothing, or its one error and exit 1."""
    try:
        check_paths(
            env("CHECKOUT", environ),
            env("GATE_POLICIES", environ),
            env("GATE_REQUIREMENTS", environ),
        )
    except InputError as exc:
        return fail(environ, "transfer-gate inputs", str(exc))
    return 0
