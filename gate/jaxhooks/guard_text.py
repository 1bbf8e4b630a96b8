"""JAX's guard wording, in every form JAX 0.10.1 to 0.12 writes it: which array, and where to.

A guard line (``log``) and a refusal (``disallow``) describe a transfer the same way. Host-to-
device and device-to-device name the global aval and the destination sharding, once per
destination device::

    aval=ShapedArray(float32[64,16]), dst_sharding=NamedSharding(mesh=Mesh('data': 8,
        axis_types=(Explicit,)), spec=P('data',), memory_kind=device)
    aval=ShapedArray(float32[], weak_type=True), dst_sharding=GSPMDSharding({devices=[8,1]<=[8]},
        memory_kind=device)
    aval=ShapedArray(float32[64,16]), dst_sharding=SingleDeviceSharding(device=CpuDevice(id=0),
        memory_kind=device)

An array typed with its sharding (Explicit mesh axes) prints its dimensions with the axes,
``float32[64@data,16]`` or ``float32[16@(data,model),8]``, one in another memory kind
``float32<host>[...]``. From JAX 0.12 a device-to-host line reads ``shape=(64,16), dtype=F32,
device=cpu:0`` (XLA's names for the element types). JAX's C++ fast path may leave the
description out altogether. Everything here is matched loosely: a part JAX did not write is
None, never an error. The lines themselves, captured from each version, are the tests'
fixtures (``tests/guard-lines/``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gate.results.placement import Placement

# ``aval=ShapedArray(float32[64@data,16], weak_type=True)``; the memory kind (``<host>``) and
# the axes a dimension is split over (``@data``, ``@(data,model)``) are skipped.
_AVAL = re.compile(r"aval=ShapedArray\((?P<dtype>[a-z0-9_]+)(?:<[^>]*>)?\[(?P<dims>[^\]]*)\]")
_DIM = re.compile(r"(\d+)(?:@(?:\([^)]*\)|[^,\]\s]+))?")
# JAX 0.12's device-to-host form: ``shape=(64,16), dtype=F32, device=cpu:0``.
_XLA_SHAPE = re.compile(r"shape=\((?P<dims>[0-9, ]*)\),\s*dtype=(?P<dtype>[A-Z0-9a-z_]+)")
_XLA_DTYPES = {
    "PRED": "bool",
    **{f"S{n}": f"int{n}" for n in (2, 4, 8, 16, 32, 64)},
    **{f"U{n}": f"uint{n}" for n in (2, 4, 8, 16, 32, 64)},
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "C128": "complex128",
}
# XLA's small floats, ``F8E4M3FN``: NumPy's (ml_dtypes') names are ``float8_e4m3fn``.
_XLA_SMALL_FLOAT = re.compile(r"F(?P<bits>[48])(?P<rest>E\d+M\d+\w*)")
_DESTINATION = re.compile(r"\bdst_sharding=")
_SOURCE = re.compile(r"(?<![A-Za-z_])sharding=")
_MESH_AXIS = re.compile(r"'(?P<name>[^']+)':\s*(?P<size>\d+)")
_TILES = re.compile(r"devices=\[(?P<dims>[0-9,]+)\]")
_SUBGROUPS = re.compile(r"last_tile_dims=\{(?P<kinds>[^}]*)\}")


@dataclass(frozen=True)
class GuardText:
    """What one guard line or refusal says about the array it moved."""

    dtype: str | None
    shape: tuple[int, ...] | None
    # Where a host-to-device or device-to-device transfer lands, over several devices;
    # None for one device, for device-to-host, and where JAX did not say.
    destination: Placement | None = None
    # A device-to-device copy of an array already laid out over devices names where it
    # comes from too (``sharding=...``, then ``dst_sharding=...``): JAX logs such a copy
    # once, where it logs a host value (or a one-device array) once per destination device.
    from_sharded_array: bool = False

    @property
    def lines_per_transfer(self) -> int:
        """How many guard lines one transfer of this kind writes: one per destination device."""
        if self.from_sharded_array or self.destination is None:
            return 1
        return self.destination.devices or 1


def parse_guard_text(text: str, all_devices: int | None = None) -> GuardText:
    """The array and destination a guard line or refusal names, as far as it names them.

    ``all_devices`` is how many devices this process has: a GSPMD sharding JAX printed as
    ``{replicated}`` names no devices, and it is the mesh in context, which on the
    setups the gate meets spans them all.
    """
    destination = parse_destination(text, all_devices)
    source = _SOURCE.search(text)
    from_sharded = source is not None and _DESTINATION.search(text) is not None
    return GuardText(*parse_aval(text), destination, from_sharded)


def parse_aval(text: str) -> tuple[str | None, tuple[int, ...] | None]:
    """Dtype and shape from ``aval=ShapedArray(float32[8,4])`` or ``shape=(8,4), dtype=F32``."""
    aval = _AVAL.search(text)
    if aval is not None:
        return aval["dtype"], tuple(int(d) for d in _DIM.findall(aval["dims"]))
    xla = _XLA_SHAPE.search(text)
    if xla is not None:
        dims = xla["dims"].replace(" ", "")
        shape = tuple(int(d) for d in dims.split(",") if d)
        return _xla_dtype(xla["dtype"]), shape
    return None, None


def _xla_dtype(name: str) -> str | None:
    known = _XLA_DTYPES.get(name)
    if known is not None:
        return known
    small = _XLA_SMALL_FLOAT.fullmatch(name)
    if small is not None:
        return f"float{small['bits']}_{small['rest'].lower()}"
    return None  # a type this table does not know: say nothing rather than guess


def parse_destination(text: str, all_devices: int | None = None) -> Placement | None:
    """Where the transfer lands, over more than one device; None for one device or unsaid.

    ``dst_sharding=`` where the line has it (it may name the source's ``sharding=`` first),
    else a lone ``sharding=``.
    """
    found = _DESTINATION.search(text) or _SOURCE.search(text)
    if found is None:
        return None
    rest = text[found.end() :]
    if rest.startswith("NamedSharding("):
        placement = _named(_enclosed(rest, len("NamedSharding")))
    elif rest.startswith("GSPMDSharding("):
        placement = _gspmd(_enclosed(rest, len("GSPMDSharding")), all_devices)
    else:  # SingleDeviceSharding, or a kind this JAX prints differently: one device or unsaid
        return None
    if placement is None or (placement.devices is not None and placement.devices <= 1):
        return None
    return placement


def parse_sharding(text: str, devices: int | None = None) -> Placement | None:
    """A sharding's own ``repr`` (``NamedSharding(mesh=..., spec=P('data',), ...)``), read as the
    guard's destination is: the same spelling whether JAX logged it or an array holds it.

    ``devices``: how many devices the sharding spans, for a GSPMD ``{replicated}``.
    """
    return parse_destination(f"dst_sharding={text}", devices)


def _enclosed(text: str, start: int) -> str:
    """The text inside the bracket that opens at ``text[start]``, up to its partner."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack: list[str] = []
    for index in range(start, len(text)):
        char = text[index]
        if char in pairs:
            stack.append(pairs[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return text[start + 1 : index]
    return text[start + 1 :]  # cut short (a truncated line): what there is


def _named(inside: str) -> Placement | None:
    """``mesh=Mesh('data': 4, 'model': 2, ...), spec=P('data',), memory_kind=device``."""
    mesh_at = inside.find("mesh=")
    spec_at = inside.find("spec=P(")
    if mesh_at < 0 or spec_at < 0:
        return None
    open_at = inside.find("(", mesh_at)
    sizes = {m["name"]: int(m["size"]) for m in _MESH_AXIS.finditer(_enclosed(inside, open_at))}
    if not sizes:
        return None  # a mesh printed without its axis sizes: nothing to count on
    entries = _entries(_enclosed(inside, spec_at + len("spec=P")))
    ways = math.prod(sizes.get(axis, 1) for entry in entries for axis in _axes(entry))
    mesh = ", ".join(f"'{name}': {size}" for name, size in sizes.items())
    return Placement(_spec_text(entries), math.prod(sizes.values()), ways, mesh)


def _entries(spec: str) -> list[str]:
    """The top-level entries of a spec's text, trailing ``None`` dropped (it splits nothing)."""
    entries, depth, current = [], 0, ""
    for char in spec:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            entries.append(current.strip())
            current = ""
        else:
            current += char
    entries.append(current.strip())
    entries = [e for e in entries if e]
    while entries and entries[-1] == "None":
        entries.pop()
    return entries


def _axes(entry: str) -> list[str]:
    return re.findall(r"'([^']*)'", entry)


def _spec_text(entries: list[str]) -> str:
    """``P('data')`` for JAX's ``P('data',)`` and ``P('data', None)``: one spelling per spec."""
    shown = []
    for entry in entries:
        axes = _axes(entry)
        if entry.startswith("(") and len(axes) > 1:
            shown.append("(" + ", ".join(f"'{a}'" for a in axes) + ")")
        elif axes:
            shown.append(f"'{axes[0]}'")
        else:
            shown.append(entry)
    return f"P({', '.join(shown)})"


def _gspmd(inside: str, all_devices: int | None) -> Placement | None:
    """XLA's HloSharding text: ``{devices=[8,1]<=[8]}``, ``{replicated}``, ``{maximal ...}``."""
    hlo = _enclosed(inside, inside.find("{")) if "{" in inside else inside
    text = "{" + hlo + "}"
    if hlo.startswith("replicated"):
        return Placement(text, all_devices, 1)
    tiles = _TILES.search(hlo)
    if tiles is None:
        return None  # maximal (one device), manual, or a form this reading does not know
    dims = [int(d) for d in tiles["dims"].split(",")]
    subgroups = 1 if "last_tile_dim_replicate" in hlo else 0
    kinds = _SUBGROUPS.search(hlo)
    if kinds is not None:
        subgroups = len([k for k in kinds["kinds"].split(",") if k.strip()])
    split = dims[: len(dims) - subgroups] if subgroups else dims
    return Placement(text, math.prod(dims), math.prod(split))
