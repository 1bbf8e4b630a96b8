"""The usual fix for each kind of finding, one line each, shown next to the finding."""

from __future__ import annotations

from gate.guard_levels import Direction
from gate.results import ErrorKind, RegionError, Transfer

# One entry per Direction; tests check that none is missing, so a new
# direction cannot reach a report without a hint.
_IMPLICIT_FIXES: dict[Direction, str] = {
    Direction.HOST_TO_DEVICE: (
        "put inputs on the device in setup or the data loader (jax.device_put); don't pass "
        "NumPy arrays or Python scalars to jitted functions or to eager jnp ops on device arrays"
    ),
    Direction.DEVICE_TO_HOST: (
        "fetch it at a declared boundary with jax.device_get, or log its shape instead of its "
        "value (print(x), float(x), np.asarray(x) and `if x:` all copy it to the host)"
    ),
    Direction.DEVICE_TO_DEVICE: (
        "commit inputs to one device (jax.device_put(x, device)) or give all inputs the same "
        "sharding"
    ),
}

_EXPLICIT_OUTSIDE_BOUNDARY_FIX = (
    "move it into a function declared under `boundaries:` in the policy, where explicit "
    "transfers are expected"
)

_EXPLICIT_INSIDE_BOUNDARY_NOTE = "explicit transfer inside a declared boundary, where it belongs"


def hint_for(transfer: Transfer) -> str:
    """The usual fix for `transfer`, as one line of text."""
    if transfer.explicit:
        # Under the *_explicit levels an explicit transfer only fails
        # outside a boundary; inside one it is the intended place.
        if transfer.boundary is not None:
            return _EXPLICIT_INSIDE_BOUNDARY_NOTE
        return _EXPLICIT_OUTSIDE_BOUNDARY_FIX
    return _IMPLICIT_FIXES[transfer.direction]


# What to do about a region that could not be judged, where there is a usual answer.
_ERROR_FIXES: dict[ErrorKind, str] = {
    ErrorKind.TIMEOUT: (
        "raise the region's timeout_s in the policy if the step is legitimately slow (its "
        "first call compiles, which takes longest on a GPU), else find where it hangs in the "
        "stack below"
    ),
    ErrorKind.CRASH: (
        "run the step locally with `python -X faulthandler` to see where it dies; SIGKILL "
        "usually means the machine ran out of memory (lower the batch, or "
        "XLA_PYTHON_CLIENT_MEM_FRACTION in the policy's env:)"
    ),
    ErrorKind.CANCELLED: "nothing in this region's code: the run was stopped before it finished",
    ErrorKind.BAD_INPUT: "make setup return a tuple of positional arguments or a dict of them",
    ErrorKind.BAD_OUTPUT: "make the step return its outputs (arrays, or a pytree of them)",
}


# A crash whose worker printed an import error (gate.scheduler names it in the message):
# nothing to do with memory.
_IMPORT_CRASH_FIX = (
    "the worker could not import a module: install the one the error names in the environment "
    "transfer-gate runs in (or fix the import that asks for it); if it is one of the gate's own "
    "(gate.*), reinstall jax-transfer-gate and run its `transfer-gate` command"
)
_IMPORT_ERRORS = ("ModuleNotFoundError: ", "ImportError: ")


def _crash_fix(error: RegionError) -> str:
    if any(name in error.message for name in _IMPORT_ERRORS):
        return _IMPORT_CRASH_FIX
    return _ERROR_FIXES[ErrorKind.CRASH]


def hint_for_error(error: RegionError) -> str | None:
    """The usual fix for a region that could not be judged, if there is one."""
    if error.kind is ErrorKind.CRASH:
        return _crash_fix(error)
    return _ERROR_FIXES.get(error.kind)
