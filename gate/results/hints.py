"""The usual fix for each kind of finding, one line each, shown next to the finding."""

from __future__ import annotations

from gate.results.cause import Cause, cause_of
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import Transfer

# One fix per kind of transfer; tests check that no `Cause` is missing, so a
# new kind cannot reach a report without its own hint.
_FIXES: dict[Cause, str] = {
    Cause.JIT_ARGUMENT: (
        "put inputs on the device in setup or the data loader (jax.device_put) before calling "
        "the jitted function; a Python number passed on every call is copied too: pass a device "
        "array made once, in setup or at import (jnp.float32(lr) at the call is made, and "
        "uploaded, on every call; a step counter kept as a jnp array), or close over a constant"
    ),
    Cause.EAGER_SCALAR: (
        "a Python number in an eager jnp op on a device array is copied to the device on every "
        "call: do the arithmetic inside a jitted function, or make the constant a device array "
        "once, in setup or at import (not in the step, where it is made on every call)"
    ),
    Cause.EAGER_INDEX: (
        "eager indexing sends each Python int index to the device: index inside a jitted "
        "function, or slice with lax.dynamic_slice and device-array indices"
    ),
    Cause.EAGER_HOST_ARRAY: (
        "a NumPy array mixed with device arrays outside jit is copied on every call: "
        "jax.device_put it once in setup or the data loader"
    ),
    Cause.ARRAY_FROM_HOST: (
        "a device array made on every call is uploaded on every call (jnp.float32(lr), "
        "jnp.asarray(x), jnp.ones(n) in the step): make it once, in setup or at import (a new "
        "batch each step: in the data loader, with jax.device_put), or build it inside jit"
    ),
    Cause.PRINTED: (
        "printing or formatting a device array copies it to the host: print its shape or "
        "dtype, or fetch the value at a declared boundary with jax.device_get"
    ),
    Cause.CONVERTED: (
        "float(), int(), bool(), .item(), .tolist() and `if x:` wait for the device and copy "
        "the value: keep metrics as arrays (jnp.where / lax.cond for branches) and fetch them "
        "every N steps at a declared boundary with jax.device_get"
    ),
    Cause.NUMPY_READ: (
        "NumPy (np.asarray, np.array, a np.* function) copies the device array to the host: "
        "use jnp.* on the device, or fetch at a declared boundary with jax.device_get"
    ),
    Cause.ASYNC_COPY: (
        "copy_to_host_async starts a device-to-host copy: call it in a function declared "
        "under `boundaries:`, where moving data is expected, or use jax.device_get there"
    ),
    Cause.UNCOMMITTED: (
        "an array made without a device (uncommitted) met one committed to another device and "
        "was copied, every step: commit inputs to one device (jax.device_put(x, device)) or "
        "give all inputs the same sharding"
    ),
    Cause.HOST_BATCH_REPLICATED: (
        "a host batch passed to a jit whose other inputs are replicated lands whole on every "
        "device (and every device then computes the whole batch): shard it in setup or the "
        "data loader, jax.device_put(batch, NamedSharding(mesh, P('data')))"
    ),
    Cause.HOST_BATCH_SPLIT: (
        "a host batch passed to a sharded jit is split and uploaded on every call: put it on "
        "the mesh in setup or the data loader with the sharding the jit takes, "
        "jax.device_put(batch, NamedSharding(mesh, P('data')))"
    ),
    Cause.UNCOMMITTED_RESHARDED: (
        "an array made without a device (uncommitted) met arrays on a mesh and was resharded "
        "onto it, every step: create it with its sharding once in setup "
        "(jax.device_put(x, NamedSharding(mesh, spec)), or jnp.zeros(..., device=sharding))"
    ),
    Cause.SHARDED_READ: (
        "reading an array split over several devices on the host gathers every shard: keep "
        "the computation on the devices (jnp.*, a jitted reduction), or fetch at a declared "
        "boundary with jax.device_get"
    ),
    Cause.RESHARD_THROUGH_HOST: (
        "jax.device_put(x, sharding) of an array already on several devices copies it through "
        "the host (and JAX 0.12 refuses that read under disallow, jax-ml/jax#40285): reshard "
        "on the devices with jax.sharding.reshard(x, sharding), or a jit with out_shardings"
    ),
    Cause.CONSTRAINT_ON_HOST_ARRAY: (
        "with_sharding_constraint outside jit on a host array is an implicit upload (JAX runs "
        "a jitted identity on the NumPy array): shard it explicitly, "
        "jax.device_put(x, NamedSharding(mesh, spec))"
    ),
    Cause.RESHARD_OF_HOST_ARRAY: (
        "jax.sharding.reshard of a host array is an implicit upload (reshard moves arrays "
        "already on the devices): put it on the mesh explicitly, "
        "jax.device_put(x, NamedSharding(mesh, spec))"
    ),
    Cause.HOST_CALLBACK: (
        "a host callback in compiled code (jax.debug.print, jax.pure_callback, io_callback) "
        "sends its operands to the host every step: remove it from the gated step, or return "
        "the values and fetch them at a declared boundary"
    ),
    Cause.CLOSED_OVER_ARRAY: (
        "JAX reads a device array that a jitted function closes over (one made at import, "
        "say) to the host, to compile it in as a constant, each time the function is compiled: "
        "pass the array to the function as an argument, or close over a NumPy array"
    ),
    Cause.EXPLICIT_OUTSIDE_BOUNDARY: (
        "move it into a function declared under `boundaries:` in the policy, where explicit "
        "transfers are expected"
    ),
    Cause.EXPLICIT_UPLOAD_OUTSIDE_BOUNDARY: (
        "jax.device_put in the step uploads on every call: a value that does not change (a "
        "constant, a learning rate) belongs on the device once, made in setup or at import; a "
        "new batch each step, in a function declared under `boundaries:`"
    ),
    Cause.EXPLICIT_IN_BOUNDARY: "explicit transfer inside a declared boundary, where it belongs",
    Cause.HOST_TO_DEVICE: (
        "put inputs on the device in setup or the data loader (jax.device_put); don't pass "
        "NumPy arrays or Python scalars to jitted functions or to eager jnp ops on device arrays"
    ),
    Cause.DEVICE_TO_HOST: (
        "fetch it at a declared boundary with jax.device_get, or log its shape instead of its "
        "value (print(x), float(x), np.asarray(x) and `if x:` all copy it to the host)"
    ),
}


def hint_for(transfer: Transfer) -> str:
    """The usual fix for `transfer`, as one line of text, fitted to its kind (and, on a mesh,
    spelled with the mesh's own first axis: ``P('batch')`` on a mesh whose axis is 'batch')."""
    fix = _FIXES[cause_of(transfer)]
    axis = _first_axis(transfer.destination.mesh if transfer.destination else None)
    return fix.replace("P('data')", f"P({axis!r})") if axis else fix


def _first_axis(mesh: str | None) -> str | None:
    """``batch`` of the mesh text ``'batch': 4, 'model': 2``; None without a mesh."""
    if not mesh or not mesh.startswith("'"):
        return None
    return mesh[1:].split("'", 1)[0] or None


# What to do about a region that could not be judged, where there is a usual answer.
_ERROR_FIXES: dict[ErrorKind, str] = {
    ErrorKind.SHARDING: (
        "give the argument the sharding (and devices) the jitted function takes before the "
        "call: create it so in setup or the data loader (jax.device_put(x, sharding)), or "
        "reshard it on the devices (jax.sharding.reshard(x, sharding)); or change the "
        "function's in_shardings to match how the array arrives"
    ),
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
    ErrorKind.BAD_OUTPUT: (
        "make the step return its outputs: any pytree with at least one array leaf (the gate "
        "waits for those and checks them; other leaves are ignored)"
    ),
}


# A crash whose worker printed an import error (gate.isolation.scheduler names it in the message):
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
