"""Each kind of transfer gets its own fix: the kind read from what was seen, then the line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, make_repo, run_gate
from result_samples import transfer

from gate.levels import Direction
from gate.results.cause import HOST_CALLBACK_USE, Cause, cause_of
from gate.results.hints import _FIXES, hint_for
from gate.results.placement import Placement
from gate.results.records import Transfer

H2D = Direction.HOST_TO_DEVICE
D2H = Direction.DEVICE_TO_HOST
D2D = Direction.DEVICE_TO_DEVICE


def sighting(
    direction: Direction = H2D,
    source: str | None = None,
    *,
    shape: tuple[int, ...] | None = (8,),
    dtype: str | None = "float32",
    host_use: str | None = None,
    jitted_call: str | None = None,
    explicit: bool = False,
    boundary: str | None = None,
    destination: Placement | None = None,
    fetched_from: Placement | None = None,
) -> Transfer:
    base = transfer(
        direction, shape=shape, dtype=dtype, source=source, explicit=explicit, boundary=boundary
    )
    return replace(
        base,
        host_use=host_use,
        jitted_call=jitted_call,
        destination=destination,
        fetched_from=fetched_from,
    )


# Where a transfer lands (or a read array lay) over 8 devices, as the guard's lines say it.
REPLICATED = Placement("P()", 8, 1, "'data': 8")
SPLIT = Placement("P('data')", 8, 8, "'data': 8")
CONSTRAINED = Placement("{devices=[8,1]<=[8]}", 8, 8)


CASES: list[tuple[str, Transfer, Cause]] = [
    (
        "a device array a jitted function closes over, read by JAX while compiling",
        sighting(D2H, None, host_use="_array_mlir_constant_handler"),
        Cause.CLOSED_OVER_ARRAY,
    ),
    (
        "numpy batch into a jitted call",
        sighting(source="state = train_step(state, x, y)", jitted_call="train_step"),
        Cause.JIT_ARGUMENT,
    ),
    (
        "python scalar into a jitted call",
        sighting(source="p = sgd(p, x, y, LR)", shape=(), jitted_call="sgd"),
        Cause.JIT_ARGUMENT,
    ),
    ("python scalar in an eager op", sighting(source="y = x * 0.5", shape=()), Cause.EAGER_SCALAR),
    (
        "python scalar held in a variable",
        sighting(source="params = params - lr * grads", shape=()),
        Cause.EAGER_SCALAR,
    ),
    (
        "a scalar in a jnp function",
        sighting(source="y = jnp.maximum(x, 0.0)", shape=()),
        Cause.EAGER_SCALAR,
    ),
    (
        "eager indexing",
        sighting(source="head = x[:1]", shape=(), dtype="int32"),
        Cause.EAGER_INDEX,
    ),
    (
        "eager indexing by a variable",
        sighting(source="row = table[i]", shape=(), dtype="int32"),
        Cause.EAGER_INDEX,
    ),
    (
        "a float scalar next to a list index",
        sighting(source="acc = history['acc'][-1] * 100.0", shape=()),
        Cause.EAGER_SCALAR,
    ),
    (
        "numpy array in an eager op",
        sighting(source="z = x + noise", shape=(8, 4)),
        Cause.EAGER_HOST_ARRAY,
    ),
    ("jnp.array of numpy", sighting(source="x = jnp.array(np_x)"), Cause.ARRAY_FROM_HOST),
    # "Pass a device array instead", done at the call: made, and uploaded, on every call.
    (
        "a device scalar made at a jitted call",
        sighting(source="params, loss = sgd(params, x, y, jnp.float32(LR))", shape=()),
        Cause.ARRAY_FROM_HOST,
    ),
    (
        "jnp.ones in an eager op",
        sighting(source="y = x * jnp.ones(8)", shape=()),
        Cause.ARRAY_FROM_HOST,
    ),
    (
        "jax.numpy.asarray of numpy",
        sighting(source="x = jax.numpy.asarray(batch)"),
        Cause.ARRAY_FROM_HOST,
    ),
    ("print", sighting(D2H, "print(loss)", host_use="__str__"), Cause.PRINTED),
    ("f-string", sighting(D2H, 'log.info(f"loss {loss}")', host_use="__format__"), Cause.PRINTED),
    ("print seen by the guard only", sighting(D2H, "print('loss', loss)"), Cause.PRINTED),
    ("float", sighting(D2H, "total += float(loss)", host_use="__float__"), Cause.CONVERTED),
    ("item", sighting(D2H, "v = loss.item()", host_use="item"), Cause.CONVERTED),
    ("truth test", sighting(D2H, "if loss > 10:", host_use="__bool__"), Cause.CONVERTED),
    ("truth test seen by the guard only", sighting(D2H, "while not done:"), Cause.CONVERTED),
    ("numpy read", sighting(D2H, "a = np.asarray(x)", host_use="__array__"), Cause.NUMPY_READ),
    ("numpy read seen by the guard only", sighting(D2H, "m = np.mean(x)"), Cause.NUMPY_READ),
    (
        "copy_to_host_async",
        sighting(D2H, "x.copy_to_host_async()", host_use="copy_to_host_async"),
        Cause.ASYNC_COPY,
    ),
    ("uncommitted array", sighting(D2D, "z = x + y"), Cause.UNCOMMITTED),
    (
        "host callback",
        sighting(D2H, "jax.debug.print('{}', x)", host_use=HOST_CALLBACK_USE),
        Cause.HOST_CALLBACK,
    ),
    (
        "explicit outside a boundary",
        sighting(D2H, "v = jax.device_get(x)", explicit=True),
        Cause.EXPLICIT_OUTSIDE_BOUNDARY,
    ),
    (
        "explicit upload outside a boundary",
        sighting(source="lr = jax.device_put(LR)", explicit=True, shape=()),
        Cause.EXPLICIT_UPLOAD_OUTSIDE_BOUNDARY,
    ),
    (
        "explicit in a boundary",
        sighting(D2H, "v = jax.device_get(x)", explicit=True, boundary="io:save"),
        Cause.EXPLICIT_IN_BOUNDARY,
    ),
    # Where the gate cannot tell, it says the direction's general fix, never a wrong one.
    (
        "a call the gate could not see into",
        sighting(source="state = trainer.step(state, batch)"),
        Cause.HOST_TO_DEVICE,
    ),
    ("no source line", sighting(source=None), Cause.HOST_TO_DEVICE),
    (
        "an int scalar with an index and a literal",
        sighting(source="n = x[0] + 1", shape=(), dtype="int32"),
        Cause.HOST_TO_DEVICE,
    ),
    (
        "an undescribed fast-path upload",
        sighting(source="y = x + z", shape=None, dtype=None),
        Cause.HOST_TO_DEVICE,
    ),
    (
        "an undescribed upload on a line that only indexes",
        sighting(source="d = x[:2]", shape=None, dtype=None),
        Cause.EAGER_INDEX,
    ),
    (
        "an undescribed upload on a line that only adds a number",
        sighting(source="b = x + 2", shape=None, dtype=None),
        Cause.EAGER_SCALAR,
    ),
    (
        "the operands a host callback's machinery moves explicitly",
        sighting(source="return cb(x)", explicit=True, host_use=HOST_CALLBACK_USE),
        Cause.HOST_CALLBACK,
    ),
    ("a fetch with nothing to go on", sighting(D2H, "out = helper(x)"), Cause.DEVICE_TO_HOST),
    # On a mesh: the kind of a transfer over several devices.
    (
        "numpy batch into a jit with replicated params",
        sighting(source="p, l = step(p, x)", shape=(64, 16), destination=REPLICATED),
        Cause.HOST_BATCH_REPLICATED,
    ),
    (
        "numpy batch into a sharded jit",
        sighting(source="p, l = step(p, x)", jitted_call="step", destination=SPLIT),
        Cause.HOST_BATCH_SPLIT,
    ),
    (
        "a python scalar replicated over the mesh keeps its own fix",
        sighting(source="y = x * 0.5", shape=(), destination=REPLICATED),
        Cause.EAGER_SCALAR,
    ),
    (
        "an uncommitted array resharded onto the mesh",
        sighting(D2D, "return add(x, offset)", destination=SPLIT),
        Cause.UNCOMMITTED_RESHARDED,
    ),
    (
        "np.asarray of an array split over the mesh",
        sighting(D2H, "a = np.asarray(x)", host_use="__array__", fetched_from=SPLIT),
        Cause.SHARDED_READ,
    ),
    (
        "float of a replicated loss is a plain conversion",
        sighting(D2H, "v = float(loss)", host_use="__float__", fetched_from=REPLICATED),
        Cause.CONVERTED,
    ),
    (
        "device_put of a sharded array to another sharding",
        sighting(D2H, "y = jax.device_put(x, whole)", host_use="shard_sharded_device_array"),
        Cause.RESHARD_THROUGH_HOST,
    ),
    (
        "with_sharding_constraint outside jit",
        sighting(source="x = jax.lax.with_sharding_constraint(batch, s)", destination=CONSTRAINED),
        Cause.CONSTRAINT_ON_HOST_ARRAY,
    ),
    (
        "a jitted helper constraining a host batch",
        sighting(source="x = shard(batch)", jitted_call="shard", destination=CONSTRAINED),
        Cause.CONSTRAINT_ON_HOST_ARRAY,
    ),
    (
        "reshard of a host array",
        sighting(source="x = jax.sharding.reshard(batch, s)", destination=CONSTRAINED),
        Cause.RESHARD_OF_HOST_ARRAY,
    ),
]


@pytest.mark.parametrize(("seen", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_transfer_gets_the_cause_that_fits(seen: Transfer, expected: Cause) -> None:
    assert cause_of(seen) is expected
    assert hint_for(seen) == _FIXES[expected]


def test_every_cause_has_a_case_and_a_fix_of_its_own() -> None:
    assert {c[2] for c in CASES} == set(Cause)
    assert set(_FIXES) == set(Cause)
    # No two kinds share a fix: a hint that fits two things fits neither well.
    assert len(set(_FIXES.values())) == len(Cause)


@pytest.mark.parametrize(
    "source",
    ["for x in batch:", "elif jnp.any(x):", "total = f(a,", "with open(p) as f:", "else:", "x ="],
)
def test_fragments_of_statements_are_read_or_left_alone(source: str) -> None:
    # A line that opens a block or a bracket is still read; one that is no
    # Python on its own gives the direction's fix rather than an exception.
    assert cause_of(sighting(D2H, source)) in set(Cause)


def test_the_guard_only_reading_follows_the_line_when_it_opens_a_block() -> None:
    assert cause_of(sighting(D2H, "elif float(loss) > 3:")) is Cause.CONVERTED
    assert cause_of(sighting(D2H, "for v in np.asarray(x):")) is Cause.NUMPY_READ


# --- through the real CLI: one region per kind, each finding with its own fix ----------------

KINDS = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def double(x):
    return x * 2


@jax.jit
def noisy(x):
    jax.debug.print("x {}", x)
    return x + 1


@jax.jit
def add(a, b):
    return a + b


def on_device():
    return (jax.device_put(jnp.arange(8.0)),)


def on_host():
    return (np.arange(8, dtype=np.float32),)


def both():
    return jax.device_put(jnp.arange(8.0)), np.ones(8, np.float32)


def two_devices():
    committed = jax.device_put(np.ones(4, np.float32), jax.devices()[1])
    return jnp.ones(4), committed


def jit_argument(x):
    return double(x)


def eager_scalar(x):
    return x * 0.5


def eager_index(x):
    return x[1:]


def eager_host_array(x, noise):
    return x + noise


def array_from_host(x):
    return jnp.asarray(x)


def printed(x):
    print(x)
    return x


def converted(x):
    total = float(x.sum())
    return x


def numpy_read(x):
    host = np.asarray(x)
    return x


def async_copy(x):
    x.copy_to_host_async()
    return x


def uncommitted(a, b):
    return add(a, b)


def host_callback(x):
    return noisy(x)


OFFSET = jnp.arange(8.0)  # made at import, a device array


@jax.jit
def closed_over(x):
    return x + OFFSET


def explicit_outside(x):
    host = jax.device_get(x)
    return x


def explicit_upload(x):
    return x + jax.device_put(np.float32(0.5))


def made_at_the_call(x):
    return add(x, jnp.float32(0.5))


def fetch(x):
    return jax.device_get(x)


def explicit_inside(x):
    host = fetch(x)
    return x
"""

# region -> (setup, the cause of its one failing finding); explicit_inside's finding is allowed.
KIND_REGIONS = {
    "jit_argument": ("on_host", Cause.JIT_ARGUMENT),
    "eager_scalar": ("on_device", Cause.EAGER_SCALAR),
    "eager_index": ("on_device", Cause.EAGER_INDEX),
    "eager_host_array": ("both", Cause.EAGER_HOST_ARRAY),
    "array_from_host": ("on_host", Cause.ARRAY_FROM_HOST),
    "printed": ("on_device", Cause.PRINTED),
    "converted": ("on_device", Cause.CONVERTED),
    "numpy_read": ("on_device", Cause.NUMPY_READ),
    "async_copy": ("on_device", Cause.ASYNC_COPY),
    "uncommitted": ("two_devices", Cause.UNCOMMITTED),
    "host_callback": ("on_device", Cause.HOST_CALLBACK),
    "closed_over": ("on_device", Cause.CLOSED_OVER_ARRAY),
    "explicit_outside": ("on_device", Cause.EXPLICIT_OUTSIDE_BOUNDARY),
    "explicit_upload": ("on_device", Cause.EXPLICIT_UPLOAD_OUTSIDE_BOUNDARY),
    "made_at_the_call": ("on_device", Cause.ARRAY_FROM_HOST),
    "explicit_inside": ("on_device", Cause.EXPLICIT_IN_BOUNDARY),
}


def test_a_real_run_gives_each_kind_its_own_fix(tmp_path: Path) -> None:
    regions = "".join(
        f"  - name: {name.replace('_', '-')}\n"
        f"    step: kinds:{name}\n"
        f"    setup: kinds:{setup}\n"
        + (
            "    guard: disallow_explicit\n    boundaries: [kinds:fetch]\n"
            if name.startswith("explicit")
            else ""
        )
        for name, (setup, _) in KIND_REGIONS.items()
    )
    repo = make_repo(
        tmp_path,
        {
            "kinds.py": KINDS,
            "policies/kinds.yaml": f"version: 1\nsuite: kinds\n{FAST_DEFAULTS}regions:\n{regions}",
        },
    )
    run = run_gate(repo, "run", "--no-baseline", "--json", "reports/map.json", devices=2)
    assert run.returncode == 1, run
    document = json.loads((repo / "reports/map.json").read_text())
    [suite] = document["suites"]
    by_region = {r["name"].replace("-", "_"): r for r in suite["regions"]}
    assert set(by_region) == set(KIND_REGIONS), run
    for name, (_, cause) in KIND_REGIONS.items():
        region = by_region[name]
        assert region["error"] is None, (name, region["error"], run)
        wanted = [
            t for t in region["transfers"] if t["failing"] != (cause is Cause.EXPLICIT_IN_BOUNDARY)
        ]
        assert [t["cause"] for t in wanted] == [cause.name.lower()], (name, region, run)
        assert wanted[0]["fix"] == _FIXES[cause], name
        if cause is not Cause.EXPLICIT_IN_BOUNDARY:
            # The reviewer reads the same fix in the JUnit failure body.
            body = run.testcase(f"{name.replace('_', '-')}: transfers").find("failure")
            assert body is not None, name
            assert f"fix: {_FIXES[cause]}" in (body.text or ""), (name, body.text)
    assert by_region["explicit_inside"]["status"] == "passed", run


def test_a_mesh_hint_names_the_meshs_own_axis() -> None:
    batch_mesh = Placement("P()", 8, 1, "'batch': 8")
    upload = sighting(source="state = step(state, x)", jitted_call="step", destination=batch_mesh)
    assert cause_of(upload) is Cause.HOST_BATCH_REPLICATED
    assert hint_for(upload).endswith("jax.device_put(batch, NamedSharding(mesh, P('batch')))")
    on_data = sighting(source="state = step(state, x)", jitted_call="step", destination=REPLICATED)
    assert hint_for(on_data).endswith("jax.device_put(batch, NamedSharding(mesh, P('data')))")
