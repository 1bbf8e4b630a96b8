"""A TPU job on the VM itself: the gate in a virtual environment of the runner's python3.

The environment also sees the runner's own packages (``--system-site-packages``): TPU VM images
and JAX's own CI bring JAX and libtpu, used as they are; JAX's TPU build (``jax[tpu]``) is
installed only where the runner's Python has no JAX. Then the gate, from this workflow's commit,
and the environment's ``bin`` on the job's PATH. A failure is one ``::error`` line that says
what to do (its output ``error`` carries it to the verdict).

The runner's python3 runs this step before anything is known of it, so this module and all
that ``python3 -m gate.ci`` imports stay readable by Python 3.8 (tests/test_ci_steps.py parses
them as 3.8 would): an older Python gets the message that names the fix, not a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from gate.ci.step import add_path, env, fail
from gate.package import PACKAGE_DIR

MINIMUM = (3, 11)
VENV = "transfer-gate-venv"
# Quiet when there is no JAX: a traceback would read as the step's failure.
_RUNNERS_JAX = (
    "try:\n    import jax\nexcept Exception:\n    raise SystemExit(1)\n"
    "print('JAX from the runner: ' + jax.__version__)"
)


class SetupError(Exception):
    """The set-up failed; the message says what to do."""


def _call(argv: Sequence[str]) -> int:
    sys.stdout.flush()  # the step's own lines before the program's
    return subprocess.call(list(argv))


def set_up(
    python: str,
    version: Sequence[int],
    temp: str,
    gate: str,
    call: Callable[[Sequence[str]], int] = _call,
) -> str:
    """Make the environment in ``temp`` with ``python`` (of ``version``), install JAX's TPU
    build unless the runner has JAX, then the gate from the folder ``gate``; return the
    environment's ``bin`` folder. ``call`` runs a program, its output in the log, and returns
    its exit status. Raises `SetupError`."""
    if tuple(version[:2]) < MINIMUM:
        shown = ".".join(str(part) for part in version[:3])
        raise SetupError(
            f"the TPU VM's python3 is Python {shown}; the gate needs Python 3.11 or newer: "
            "install one on the runner, or run the job in a container (input 'tpu-image')."
        )
    venv = os.path.join(temp, VENV)
    if call([python, "-I", "-m", "venv", "--system-site-packages", venv]) != 0:
        raise SetupError(
            "making the virtual environment failed (its output is above): install "
            "python3-venv on the runner."
        )
    folder = os.path.join(venv, "bin")
    own = os.path.join(folder, "python")
    runners = call([own, "-I", "-c", _RUNNERS_JAX]) == 0
    if not runners and call([own, "-I", "-m", "pip", "install", "jax[tpu]"]) != 0:
        raise SetupError('pip install "jax[tpu]" failed (its output is above).')
    if call([own, "-I", "-m", "pip", "install", gate]) != 0:
        raise SetupError("installing the gate failed (its output is above).")
    return folder


def tpu_vm_step(environ: Mapping[str, str], call: Callable[[Sequence[str]], int] = _call) -> int:
    """The step "Set up the gate on the TPU VM": the environment's ``bin`` on the job's PATH,
    or its one error and exit 1."""
    try:
        folder = set_up(
            sys.executable,
            sys.version_info[:3],
            env("RUNNER_TEMP", environ),
            # The checkout this module runs from: this workflow's commit.
            os.path.dirname(PACKAGE_DIR),
            call,
        )
    except SetupError as exc:
        return fail(environ, "transfer-gate setup", str(exc))
    add_path(environ, folder)
    return 0
