"""Who takes part in a collective: XLA's replica groups in every form, and the mesh axes they are.

XLA prints the same groups differently across versions (checked on jax 0.10 and 0.12):

- ``{{0,1},{2,3}}``: the groups listed (``{}``: every device in one group);
- ``[4,2]<=[8]``, ``[2,4]<=[4,2]T(1,0)``: an iota of the devices, reshaped, transposed and
  cut into rows (XLA's ``IotaReplicaGroupList``);
- ``mesh['a'=4,'b'=2] {'b'}``: the axes of a mesh of the devices (``, device_ids=(...)``
  when the mesh is not an iota; ``'a':(1)2`` for a sub-axis), each group one slice.

All three are expanded to the same tuple of groups of the program's device numbers (its
partition ids, which index the program's device assignment), so one collective reads the
same on every JAX. Naming them from the step's own mesh (`axes_over`) makes them readable
and independent of how XLA chose to print its own, anonymous mesh (``'axis_0'``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from gate.jaxhooks.executables import StepMesh

Groups = tuple[tuple[int, ...], ...]

_IOTA = re.compile(r"^\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?$")
_MESH = re.compile(
    r"^mesh\[(?P<axes>[^\]]*)\](?:,\s*device_ids=\((?P<ids>.*)\))?\s*\{(?P<over>[^}]*)\}$"
)
_AXIS = re.compile(r"'([^']*)'=(\d+)")
_SUB_AXIS = re.compile(r"^'([^']*)'(?::\((\d+)\)(\d+))?$")


_VALUE = re.compile(
    r"replica_groups=("
    r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?"
    r"|mesh\[[^\]]*\](?:,\s*device_ids=\((?:[^()]|\([^()]*\))*\))?\s*\{[^}]*\}"
    r"|\{(?:[^{}]|\{[^{}]*\})*\}"
    r")"
)


def groups_value(attributes: str) -> str | None:
    """The whole ``replica_groups=`` value of an instruction's attributes, in any form.

    Its own pattern, as the mesh form holds a top-level comma (``mesh[...], device_ids=``)
    that ends any ordinary attribute value. None when there is none (``{}`` then applies).
    """
    found = _VALUE.search(attributes)
    if found is not None:
        return found.group(1)
    return "?" if "replica_groups=" in attributes else None


def expand(text: str, devices: int) -> Groups:
    """The groups of a ``replica_groups=`` value, as tuples of device numbers.

    ``devices`` (the program's partitions times replicas) is what ``{}`` means.
    ValueError for a form this does not know: the caller says so rather than guess.
    """
    text = text.strip()
    if text in ("{}", ""):
        return (tuple(range(devices)),)
    if text.startswith("{"):
        groups = re.findall(r"\{([\d,\s]*)\}", text[1:-1])
        return tuple(tuple(int(n) for n in g.split(",") if n.strip()) for g in groups)
    iota = _IOTA.match(text)
    if iota is not None:
        rows = _iota(iota.group(1), iota.group(2), iota.group(3))
        return tuple(tuple(int(n) for n in row) for row in rows)
    mesh = _MESH.match(text)
    if mesh is not None:
        return _mesh_groups(mesh.group("axes"), mesh.group("ids"), mesh.group("over"))
    raise ValueError(f"replica groups in a form the gate does not read: {text[:80]}")


def _ints(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def _iota(dims: str, reshape: str, perm: str | None) -> np.ndarray:
    """XLA's iota tile assignment: ``arange`` reshaped, transposed, then shaped ``dims``."""
    shape, order = _ints(reshape), _ints(perm) if perm else None
    values = np.arange(int(np.prod(shape))).reshape(shape)
    if order is not None:
        values = values.transpose(order)
    return values.reshape(_ints(dims))


def _mesh_groups(axes_text: str, ids: str | None, over_text: str) -> Groups:
    axes = [(name, int(size)) for name, size in _AXIS.findall(axes_text)]
    sizes = [size for _, size in axes]
    total = int(np.prod(sizes))
    if ids is None:
        devices = np.arange(total)
    elif "<=" in ids:
        found = _IOTA.match(ids.strip())
        if found is None:
            raise ValueError(f"mesh device ids in a form the gate does not read: {ids[:80]}")
        devices = _iota(found.group(1), found.group(2), found.group(3)).reshape(-1)
    else:
        # Listed: a leading ``[dims]`` (XLA's array form) is the shape, the rest the ids.
        devices = np.array(_ints(re.sub(r"^\s*\[[\d,]*\]", "", ids)))
    if devices.size != total:
        raise ValueError(f"mesh of {total} devices lists {devices.size} device ids")
    # Split every sub-axis ``'a':(pre)size`` off its axis: the axis of size n becomes
    # [pre, size, n / (pre * size)], major to minor, and the group runs over the middle one.
    dims: list[int] = []
    index: dict[tuple[str, int, int], int] = {}
    over = [s.strip() for s in over_text.split(",") if s.strip()]
    subs = {}
    for token in over:
        found = _SUB_AXIS.match(token)
        if found is None:
            raise ValueError(f"mesh axis in a form the gate does not read: {token}")
        if found.group(2):
            subs[found.group(1)] = (int(found.group(2)), int(found.group(3)))
    for name, size in axes:
        if name in subs:
            pre, sub = subs[name]
            index[(name, pre, sub)] = len(dims) + 1
            dims.extend([pre, sub, size // (pre * sub)])
        else:
            index[(name, 1, size)] = len(dims)
            dims.append(size)
    grid = devices.reshape(dims)
    spanned = []
    for token in over:
        found = _SUB_AXIS.match(token)
        assert found is not None
        name = found.group(1)
        key = (name, *subs[name]) if name in subs else (name, 1, dict(axes)[name])
        spanned.append(index[key])
    rest = [d for d in range(len(dims)) if d not in spanned]
    rows = grid.transpose(rest + spanned).reshape(-1, int(np.prod([dims[d] for d in spanned])))
    return tuple(tuple(int(n) for n in row) for row in rows)


def pairs(text: str) -> tuple[tuple[int, int], ...]:
    """A collective-permute's ``source_target_pairs={{0,1},{1,2}}``."""
    return tuple((int(a), int(b)) for a, b in re.findall(r"\{(\d+),\s*(\d+)\}", text))


def _coordinates(mesh: StepMesh, program_devices: Sequence[int]) -> list[tuple[int, ...]] | None:
    """Each program device number's coordinates in ``mesh``; None when the mesh lacks one."""
    return _coordinates_of(mesh, tuple(program_devices))


@functools.lru_cache(maxsize=64)  # one program's collectives ask the same question each
def _coordinates_of(
    mesh: StepMesh, program_devices: tuple[int, ...]
) -> list[tuple[int, ...]] | None:
    where = {
        device: tuple(int(i) for i in np.unravel_index(position, mesh.shape))
        for position, device in enumerate(mesh.device_ids)
    }
    found = [where.get(device) for device in program_devices]
    return None if any(c is None for c in found) else [c for c in found if c is not None]


def axes_over(
    groups: Groups, program_devices: Sequence[int], meshes: Sequence[StepMesh]
) -> tuple[str, ...] | None:
    """The axes of the first mesh whose every full slice along them is exactly one group.

    None when no mesh does (the groups follow no mesh of the step's): the groups then
    name the collective.
    """
    for mesh in meshes:
        coordinates = _coordinates(mesh, program_devices)
        if coordinates is None or any(d >= len(coordinates) for g in groups for d in g):
            continue
        varying = {
            axis
            for group in groups
            for axis in range(len(mesh.shape))
            if len({coordinates[d][axis] for d in group}) > 1
        }
        size = int(np.prod([mesh.shape[a] for a in varying])) if varying else 1
        covered = sorted(d for g in groups for d in g)
        if all(len(g) == size for g in groups) and covered == sorted(range(len(coordinates))):
            return tuple(mesh.axis_names[a] for a in sorted(varying))
    return None


def axes_of_pairs(
    moves: Sequence[tuple[int, int]], program_devices: Sequence[int], meshes: Sequence[StepMesh]
) -> tuple[str, ...] | None:
    """The axes along which a permute's pairs move data, in the first mesh that has them all."""
    for mesh in meshes:
        coordinates = _coordinates(mesh, program_devices)
        if coordinates is None or any(max(p) >= len(coordinates) for p in moves):
            continue
        varying = {
            axis
            for source, target in moves
            for axis in range(len(mesh.shape))
            if coordinates[source][axis] != coordinates[target][axis]
        }
        return tuple(mesh.axis_names[a] for a in sorted(varying))
    return None


def groups_text(groups: Groups, program_devices: Sequence[int]) -> str:
    """``{0,1},{2,3},{4,5},{6,7}``, in JAX device ids."""
    named = [[_device(d, program_devices) for d in g] for g in groups]
    return ",".join("{" + ",".join(str(d) for d in g) + "}" for g in named)


def pairs_text(moves: Sequence[tuple[int, int]], program_devices: Sequence[int]) -> str:
    """``0->1,1->2,...``, in JAX device ids."""
    return ",".join(
        f"{_device(a, program_devices)}->{_device(b, program_devices)}" for a, b in moves
    )


def _device(number: int, program_devices: Sequence[int]) -> int:
    return program_devices[number] if number < len(program_devices) else number
