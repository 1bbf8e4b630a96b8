"""What kind of transfer a finding is, so that its hint fits what happened.

A reviewer told "put inputs on the device in setup" for an eager ``x[:1]``
(JAX copies the Python int index to the device) is told the wrong thing. The
kind is read from what the gate saw (the detector's host use, the jitted
function a line called, a host callback) and, where that is silent (JAX's
guard log on a GPU names no operation), from the offending line's syntax.
Nothing here imports JAX: the reporters call it.
"""

from __future__ import annotations

import ast
import builtins
import enum

from gate.levels import Direction
from gate.results.records import Transfer


class Cause(enum.Enum):
    """One kind of transfer, each with its own fix (`gate.results.hints`)."""

    JIT_ARGUMENT = "a NumPy array or Python scalar passed to a jitted function"
    EAGER_SCALAR = "a Python scalar in an eager jnp operation"
    EAGER_INDEX = "eager indexing with Python ints"
    EAGER_HOST_ARRAY = "a NumPy array in an eager jnp operation"
    # jnp.array / jnp.asarray / jnp.float32(...) / jnp.ones(...) of a host value, in the step:
    # what "pass a device array instead" turns into when it is made at the call.
    ARRAY_FROM_HOST = "a device array made from a host value on every call"
    PRINTED = "a device array printed or formatted"
    CONVERTED = "a device array converted to a Python value"
    NUMPY_READ = "a device array read by NumPy"
    ASYNC_COPY = "copy_to_host_async"
    UNCOMMITTED = "an uncommitted array meeting an array committed to another device"
    # On a mesh (a transfer over several devices):
    HOST_BATCH_REPLICATED = "a host batch replicated to every device of a mesh"
    HOST_BATCH_SPLIT = "a host batch sent into a sharded jit"
    UNCOMMITTED_RESHARDED = "an uncommitted array resharded over a mesh"
    SHARDED_READ = "an array split over several devices read on the host"
    RESHARD_THROUGH_HOST = (
        "jax.device_put of a sharded array to another sharding, a round trip through the host"
    )
    CONSTRAINT_ON_HOST_ARRAY = "with_sharding_constraint outside jit on a host array"
    RESHARD_OF_HOST_ARRAY = "jax.sharding.reshard of a host array"
    HOST_CALLBACK = "a host callback inside compiled code"
    # Read by JAX itself, while compiling: no line of the user's runs then.
    CLOSED_OVER_ARRAY = "a jitted function closing over a device array (read to compile it in)"
    EXPLICIT_OUTSIDE_BOUNDARY = "an explicit transfer outside a declared boundary"
    # jax.device_put in the step: explicit, so a boundary would allow it, but it still
    # uploads on every call what may not change from one call to the next.
    EXPLICIT_UPLOAD_OUTSIDE_BOUNDARY = "an explicit upload outside a declared boundary"
    EXPLICIT_IN_BOUNDARY = "an explicit transfer inside a declared boundary"
    # The gate knows the direction and nothing more specific.
    HOST_TO_DEVICE = "a host-to-device transfer"
    DEVICE_TO_HOST = "a device-to-host transfer"


# ``Transfer.host_use`` values: how host code read the array (the detector's
# ``Fetch.what``), or that a host callback in compiled code moved it.
HOST_CALLBACK_USE = "host_callback"
# JAX's lowering reading a device array a jitted function closes over, to compile it in as a
# constant (jax 0.10.1-0.12 name the handler so); the detector names the read by it.
CLOSED_OVER_USE = "_array_mlir_constant_handler"
_PRINTING_USES = frozenset({"__str__", "__repr__", "__format__"})
_CONVERTING_USES = frozenset(
    {
        "__float__",
        "__int__",
        "__bool__",
        "__complex__",
        "__index__",
        "__hex__",
        "__oct__",
        "__iter__",
        "item",
        "tolist",
        "tobytes",
    }
)
_NUMPY_USES = frozenset({"__array__"})
# Every array method the detector names a read by (`gate.witness.fetches`): one list, so a
# read it reports is always one this module can classify.
HOST_READS = (
    _PRINTING_USES
    | _CONVERTING_USES
    | _NUMPY_USES
    | {"__reduce__", "device_get", "copy_to_host_async"}
)

# Names (last attribute) whose call on the line says what the host did.
_PRINTING_CALLS = frozenset(
    {"print", "str", "repr", "format", "info", "debug", "warning", "log", "write"}
)
_CONVERTING_CALLS = frozenset({"float", "int", "bool", "complex", "item", "tolist"})
# jnp functions that make a device array out of host values: a Python number or a NumPy
# array given to them is uploaded each time the line runs. The dtype constructors
# (jnp.float32(lr), jnp.int32(0)) are recognised by name, `_makes_an_array`.
_FROM_HOST_CALLS = frozenset(
    {"array", "asarray", "ones", "zeros", "full", "empty", "arange", "linspace", "eye", "identity"}
)
_DTYPE_PREFIXES = ("float", "bfloat", "int", "uint", "complex")
_NUMPY_MODULES = frozenset({"np", "numpy", "onp"})


# Kinds a reader would take for something else, named in the finding itself: two idioms
# read as "the explicit way to shard", and an explicit call whose host read is implicit.
# A read JAX makes while compiling is named too: it has no line of the user's to show.
NAMED_IN_THE_FINDING = frozenset(
    {
        Cause.RESHARD_THROUGH_HOST,
        Cause.CONSTRAINT_ON_HOST_ARRAY,
        Cause.RESHARD_OF_HOST_ARRAY,
        Cause.CLOSED_OVER_ARRAY,
    }
)


def cause_of(transfer: Transfer) -> Cause:
    """The kind of ``transfer``, from what was seen and, failing that, from its line."""
    if transfer.host_use == HOST_CALLBACK_USE:
        # Including the operands JAX's callback machinery moves with
        # jax.device_put: explicit to JAX, but not the user's doing.
        return Cause.HOST_CALLBACK
    if transfer.explicit:
        if transfer.boundary is not None:
            return Cause.EXPLICIT_IN_BOUNDARY
        if transfer.direction is Direction.HOST_TO_DEVICE:
            return Cause.EXPLICIT_UPLOAD_OUTSIDE_BOUNDARY
        return Cause.EXPLICIT_OUTSIDE_BOUNDARY
    if transfer.direction is Direction.DEVICE_TO_DEVICE:
        # The only implicit device-to-device move JAX makes: an uncommitted
        # array (made without a device) used with one committed elsewhere.
        if transfer.destination is not None:
            return Cause.UNCOMMITTED_RESHARDED
        return Cause.UNCOMMITTED
    line = _LineSyntax.of(transfer.source)
    if transfer.direction is Direction.DEVICE_TO_HOST:
        cause = _fetch_cause(transfer.host_use, line)
        if cause is Cause.DEVICE_TO_HOST and "device_put" in line.calls:
            # jax.device_put(x, other_sharding) of an array on several devices reads it
            # whole to the host and uploads it again; the read is implicit to JAX.
            return Cause.RESHARD_THROUGH_HOST
        split = transfer.fetched_from is not None and not transfer.fetched_from.replicated
        if split and cause in _PLAIN_READS:
            return Cause.SHARDED_READ
        return cause
    return _mesh_upload_cause(transfer, line, _upload_cause(transfer, line))


# Reads whose fix is the same for an array split over a mesh, where gathering it is the news.
_PLAIN_READS = frozenset({Cause.PRINTED, Cause.NUMPY_READ, Cause.DEVICE_TO_HOST})
# Uploads a mesh says more about: what moved is a host array, sent over several devices.
_HOST_ARRAY_UPLOADS = frozenset({Cause.JIT_ARGUMENT, Cause.EAGER_HOST_ARRAY, Cause.HOST_TO_DEVICE})


def _mesh_upload_cause(transfer: Transfer, line: _LineSyntax, cause: Cause) -> Cause:
    """A host-to-device transfer over several devices: the idiom or the batch it was."""
    destination = transfer.destination
    if destination is None:
        return cause
    # Two idioms read as "the explicit way to shard", both implicit uploads: JAX runs a
    # jitted identity (or reshard's program) on the host array.
    if "with_sharding_constraint" in line.calls:
        return Cause.CONSTRAINT_ON_HOST_ARRAY
    if "reshard" in line.calls:
        return Cause.RESHARD_OF_HOST_ARRAY
    if cause not in _HOST_ARRAY_UPLOADS or transfer.shape == ():
        return cause  # a Python scalar keeps its own fix, replicated or not
    if destination.spec.startswith("{") and not destination.replicated:
        # A split JAX printed without a spec (GSPMD): it came from inside compiled code,
        # a jitted helper that constrains its argument's sharding, called on a host array.
        return Cause.CONSTRAINT_ON_HOST_ARRAY
    return Cause.HOST_BATCH_REPLICATED if destination.replicated else Cause.HOST_BATCH_SPLIT


def _fetch_cause(host_use: str | None, line: _LineSyntax) -> Cause:
    if host_use == CLOSED_OVER_USE:
        return Cause.CLOSED_OVER_ARRAY
    if host_use == "copy_to_host_async":
        return Cause.ASYNC_COPY
    if host_use in _PRINTING_USES:
        return Cause.PRINTED
    if host_use in _CONVERTING_USES:
        return Cause.CONVERTED
    if host_use in _NUMPY_USES:
        return Cause.NUMPY_READ
    # JAX's guard (a GPU) says only the direction: read the line.
    if "copy_to_host_async" in line.calls:
        return Cause.ASYNC_COPY
    if line.formats or line.calls & _PRINTING_CALLS:
        return Cause.PRINTED
    if line.calls & _CONVERTING_CALLS or line.tests_truth:
        return Cause.CONVERTED
    if line.numpy_calls:
        return Cause.NUMPY_READ
    return Cause.DEVICE_TO_HOST


def _upload_cause(transfer: Transfer, line: _LineSyntax) -> Cause:
    if transfer.jitted_call is not None:
        return Cause.JIT_ARGUMENT
    if not line.known:
        return Cause.HOST_TO_DEVICE
    if any(_makes_an_array(name) for name in line.jnp_calls):
        return Cause.ARRAY_FROM_HOST
    if line.other_calls:
        # A call the gate could not see into: it may be a jitted function
        # whose argument moved, so no eager-op hint.
        return Cause.HOST_TO_DEVICE
    if transfer.shape == ():
        # JAX sends each Python int of an eager index as an int32[] scalar,
        # and each Python number of an eager op as a weakly typed scalar.
        if line.indexes and line.numbers:
            float_scalar = (transfer.dtype or "").startswith(("float", "bfloat", "complex"))
            return Cause.EAGER_SCALAR if float_scalar else Cause.HOST_TO_DEVICE
        return Cause.EAGER_INDEX if line.indexes else Cause.EAGER_SCALAR
    if transfer.shape is not None:
        return Cause.EAGER_HOST_ARRAY
    # JAX's fast path did not say which array: the line alone can still tell
    # an eager index from an eager scalar when it holds only one of them.
    if line.indexes and not line.numbers:
        return Cause.EAGER_INDEX
    if line.numbers and not line.indexes:
        return Cause.EAGER_SCALAR
    return Cause.HOST_TO_DEVICE


# Calls that are not the user's own functions: builtins and the array modules.
_ARRAY_MODULES = frozenset({"jnp", "np", "numpy", "onp", "jax", "lax", "math"})
# Methods of jax.Array (x.reshape(...), x.at[i].set(v)): eager ops, not user functions.
_ARRAY_METHODS = frozenset(
    {
        "reshape", "astype", "sum", "mean", "max", "min", "prod", "std", "var", "argmax",
        "argmin", "transpose", "squeeze", "ravel", "flatten", "clip", "dot", "round",
        "set", "add", "multiply", "divide", "power", "get", "apply",
    }
)  # fmt: skip


class _LineSyntax:
    """What one line of source does, as far as its syntax says."""

    def __init__(self, tree: ast.AST | None) -> None:
        self.known = tree is not None
        calls: set[str] = set()
        jnp_calls: set[str] = set()
        numpy_calls: set[str] = set()
        other_calls: set[str] = set()
        self.indexes = False  # a subscript with something other than a string key
        self.numbers = False  # a numeric literal outside any subscript
        self.formats = False
        self.tests_truth = False
        in_slices: set[int] = set()
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call):
                name, owner = _called_name(node.func)
                calls.add(name)
                if owner == "jnp" or _is_jax_numpy(node.func):
                    jnp_calls.add(name)
                elif owner in _NUMPY_MODULES:
                    numpy_calls.add(name)
                if not (
                    owner in _ARRAY_MODULES
                    or _is_jax_numpy(node.func)
                    or (owner is None and name in _BUILTINS)
                    or (isinstance(node.func, ast.Attribute) and name in _ARRAY_METHODS)
                ):
                    other_calls.add(name)
            elif isinstance(node, ast.Subscript):
                in_slices.update(id(n) for n in ast.walk(node.slice))
                key = node.slice
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    self.indexes = True
            elif isinstance(node, ast.JoinedStr | ast.FormattedValue):
                self.formats = True
            elif isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert | ast.BoolOp):
                self.tests_truth = True
        for node in ast.walk(tree) if tree is not None else ():
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, int | float | complex)
                and not isinstance(node.value, bool)
                and id(node) not in in_slices
            ):
                self.numbers = True
        self.calls = frozenset(calls)
        self.jnp_calls = frozenset(jnp_calls)
        self.numpy_calls = frozenset(numpy_calls)
        self.other_calls = frozenset(other_calls)

    @classmethod
    def of(cls, source: str | None) -> _LineSyntax:
        """The syntax of one stripped line, which may be a fragment of a statement."""
        text = (source or "").strip()
        if not text:
            return cls(None)
        # A line can open a block or a bracket that later lines close.
        for candidate in (text, f"{text} pass", f"{text})", f"{text}]", f"{text}}}"):
            try:
                return cls(ast.parse(candidate))
            except SyntaxError:
                continue
        if text.startswith("elif "):
            return cls.of(text.removeprefix("el"))
        return cls(None)


_BUILTINS = frozenset(dir(builtins))


def _makes_an_array(jnp_name: str) -> bool:
    """``jnp.<jnp_name>(...)`` makes a device array of what it is given: ``asarray``, ``ones``,
    ``float32``, ``bfloat16``, ``int8``, ``bool_``."""
    return (
        jnp_name in _FROM_HOST_CALLS
        or jnp_name == "bool_"
        or (jnp_name.startswith(_DTYPE_PREFIXES) and jnp_name.rstrip("_")[-1:].isdigit())
    )


def _called_name(func: ast.expr) -> tuple[str, str | None]:
    """``(name, owner)`` of a call: ``np.asarray`` → ("asarray", "np"), ``f`` → ("f", None)."""
    if isinstance(func, ast.Name):
        return func.id, None
    if isinstance(func, ast.Attribute):
        owner = func.value
        if isinstance(owner, ast.Name):
            return func.attr, owner.id
        if isinstance(owner, ast.Attribute):
            return func.attr, owner.attr
        return func.attr, None
    return "", None


def _is_jax_numpy(func: ast.expr) -> bool:
    """``jax.numpy.array``: an attribute chain through ``jax.numpy``."""
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "numpy"
        and isinstance(func.value.value, ast.Name)
        and func.value.value.id == "jax"
    )
