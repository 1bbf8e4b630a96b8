"""JAX's guard lines and refusals, as JAX 0.10.1, 0.10.2 and 0.12 write them on 8 CPU devices.

The fixtures are real: ``tests/guard-lines/capture.py`` wrote each ``jax-<version>.log`` (a
scenario's distinct lines verbatim, and its refusal under ``disallow``). Every line must read
as what it is: the direction, the array, and where it lands over the mesh, with how many
lines one transfer writes (one per destination device, except a sharded array's copy).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.jaxhooks.guard import Refusal, parse_refusal
from gate.jaxhooks.guard_text import parse_aval, parse_destination, parse_guard_text
from gate.levels import Direction
from gate.results.placement import Placement
from gate.witness.guard_log import parse_guard_line

FIXTURES = Path(__file__).parent / "guard-lines"
VERSIONS = ("0.10.1", "0.10.2", "0.12.0.1")

H2D, D2H, D2D = Direction.HOST_TO_DEVICE, Direction.DEVICE_TO_HOST, Direction.DEVICE_TO_DEVICE
F64x16 = ("float32", (64, 16))
REPLICATED = Placement("P()", 8, 1, "'data': 8")
SPLIT = Placement("P('data')", 8, 8, "'data': 8")
BY_ROWS = Placement("{devices=[8,1]<=[8]}", 8, 8)
# What each line of a scenario says: (direction, dtype, shape, destination, lines per transfer).
Said = tuple[Direction, str | None, tuple[int, ...] | None, Placement | None, int]
# From JAX 0.12 the CPU backend logs (and refuses) reading a split array on the host.
READ_BACK: dict[str, Said] = {
    "np.asarray of a split array": (D2H, *F64x16, None, 1),
    "device_put of a split array to P()": (D2H, *F64x16, None, 1),
    "bfloat16 read of a split array": (D2H, "bfloat16", (64, 16), None, 1),
    "int32 vector read of a split array": (D2H, "int32", (8,), None, 1),
}
EXPECTED: dict[str, set[Said]] = {
    "python scalar in an eager op, twice": {
        (H2D, "float32", (), None, 1),
        (H2D, None, None, None, 1),  # the fast path's empty description
    },
    "numpy batch to a jit with replicated params": {(H2D, *F64x16, REPLICATED, 8)},
    "numpy batch to a jit with in_shardings P('data')": {(H2D, *F64x16, SPLIT, 8)},
    "python scalar to a jit": {(H2D, "float32", (), REPLICATED, 8)},
    "uncommitted array meets a sharded one": {(D2D, *F64x16, SPLIT, 8)},
    "np.asarray of a split array": {(H2D, *F64x16, SPLIT, 8)},
    "device_put of a split array to P()": {
        (H2D, *F64x16, SPLIT, 8),
        (H2D, *F64x16, REPLICATED, 8),
    },
    "device_put of a numpy array to a 4x2 mesh, P('data', 'model')": {
        (H2D, *F64x16, Placement("P('data', 'model')", 8, 8, "'data': 4, 'model': 2"), 8)
    },
    "device_put of a numpy array to a 4x2 mesh, P('data')": {
        (H2D, *F64x16, Placement("P('data')", 8, 4, "'data': 4, 'model': 2"), 8)
    },
    "reshard of a numpy array": {(H2D, *F64x16, BY_ROWS, 8)},
    "with_sharding_constraint helper on a numpy array (Auto mesh)": {(H2D, *F64x16, BY_ROWS, 8)},
    "with_sharding_constraint helper to P('data') of a 4x2 Auto mesh": {
        (H2D, *F64x16, Placement("{devices=[4,1,2]<=[8] last_tile_dim_replicate}", 8, 4), 8)
    },
    # GSPMD's "{replicated}" names no devices: they are the process's (8 here).
    "jnp.asarray of a numpy array under jax.set_mesh": {
        (H2D, *F64x16, Placement("{replicated}", 8, 1), 8)
    },
    # A sharded array's copy names its source too, and is logged once, not per device.
    "a 2-device array copied to 2 other devices": {
        (D2D, *F64x16, Placement("P('data')", 2, 2, "'data': 2"), 1)
    },
    "a one-device array put on the mesh": {
        (H2D, *F64x16, None, 1),
        (D2D, *F64x16, SPLIT, 8),
    },
    "bfloat16 read of a split array": {(H2D, "bfloat16", (64, 16), SPLIT, 8)},
    "int32 vector read of a split array": {(H2D, "int32", (8,), SPLIT, 8)},
}


def _scenarios(version: str) -> dict[str, tuple[list[str], list[str]]]:
    """Per scenario of one version's file: its guard lines and its refusals."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    lines: list[str] = []
    refusals: list[str] = []
    for line in (FIXTURES / f"jax-{version}.log").read_text().splitlines():
        if line.startswith("# scenario: "):
            lines, refusals = [], []
            found[line.removeprefix("# scenario: ")] = (lines, refusals)
        elif line.startswith("# refused: "):
            refusals.append(line.removeprefix("# refused: "))
        elif not line.startswith("# jax "):
            lines.append(line)
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_captured_guard_line_reads_as_what_it_moved_and_where(version: str) -> None:
    scenarios = _scenarios(version)
    assert set(scenarios) == set(EXPECTED)
    for name, (lines, _) in scenarios.items():
        parsed = [parse_guard_line(line, all_devices=8) for line in lines]
        assert None not in parsed, (name, lines)
        said = {
            (p.direction, p.dtype, p.shape, p.destination, p.lines_per_transfer)
            for p in parsed
            if p is not None
        }
        expected = set(EXPECTED[name])
        if version.startswith("0.12") and name in READ_BACK:
            expected.add(READ_BACK[name])
        assert said == expected, name


@pytest.mark.parametrize("version", VERSIONS)
def test_every_captured_refusal_names_its_array_and_destination(version: str) -> None:
    refused = 0
    for name, (_, refusals) in _scenarios(version).items():
        for message in refusals:
            violation = parse_refusal(RuntimeError(message), all_devices=8)
            assert violation is not None, message
            said = (violation.direction, violation.dtype, violation.shape, violation.destination)
            expected = {s[:4] for s in EXPECTED[name]} | (
                {READ_BACK[name][:4]} if name in READ_BACK else set()
            )
            assert said in expected, (name, message)
            refused += 1
    assert refused >= 9


def test_on_0_12_reading_a_split_array_is_refused_as_device_to_host() -> None:
    # jax-ml/jax#40285: even inside jax.device_put, whose other leg is explicit.
    [refusal] = _scenarios("0.12.0.1")["device_put of a split array to P()"][1]
    assert parse_refusal(RuntimeError(refusal)) == Refusal(D2H, *F64x16, None)


@pytest.mark.parametrize(
    ("aval", "expected"),
    [
        # repr(jax.typeof(x)) of arrays on a 4x2 Explicit mesh (JAX 0.10.1 to 0.12 alike), as the
        # guard writes them for a sharded array's copy and as JAX's errors quote them.
        ("ShapedArray(float32[16@data,8])", ("float32", (16, 8))),
        ("ShapedArray(float32[16@(data,model),8])", ("float32", (16, 8))),
        ("ShapedArray(float32[16@data,8@model])", ("float32", (16, 8))),
        ("ShapedArray(float32[16,8@model])", ("float32", (16, 8))),
        ("ShapedArray(float32<host>[64@data,16])", ("float32", (64, 16))),
        ("ShapedArray(int32[], weak_type=True)", ("int32", ())),
        ("ShapedArray(bfloat16[2, 3])", ("bfloat16", (2, 3))),
    ],
)
def test_an_aval_reads_with_its_mesh_axes_and_memory_kind_left_out(
    aval: str, expected: tuple[str, tuple[int, ...]]
) -> None:
    assert parse_aval(f"aval={aval}, dst_sharding=...") == expected


def test_jax_0_12s_device_to_host_form_reads_with_numpys_names() -> None:
    assert parse_aval("shape=(), dtype=PRED, device=cpu:0") == ("bool", ())
    assert parse_aval("shape=(4,2), dtype=F8E4M3FN, device=cuda:0") == ("float8_e4m3fn", (4, 2))
    assert parse_aval("shape=(4), dtype=U8, device=cpu:3") == ("uint8", (4,))
    assert parse_aval("shape=(4), dtype=TOKEN, device=cpu:3") == (None, (4,))


def test_one_device_or_an_unknown_sharding_is_no_placement() -> None:
    single = "dst_sharding=SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)"
    assert parse_destination(single) is None
    assert parse_destination("dst_sharding=GSPMDSharding({maximal device=0})") is None
    one = (
        "dst_sharding=NamedSharding(mesh=Mesh('data': 1, axis_types=(Explicit,)), spec=P('data',))"
    )
    assert parse_destination(one) is None
    assert parse_guard_text("").lines_per_transfer == 1


def test_a_spec_reads_the_same_however_jax_spelled_it() -> None:
    mesh = "mesh=Mesh('data': 4, 'model': 2, axis_types=(Explicit, Explicit))"
    for spec in ("P('data',)", "P('data', None)", "P('data')"):
        found = parse_destination(f"dst_sharding=NamedSharding({mesh}, spec={spec})")
        assert found == Placement("P('data')", 8, 4, "'data': 4, 'model': 2"), spec
    both = parse_destination(f"dst_sharding=NamedSharding({mesh}, spec=P(('data', 'model'),))")
    assert both == Placement("P(('data', 'model'))", 8, 8, "'data': 4, 'model': 2")


def test_a_placement_says_where_it_went_and_what_landed() -> None:
    assert REPLICATED.words() == "replicated to 8 devices, P()"
    assert REPLICATED.landed(4096) == 8 * 4096
    assert SPLIT.words() == "split 8 ways over 8 devices, P('data')"
    assert SPLIT.landed(4096) == 4096
    half = Placement("P('data')", 8, 4, "'data': 4, 'model': 2")
    assert half.words() == "split 4 ways over 8 devices (2 copies), P('data')"
    assert half.landed(4096) == 2 * 4096
    unknown = Placement("{replicated}", None, 1)
    assert unknown.words() == "replicated to every device, {replicated}"
    assert unknown.landed(4096) is None


def test_a_read_to_the_host_has_no_destination_whatever_sharding_it_names() -> None:
    # Not a captured line (no JAX on CPU writes one): a device-to-host line that named the
    # source's sharding must still be the detector's one read, not a destination of its own.
    line = (
        "W1203 15:53:06.268193   18832 guard_lib.cc:184] device-to-host transfer: "
        "aval=ShapedArray(float32[64,16]), dst_sharding=NamedSharding(mesh=Mesh('data': 8, "
        "axis_types=(Explicit,)), spec=P('data',), memory_kind=device)"
    )
    parsed = parse_guard_line(line, all_devices=8)
    assert parsed is not None
    assert (parsed.destination, parsed.lines_per_transfer) == (None, 1)
    refused = parse_refusal(RuntimeError("Disallowed " + line.split("] ", 1)[1]))
    assert refused == Refusal(D2H, *F64x16, None)
