"""Real sharded training steps on 8 CPU devices, each a region run through the real CLI.

Adapted from flax's examples/nnx_toy_examples/04_data_parallel_with_jit.py (replicated
NNX model, data split on 'data') and 10_fsdp_and_optimizer.py (parameters split on 'model'
of a 2x4 mesh), JAX's examples/spmd_mnist_classifier_fromscratch.py (Explicit mesh axes,
donated replicated params) and a shard_map step (Auto axes, psum of the gradients): the
examples train in a loop and plot, so their train steps are wrapped as steps and their
setup code as setups. For each, one gate run shows:

- the clean step passes with nothing to say (no note about setup's arrays either: an NNX
  module put back with fresh arrays is no reuse);
- a planted NumPy batch fails once per array, saying where it went ("replicated to 8
  devices, P()" or "split 8 ways over 8 devices, P('data')");
- a planted float(loss) or np.asarray of a sharded array fails at its line, the same on
  JAX 0.10 (the gate's detector) and 0.12 (JAX's guard too), saying which saw it;
- the counts and bytes per step are JAX's own: its guard's lines (`truth.py`, in a process
  of its own) divided by the destination's devices, and each device's part of the array;
- the same code on one device reports exactly as many transfers per step.

Beside them, what else a mesh makes easy to get wrong: jax.device_put of a sharded array
(a round trip through the host that JAX 0.12 refuses), the two "explicit sharding" idioms
that are implicit uploads, an uncommitted array resharded, and a jit refusing a sharding.
conftest marks these `jaxhooks` (tests/jax_hooks.py), so CI runs them on the oldest and the
newest JAX.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import GateRun, gate_env, line_of, make_repo, run_gate
from processes import run

MESH_STEPS = r'''
"""Real sharded training steps, adapted as regions: flax NNX data parallel and FSDP, JAX's
SPMD MNIST, and a shard_map step. Meshes are made on first use, sized to the devices there
are (the gate imports this module in its own process, where there is one)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # JAX before shard_map left experimental
    from jax.experimental.shard_map import shard_map


def numpy_batch(features, rows=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(rows, features)).astype(np.float32)
    return x, (0.8 * x[:, :1] ** 2 + 0.1).astype(np.float32)


# -- flax examples/nnx_toy_examples/04_data_parallel_with_jit.py --------------------------


@functools.cache
def dp_mesh():
    return jax.sharding.Mesh(np.array(jax.devices()), ("data",))


class MLP(nnx.Module):
    def __init__(self, din, dmid, dout, *, rngs):
        self.linear1 = nnx.Linear(din, dmid, rngs=rngs)
        self.linear2 = nnx.Linear(dmid, dout, rngs=rngs)

    def __call__(self, x):
        return self.linear2(nnx.relu(self.linear1(x)))


@functools.cache
def dp_model():
    # Made once, as the example does; setup puts fresh replicated state into it each run.
    model = MLP(2, 64, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    initial = jax.tree.map(np.asarray, nnx.state((model, optimizer)))
    return model, optimizer, initial


@nnx.jit
def dp_train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((y - model(x)) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def dp_replicated():
    model, optimizer, initial = dp_model()
    state = jax.device_put(initial, NamedSharding(dp_mesh(), P()))
    nnx.update((model, optimizer), state)
    return model, optimizer


def dp_setup():
    x, y = jax.device_put(numpy_batch(2), NamedSharding(dp_mesh(), P("data")))
    return (*dp_replicated(), x, y)


def dp_numpy_setup():
    return (*dp_replicated(), *numpy_batch(2))


def dp_step(model, optimizer, x, y):
    loss = dp_train_step(model, optimizer, x, y)  # dp: call
    return model, optimizer, loss


def dp_float_step(model, optimizer, x, y):
    loss = dp_train_step(model, optimizer, x, y)
    history = [float(loss)]  # dp: float
    return model, optimizer, loss


# -- flax examples/nnx_toy_examples/10_fsdp_and_optimizer.py ------------------------------


@functools.cache
def fsdp_mesh():
    devices = np.array(jax.devices())
    # The example's (2, 4) mesh; (1, 1) where the same code runs on one device.
    return jax.sharding.Mesh(devices.reshape(min(2, devices.size), -1), ("data", "model"))


class FSDPMLP(nnx.Module):
    def __init__(self, din, dmid, dout, rngs):
        init = nnx.initializers.lecun_normal()
        self.w1 = nnx.Param(init(rngs.params(), (din, dmid)), out_sharding=(None, "model"))
        self.b1 = nnx.Param(jnp.zeros((dmid,)), out_sharding=("model",))
        self.w2 = nnx.Param(init(rngs.params(), (dmid, dout)), out_sharding=("model", None))

    def __call__(self, x):
        return nnx.relu(x @ self.w1 + self.b1) @ self.w2


class SGDState(nnx.Variable):
    pass


class SGD(nnx.Pytree):
    def __init__(self, params, lr, decay=0.9):
        def init_optimizer_state(variable):
            return SGDState(jnp.zeros_like(variable.value), **variable.get_metadata())

        self.lr = lr
        self.params = nnx.data(params)
        self.momentum = nnx.data(
            jax.tree.map(
                init_optimizer_state, self.params, is_leaf=lambda x: isinstance(x, nnx.Variable)
            )
        )
        self.decay = decay

    def update(self, grads):
        def update_fn(params, momentum, grad):
            momentum[...] = self.decay * momentum[...] + (1 - self.decay) * grad[...]
            params[...] -= self.lr * momentum[...]

        jax.tree.map(
            update_fn,
            self.params,
            self.momentum,
            grads,
            is_leaf=lambda x: isinstance(x, nnx.Variable),
        )


@nnx.jit
def fsdp_create():
    model = FSDPMLP(2, 32, 1, rngs=nnx.Rngs(0))
    return model, SGD(nnx.variables(model, nnx.Param), 0.01, decay=0.9)


def fsdp_model():
    with jax.set_mesh(fsdp_mesh()):
        return fsdp_create()


@nnx.jit
def fsdp_train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((y - model(x)) ** 2)

    loss, grad = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(grad)
    return loss


def fsdp_setup():
    x, y = jax.device_put(numpy_batch(2, rows=32), NamedSharding(fsdp_mesh(), P("data")))
    return (*fsdp_model(), x, y)


def fsdp_numpy_setup():
    return (*fsdp_model(), *numpy_batch(2, rows=32))


def fsdp_step(model, optimizer, x, y):
    loss = fsdp_train_step(model, optimizer, x, y)  # fsdp: call
    return model, optimizer, loss


def fsdp_float_step(model, optimizer, x, y):
    loss = fsdp_train_step(model, optimizer, x, y)
    losses = [float(loss)]  # fsdp: float
    return model, optimizer, loss


# -- JAX examples/spmd_mnist_classifier_fromscratch.py ------------------------------------

LAYER_SIZES = [64, 32, 10]  # the example's [784, 1024, 1024, 10], cut for a CPU test
STEP_SIZE = 0.001


@functools.cache
def mnist_mesh():
    return jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Explicit,))


def init_random_params(scale, layer_sizes, rng):
    return [
        (scale * rng.randn(m, n).astype(np.float32), scale * rng.randn(n).astype(np.float32))
        for m, n in zip(layer_sizes[:-1], layer_sizes[1:])
    ]


def predict(params, inputs):
    activations = inputs
    for w, b in params[:-1]:
        activations = jnp.tanh(jnp.dot(activations, w) + b)
    final_w, final_b = params[-1]
    logits = jnp.dot(activations, final_w) + final_b
    return logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)


def mnist_loss(params, batch):
    inputs, targets = batch
    return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=1))


@functools.partial(jax.jit, donate_argnums=0)
def mnist_train_step(params, batch):
    grads = jax.grad(mnist_loss)(params, batch)
    return [(w - STEP_SIZE * dw, b - STEP_SIZE * db) for (w, b), (dw, db) in zip(params, grads)]


def mnist_numpy():
    rng = np.random.RandomState(0)
    params = init_random_params(0.1, LAYER_SIZES, rng)
    images = rng.randn(32, LAYER_SIZES[0]).astype(np.float32)
    labels = np.eye(LAYER_SIZES[-1], dtype=np.float32)[rng.randint(0, LAYER_SIZES[-1], 32)]
    return params, images, labels


def mnist_setup():
    params, images, labels = mnist_numpy()
    mesh = mnist_mesh()
    replicated = jax.device_put(params, NamedSharding(mesh, P()))
    batch = jax.device_put((images, labels), NamedSharding(mesh, P("batch")))
    return replicated, batch


def mnist_numpy_setup():
    params, images, labels = mnist_numpy()
    return jax.device_put(params, NamedSharding(mnist_mesh(), P())), (images, labels)


def mnist_step(params, batch):
    with jax.set_mesh(mnist_mesh()):
        params = mnist_train_step(params, batch)  # mnist: call
    return params


def mnist_read_step(params, batch):
    with jax.set_mesh(mnist_mesh()):
        params = mnist_train_step(params, batch)
    seen = np.asarray(batch[0]).mean()  # mnist: read
    return params


# -- a shard_map step: data parallel by hand, gradients summed with psum --------------------


@functools.cache
def manual_mesh():
    return jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))


def _local_update(w, x, y):
    def loss(w):
        return jnp.sum((x @ w - y) ** 2)

    grad = jax.lax.psum(jax.grad(loss)(w), "data")
    return w - 0.01 * grad, jax.lax.psum(loss(w), "data")


@functools.cache
def manual_train_step():
    return jax.jit(
        shard_map(
            _local_update,
            mesh=manual_mesh(),
            in_specs=(P(), P("data"), P("data")),
            out_specs=(P(), P()),
        )
    )


def manual_numpy():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 1)).astype(np.float32)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    return w, x, (x @ np.ones((8, 1), np.float32)).astype(np.float32)


def manual_setup():
    w, x, y = manual_numpy()
    mesh = manual_mesh()
    return (
        jax.device_put(w, NamedSharding(mesh, P())),
        *jax.device_put((x, y), NamedSharding(mesh, P("data"))),
    )


def manual_numpy_setup():
    w, x, y = manual_numpy()
    return jax.device_put(w, NamedSharding(manual_mesh(), P())), x, y


def manual_step(w, x, y):
    train = manual_train_step()
    w, loss = train(w, x, y)  # manual: call
    return w, loss


def manual_float_step(w, x, y):
    train = manual_train_step()
    w, loss = train(w, x, y)
    total = float(loss)  # manual: float
    return w, loss


# -- what else a mesh makes easy to get wrong --------------------------------------------


def split_setup():
    return (jax.device_put(manual_numpy()[1], NamedSharding(mnist_mesh(), P("batch"))),)


def host_setup():
    return (manual_numpy()[1],)


def reshard_by_put(x):
    whole = jax.device_put(x, NamedSharding(mnist_mesh(), P()))  # idioms: put
    return whole


def shard_batch(x):
    return jax.lax.with_sharding_constraint(x, NamedSharding(manual_mesh(), P("data")))


def constraint_helper(x):
    sharded = shard_batch(x)
    return sharded


def reshard_host_array(x):
    sharded = jax.sharding.reshard(x, NamedSharding(mnist_mesh(), P("batch")))  # idioms: reshard
    return sharded


@jax.jit
def add(a, b):
    return a + b


def offset_setup():
    (x,) = split_setup()
    return x, jnp.ones(x.shape, x.dtype)  # uncommitted: made without a device


def offset_step(x, offset):
    moved = add(x, offset)  # idioms: offset
    return moved


@functools.cache
def take_replicated():
    return jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mnist_mesh(), P()))


def mismatch_step(x):
    double = take_replicated()
    doubled = double(x)  # idioms: mismatch
    return doubled


def fetch_metrics(x):
    return jax.device_get(x)  # idioms: device_get


def fetching_step(x):
    host = fetch_metrics(x)
    return x
'''

TRUTH = r'''
"""What JAX's own guard logs for one step of each planted region: its truth, per step.

Run with 8 devices; prints JSON. Each region's step runs once to compile, then once on
fresh inputs under jax.transfer_guard("log") with fd 2 in a file. A host-to-device line
names the global aval and the destination; JAX writes one per device that receives a part,
so a transfer is that many lines, and what lands is each device's part, as JAX's own
NamedSharding.shard_shape says. A device-to-host line (JAX 0.12) is one whole array.
"""

import json
import os
import re
import sys
import tempfile
from collections import Counter

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import mesh_steps as m

PLANTED = {
    "dp-numpy": (m.dp_step, m.dp_numpy_setup, m.dp_mesh),
    "dp-float": (m.dp_float_step, m.dp_setup, m.dp_mesh),
    "fsdp-numpy": (m.fsdp_step, m.fsdp_numpy_setup, m.fsdp_mesh),
    "fsdp-float": (m.fsdp_float_step, m.fsdp_setup, m.fsdp_mesh),
    "mnist-numpy": (m.mnist_step, m.mnist_numpy_setup, m.mnist_mesh),
    "mnist-read": (m.mnist_read_step, m.mnist_setup, m.mnist_mesh),
    "manual-numpy": (m.manual_step, m.manual_numpy_setup, m.manual_mesh),
    "manual-float": (m.manual_float_step, m.manual_setup, m.manual_mesh),
}
DIRECTION = re.compile(r"\] (host-to-device|device-to-host|device-to-device) transfer: (.*)$")
AVAL = re.compile(r"aval=ShapedArray\((\w+)\[([0-9,]*)\]")
SPEC = re.compile(r"spec=(P\(.*?\)), memory_kind")
HOST = re.compile(r"shape=\(([0-9,]*)\), dtype=(\w+)")
XLA = {"F32": "float32", "S32": "int32"}


def guard_lines(step, setup):
    jax.block_until_ready(step(*setup()))
    inputs = setup()
    with tempfile.TemporaryFile("w+") as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            with jax.transfer_guard("log"):
                jax.block_until_ready(step(*inputs))
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        return [line.rstrip("\n") for line in log]


def per_step(lines, mesh):
    found = Counter()
    for line in lines:
        said = DIRECTION.search(line)
        if said is None:
            continue
        direction, text = said.groups()
        aval, spec, host = AVAL.search(text), SPEC.search(text), HOST.search(text)
        if aval is not None and spec is not None:
            dtype, shape = aval[1], tuple(int(d) for d in aval[2].split(",") if d)
            sharding = NamedSharding(mesh, eval(spec[1], {"P": P}))
            devices = len(sharding.device_set)
            part = int(np.prod(sharding.shard_shape(shape))) * np.dtype(dtype).itemsize
            found[(direction, dtype, shape, devices, part * devices)] += 1
        elif host is not None:
            dtype, shape = XLA[host[2]], tuple(int(d) for d in host[1].split(",") if d)
            size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            found[(direction, dtype, shape, 1, size)] += 1
        else:
            raise AssertionError(f"a guard line this script cannot read: {line}")
    return [
        {"direction": d, "dtype": t, "shape": list(s), "per_step": n // devices, "bytes": b}
        for (d, t, s, devices, b), n in sorted(found.items())
    ]


found = {}
for name, (step, setup, mesh) in PLANTED.items():
    found[name] = per_step(guard_lines(step, setup), mesh())
print(json.dumps(found))
'''

MODELS = ("dp", "fsdp", "mnist", "manual")
# Each model's planted fetch: float(loss), or np.asarray of the batch split over the mesh.
FETCH = {"dp": "float", "fsdp": "float", "mnist": "read", "manual": "float"}
# A NumPy batch's arrays, and where each went: replicated beside replicated (or FSDP's
# 'model'-split) parameters, split where shard_map's in_specs split it.
BATCH = {
    "dp": ([("float32", [16, 2]), ("float32", [16, 1])], "replicated to 8 devices, P()"),
    "fsdp": ([("float32", [32, 2]), ("float32", [32, 1])], "replicated to 8 devices, P()"),
    "mnist": ([("float32", [32, 64]), ("float32", [32, 10])], "replicated to 8 devices, P()"),
    "manual": (
        [("float32", [64, 8]), ("float32", [64, 1])],
        "split 8 ways over 8 devices, P('data')",
    ),
}
DEFAULTS = "defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}\n"


def _regions(planted_only: bool) -> list[tuple[str, str, str]]:
    found = []
    for model in MODELS:
        fetch = FETCH[model]
        if not planted_only:
            found.append((model, f"{model}_step", f"{model}_setup"))
        found.append((f"{model}-numpy", f"{model}_step", f"{model}_numpy_setup"))
        found.append((f"{model}-{fetch}", f"{model}_{fetch}_step", f"{model}_setup"))
    return found


IDIOMS = [
    ("reshard-by-put", "reshard_by_put", "split_setup"),
    ("constraint-helper", "constraint_helper", "host_setup"),
    ("reshard-host-array", "reshard_host_array", "host_setup"),
    ("offset", "offset_step", "offset_setup"),
    ("mismatch", "mismatch_step", "split_setup"),
    ("device-get", "fetching_step", "split_setup"),
]


def policy(suite: str, devices: int, regions: list[tuple[str, str, str]]) -> str:
    def boundary(name: str) -> str:
        return ", boundaries: [mesh_steps:fetch_metrics]" if name == "device-get" else ""

    listed = "".join(
        f"  - {{name: {name}, step: mesh_steps:{step}, setup: mesh_steps:{setup}"
        f"{boundary(name)}}}\n"
        for name, step, setup in regions
    )
    flags = f"--xla_force_host_platform_device_count={devices}"
    return f"version: 1\nsuite: {suite}\nenv:\n  XLA_FLAGS: {flags}\n{DEFAULTS}regions:\n{listed}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(
        tmp_path_factory.mktemp("mesh-steps"),
        {
            "mesh_steps.py": MESH_STEPS,
            "truth.py": TRUTH,
            "policies/mesh8.yaml": policy("mesh8", 8, _regions(planted_only=False)),
            "policies/mesh1.yaml": policy("mesh1", 1, _regions(planted_only=True)),
            "policies/idioms.yaml": policy("idioms", 8, IDIOMS),
        },
    )


@pytest.fixture(scope="module")
def gate(repo: Path) -> GateRun:
    """One gate run of every region: 8 devices, the same code on one, and the idioms."""
    return run_gate(repo, "run", "policies", "--no-baseline", "--json", "reports/mesh.json")


@pytest.fixture(scope="module")
def truth(repo: Path) -> dict[str, list[dict[str, Any]]]:
    """What JAX's own guard logs per step of each planted region, on 8 devices."""
    done = run([sys.executable, "truth.py"], cwd=repo, env=gate_env(8), timeout=240)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def region(gate: GateRun, suite: str, name: str) -> dict[str, Any]:
    report = json.loads((gate.report.parent / "mesh.json").read_text())
    [found] = [
        r for s in report["suites"] if s["name"] == suite for r in s["regions"] if r["name"] == name
    ]
    return found  # type: ignore[no-any-return]


def failing(gate: GateRun, suite: str, name: str) -> list[dict[str, Any]]:
    return [t for t in region(gate, suite, name)["transfers"] if t["failing"]]


@pytest.mark.parametrize("model", MODELS)
def test_a_clean_sharded_step_passes_with_nothing_to_say(gate: GateRun, model: str) -> None:
    found = region(gate, "mesh8", model)
    assert found["status"] == "passed", gate
    assert found["transfers"] == [], found
    # An NNX model put back with fresh replicated arrays is no reuse of the last run's.
    assert found["notes"] == [], found


@pytest.mark.parametrize("model", MODELS)
def test_a_numpy_batch_fails_once_per_array_saying_where_it_went(
    repo: Path, gate: GateRun, model: str
) -> None:
    arrays, where = BATCH[model]
    moved = failing(gate, "mesh8", f"{model}-numpy")
    assert sorted((t["dtype"], t["shape"]) for t in moved) == sorted(arrays), moved
    line = line_of(repo / "mesh_steps.py", f"# {model}: call")
    for finding in moved:
        assert (finding["direction"], finding["line"], finding["per_step"]) == (
            "host-to-device",
            line,
            1,
        ), finding
        assert finding["destination"]["words"] == where, finding
    cause = "host_batch_replicated" if where.startswith("replicated") else "host_batch_split"
    assert {t["cause"] for t in moved} == {cause}


@pytest.mark.parametrize("model", MODELS)
def test_a_host_read_of_a_sharded_value_fails_at_its_line_saying_who_saw_it(
    repo: Path, gate: GateRun, truth: dict[str, list[dict[str, Any]]], model: str
) -> None:
    fetch = FETCH[model]
    [finding] = failing(gate, "mesh8", f"{model}-{fetch}")
    line = line_of(repo / "mesh_steps.py", f"# {model}: {fetch}")
    assert (finding["direction"], finding["line"], finding["per_step"]) == (
        "device-to-host",
        line,
        1,
    ), finding
    # JAX 0.12's guard logs (and refuses) reading an array split over CPU devices; 0.10's
    # never does. The verdict is the same; the report says which witnesses saw it.
    guard_saw = any(t["direction"] == "device-to-host" for t in truth[f"{model}-{fetch}"])
    assert finding["seen_by"].startswith("JAX's transfer-guard log") is guard_saw, finding
    assert "the gate's detector" in finding["seen_by"], finding
    split = fetch == "read"
    assert finding["cause"] == ("sharded_read" if split else "converted"), finding
    words = finding["fetched_from"]["words"]
    assert words == (
        "split 8 ways over 8 devices, P('batch')" if split else "replicated to 8 devices, P()"
    )


@pytest.mark.parametrize("name", [n for n, _, _ in _regions(planted_only=True)])
def test_counts_and_bytes_per_step_are_what_jaxs_own_guard_logs(
    gate: GateRun, truth: dict[str, list[dict[str, Any]]], name: str
) -> None:
    # JAX's lines divided by the destination's devices, and each device's part summed: what
    # the gate reports per step, where JAX's guard sees it at all (device-to-host on CPU
    # only from 0.12: the detector alone sees it on 0.10, as the test above shows).
    seen = {t["direction"] for t in truth[name]}
    fields = ("direction", "dtype", "shape", "per_step", "bytes")
    reported = sorted(
        [t[f] for f in fields] for t in failing(gate, "mesh8", name) if t["direction"] in seen
    )
    assert reported == sorted([t[f] for f in fields] for t in truth[name]), gate
    assert reported or name.endswith(("-float", "-read")), name


def test_eight_devices_report_as_many_transfers_per_step_as_one(gate: GateRun) -> None:
    for name, _, _ in _regions(planted_only=True):
        eight, one = (
            sorted(
                (t["line"], t["direction"], t["dtype"], t["shape"], t["per_step"], t["first_call"])
                for t in failing(gate, suite, name)
            )
            for suite in ("mesh8", "mesh1")
        )
        assert eight == one, name
        # One device is no mesh: nothing to say about where it went.
        assert all(t["destination"] is None for t in failing(gate, "mesh1", name)), name


def test_device_put_of_a_sharded_array_is_a_round_trip_through_the_host(
    repo: Path, gate: GateRun
) -> None:
    # On 0.10 the gate's detector sees the read, on 0.12 JAX's guard too (and refuses it
    # under disallow, jax-ml/jax#40285); the upload back is explicit, and allowed.
    found = region(gate, "idioms", "reshard-by-put")["transfers"]
    [read] = [t for t in found if t["failing"]]
    assert (read["direction"], read["kind"], read["cause"]) == (
        "device-to-host",
        "implicit",
        "reshard_through_host",
    ), read
    assert read["line"] == line_of(repo / "mesh_steps.py", "# idioms: put")
    assert "jax.sharding.reshard(x, sharding)" in read["fix"]
    [back] = [t for t in found if not t["failing"]]
    assert (back["direction"], back["kind"], back["destination"]["words"]) == (
        "host-to-device",
        "explicit",
        "replicated to 8 devices, P()",
    )
    assert back["bytes"] == 8 * back["array_bytes"]
    out = gate.stdout
    assert "by jax.device_put of a sharded array to another sharding, a round trip" in out, gate


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("constraint-helper", "constraint_on_host_array"),
        ("reshard-host-array", "reshard_of_host_array"),
    ],
)
def test_the_explicit_looking_sharding_idioms_are_named_uploads(
    gate: GateRun, name: str, cause: str
) -> None:
    [upload] = failing(gate, "idioms", name)
    assert (upload["direction"], upload["kind"], upload["cause"], upload["per_step"]) == (
        "host-to-device",
        "implicit",
        cause,
        1,
    ), upload
    assert upload["destination"]["words"] == "split 8 ways over 8 devices, {devices=[8,1]<=[8]}"
    assert "jax.device_put(x, NamedSharding(mesh, spec))" in upload["fix"]


def test_an_uncommitted_array_is_resharded_once_a_step(repo: Path, gate: GateRun) -> None:
    [moved] = failing(gate, "idioms", "offset")
    assert (moved["direction"], moved["cause"], moved["per_step"]) == (
        "device-to-device",
        "uncommitted_resharded",
        1,
    ), moved
    assert moved["line"] == line_of(repo / "mesh_steps.py", "# idioms: offset")
    assert moved["destination"]["words"] == "split 8 ways over 8 devices, P('batch')"


def test_a_sharding_jit_refuses_is_one_error_naming_argument_shardings_and_line(
    repo: Path, gate: GateRun
) -> None:
    error = region(gate, "idioms", "mismatch")["error"]
    assert error["kind"] == "sharding", error
    assert "shardings don't match: argument 'a' float32[64@batch,8]" in gate.stdout, gate
    assert error["line"] == line_of(repo / "mesh_steps.py", "# idioms: mismatch")
    assert error["message"] == (
        "argument 'a' float32[64@batch,8] of take_replicated.<locals>.<lambda> is sharded "
        "P('batch') (split 8 ways over 8 devices), but the jitted function's in_shardings say "
        "P() (replicated to 8 devices): jax.jit does not move a committed array to another "
        "sharding for you"
    )


def test_jax_device_get_of_a_split_array_stays_explicit_in_its_boundary(
    repo: Path, gate: GateRun
) -> None:
    # JAX 0.12's guard logs this read too; inside jax.device_get it is explicit (unlike
    # the read inside jax.device_put above), and a declared boundary allows it.
    found = region(gate, "idioms", "device-get")
    assert found["status"] == "passed", gate
    [read] = found["transfers"]
    assert (read["direction"], read["kind"], read["boundary"], read["failing"]) == (
        "device-to-host",
        "explicit",
        "mesh_steps:fetch_metrics",
        False,
    ), read
    assert read["line"] == line_of(repo / "mesh_steps.py", "# idioms: device_get")


def test_the_terminal_and_junit_say_where_a_batch_went_and_what_landed(gate: GateRun) -> None:
    assert (
        "implicit host-to-device float32[16,2] (replicated to 8 devices, P()), 1x per step"
        in gate.stdout
    ), gate
    [case] = [
        c
        for c in gate.junit().iter("testcase")
        if c.get("classname") == "mesh8.dp-numpy" and c.get("name") == "dp-numpy: transfers"
    ]
    failure = case.find("failure")
    assert failure is not None, gate
    body = failure.text or ""
    # float32[16,2] is 128 bytes; replicated to 8 devices, 8 copies land.
    lands = "lands: replicated to 8 devices, P() (mesh 'data': 8): 1024 bytes a transfer"
    assert f"{lands} (8 copies of 128)" in body, body
