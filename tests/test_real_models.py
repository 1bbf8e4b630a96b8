"""Real training steps as regions: flax Linen, flax NNX, optax, equinox.

Each model is tiny (a Dense 4->2, batch 8) and written the way a project
writes it: static parts (the model definition, the optimizer) made once at
import, fresh arrays (parameters, optimizer state, batch) made by setup
before every run. One gate run covers every model per scenario:

- clean steps pass, with finite and reference checks on the outputs (which
  hold functions, ``custom_jvp`` objects, a typed PRNG key, graph defs);
- a planted ``float(loss)`` fails at its line (device-to-host, seen on CPU
  by the gate's detector);
- a NumPy batch fails at the line that calls the jitted function.

Beside them: a TrainState left with its Python ``step`` (what the setup advice in
docs/policy.md prevents), a hand-written dict of mixed leaves, and a step with no
array at all (still refused).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, line_of, make_repo, run_gate

from gate.region.checks import load_reference

MODELS = """
import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import nnx
from flax.training import train_state


def numpy_batch():
    rng = np.random.default_rng(0)
    image = rng.normal(size=(8, 4)).astype(np.float32)
    labels = rng.integers(0, 2, size=8).astype(np.int32)
    return image, labels


def device_batch():
    return tuple(jax.device_put(a) for a in numpy_batch())


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


# -- flax Linen: TrainState + optax -----------------------------------------------

# Made once: a fresh optax.adam() per run is a new static argument of the
# jitted step, which would then compile again on every run.
LINEN_MODEL = nn.Dense(2)
LINEN_TX = optax.adam(1e-2)


def linen_fresh_state():
    params = LINEN_MODEL.init(jax.random.key(0), jnp.ones((1, 4)))["params"]
    return train_state.TrainState.create(apply_fn=LINEN_MODEL.apply, params=params, tx=LINEN_TX)


def linen_state():
    # TrainState.create leaves `step` a Python 0: on the device with the rest.
    return jax.device_put(linen_fresh_state())


@jax.jit
def linen_train(state, image, labels):
    def loss_fn(params):
        return cross_entropy(state.apply_fn({"params": params}, image), labels)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def linen_setup():
    return (linen_state(), *device_batch())


def linen_numpy_setup():
    return (linen_state(), *numpy_batch())


def linen_python_step_setup():
    return (linen_fresh_state(), *device_batch())


def linen_step(state, image, labels):
    state, loss = linen_train(state, image, labels)  # linen: call
    return state, loss


def linen_float_step(state, image, labels):
    state, loss = linen_train(state, image, labels)
    if float(loss) > 1e6:  # linen: float
        raise RuntimeError("diverged")
    return state, loss


# -- flax NNX: nnx.Optimizer + nnx.jit ---------------------------------------------

NNX_TX = optax.adam(1e-2)


class Classifier(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(4, 2, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)  # keeps an RNG stream: a typed key

    def __call__(self, x):
        return self.dropout(self.dense(x))


def nnx_model_and_optimizer():
    model = Classifier(nnx.Rngs(0))
    return model, nnx.Optimizer(model, NNX_TX, wrt=nnx.Param)


def nnx_loss(model, image, labels):
    return cross_entropy(model(image), labels)


@nnx.jit
def nnx_train(model, optimizer, image, labels):
    loss, grads = nnx.value_and_grad(nnx_loss)(model, image, labels)
    optimizer.update(model, grads)
    return loss


def nnx_setup():
    return (*nnx_model_and_optimizer(), *device_batch())


def nnx_numpy_setup():
    return (*nnx_model_and_optimizer(), *numpy_batch())


def nnx_step(model, optimizer, image, labels):
    loss = nnx_train(model, optimizer, image, labels)  # nnx: call
    return model, optimizer, loss


def nnx_float_step(model, optimizer, image, labels):
    loss = nnx_train(model, optimizer, image, labels)
    if float(loss) > 1e6:  # nnx: float
        raise RuntimeError("diverged")
    return model, optimizer, loss


# -- flax NNX: the end of an epoch in flax's examples/mnist/train.py ----------------
# Metrics computed and reset, then logged with `* 100`: the same eager op on a Python scalar
# at two lines, the second on jit's fast path; and metrics.reset()'s jnp.array(0) twice.


def nnx_metrics_loss(model, image, labels):
    logits = model(image)
    return cross_entropy(logits, labels), logits


@nnx.jit
def nnx_metrics_train(model, optimizer, metrics, image, labels):
    grad_fn = nnx.value_and_grad(nnx_metrics_loss, has_aux=True)
    (loss, logits), grads = grad_fn(model, image, labels)
    metrics.update(loss=loss, logits=logits, labels=labels)
    optimizer.update(model, grads)


@nnx.jit
def nnx_metrics_eval(model, metrics, image, labels):
    loss, logits = nnx_metrics_loss(model, image, labels)
    metrics.update(loss=loss, logits=logits, labels=labels)


def nnx_epoch_setup():
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    return (*nnx_model_and_optimizer(), metrics, *device_batch())


def nnx_epoch_step(model, optimizer, metrics, image, labels):
    nnx_metrics_train(model, optimizer, metrics, image, labels)
    train_metrics = metrics.compute()
    metrics.reset()  # nnx: first reset
    nnx_metrics_eval(model, metrics, image, labels)
    eval_metrics = metrics.compute()
    metrics.reset()  # nnx: second reset
    logging.info(
        "train_loss: %.4f, train_accuracy: %.2f, test_loss: %.4f, test_accuracy: %.2f"
        % (
            train_metrics["loss"],
            train_metrics["accuracy"] * 100,  # nnx: train accuracy
            eval_metrics["loss"],
            eval_metrics["accuracy"] * 100,  # nnx: test accuracy
        )
    )
    return model, optimizer, metrics


# -- flax NNX: nnx.split / nnx.merge + jax.jit, returning (graphdef, state) ----------


@jax.jit
def split_train(graphdef, state, image, labels):
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(nnx_loss)(model, image, labels)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


def split_setup():
    return (*nnx.split(nnx_model_and_optimizer()), *device_batch())


def split_numpy_setup():
    return (*nnx.split(nnx_model_and_optimizer()), *numpy_batch())


def split_step(graphdef, state, image, labels):
    state, loss = split_train(graphdef, state, image, labels)  # split: call
    return graphdef, state, loss


def split_float_step(graphdef, state, image, labels):
    state, loss = split_train(graphdef, state, image, labels)
    if float(loss) > 1e6:  # split: float
        raise RuntimeError("diverged")
    return graphdef, state, loss


# -- optax alone: adam, a jitted update --------------------------------------------

OPTAX_TX = optax.adam(1e-2)


def optax_params():
    params = {"w": jnp.full((4, 2), 0.1), "b": jnp.zeros(2)}
    return params, OPTAX_TX.init(params)  # (ScaleByAdamState, EmptyState)


@jax.jit
def optax_train(params, opt_state, image, labels):
    def loss_fn(params):
        return cross_entropy(image @ params["w"] + params["b"], labels)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = OPTAX_TX.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def optax_setup():
    return (*optax_params(), *device_batch())


def optax_numpy_setup():
    return (*optax_params(), *numpy_batch())


def optax_step(params, opt_state, image, labels):
    params, opt_state, loss = optax_train(params, opt_state, image, labels)  # optax: call
    return params, opt_state, loss


def optax_float_step(params, opt_state, image, labels):
    params, opt_state, loss = optax_train(params, opt_state, image, labels)
    if float(loss) > 1e6:  # optax: float
        raise RuntimeError("diverged")
    return params, opt_state, loss


# -- equinox: eqx.filter_jit, returning the model and its optimizer state ------------

EQX_TX = optax.adam(1e-2)


def eqx_model_and_state():
    # depth=0 is one Linear 4->2; the model still holds its activations
    # (jax.nn.relu, a custom_jvp, and a lambda) as pytree leaves.
    model = eqx.nn.MLP(4, 2, width_size=8, depth=0, key=jax.random.key(0))
    return model, EQX_TX.init(eqx.filter(model, eqx.is_array))


@eqx.filter_jit
def eqx_train(model, opt_state, image, labels):
    def loss_fn(model):
        return cross_entropy(jax.vmap(model)(image), labels)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = EQX_TX.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def eqx_setup():
    return (*eqx_model_and_state(), *device_batch())


def eqx_numpy_setup():
    return (*eqx_model_and_state(), *numpy_batch())


def eqx_step(model, opt_state, image, labels):
    model, opt_state, loss = eqx_train(model, opt_state, image, labels)  # eqx: call
    return model, opt_state, loss


def eqx_float_step(model, opt_state, image, labels):
    model, opt_state, loss = eqx_train(model, opt_state, image, labels)
    if float(loss) > 1e6:  # eqx: float
        raise RuntimeError("diverged")
    return model, opt_state, loss


def eqx_check(outputs):
    # The custom check gets the whole model back: arrays on the host, the rest as it was.
    model, _, loss = outputs
    assert isinstance(model.layers[0].weight, np.ndarray), type(model.layers[0].weight)
    assert model.activation is jax.nn.relu
    assert float(loss) > 0.0


@jax.jit
def scale(image):
    return image * 0.5


def mixed_step(image, labels):
    # What a hand-written step might return next to its arrays.
    return {
        "image": scale(image),
        "name": "run-1",
        "tags": np.array(["warm", None], dtype=object),
        "lr": 0.1,
        "loss_fn": cross_entropy,
    }


def no_arrays_step():
    return jax.nn.relu, "done"
"""

MODEL_NAMES = ("linen", "nnx", "split", "optax", "eqx")
# Outputs with more than arrays in them (a typed PRNG key, a graph def,
# functions): their references must hold the same leaves when written and compared.
WITH_REFERENCES = ("nnx", "split", "eqx", "mixed")
# Array leaves of each clean step's outputs: what the checks see.
ARRAY_LEAVES = {"linen": 9, "nnx": 11, "split": 11, "optax": 8, "eqx": 8}


def region(name: str, step: str, setup: str, extra: str = "") -> str:
    return f"  - name: {name}\n    step: models:{step}\n    setup: models:{setup}\n{extra}"


def clean_policy() -> str:
    regions = []
    for name in MODEL_NAMES:
        reference = f", reference: refs/{name}.npz" if name in WITH_REFERENCES else ""
        custom = ", custom: models:eqx_check" if name == "eqx" else ""
        checks = f"    checks: {{finite: true{reference}{custom}}}\n"
        regions.append(region(name, f"{name}_step", f"{name}_setup", checks))
    checks = "    checks: {finite: true, reference: refs/mixed.npz}\n"
    regions.append(region("mixed", "mixed_step", "device_batch", checks))
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{''.join(regions)}"


def broken_policy() -> str:
    regions = [region(f"{n}-float", f"{n}_float_step", f"{n}_setup") for n in MODEL_NAMES]
    regions += [region(f"{n}-numpy", f"{n}_step", f"{n}_numpy_setup") for n in MODEL_NAMES]
    regions.append(region("linen-python-step", "linen_step", "linen_python_step_setup"))
    regions.append(region("nnx-epoch", "nnx_epoch_step", "nnx_epoch_setup"))
    regions.append("  - name: no-arrays\n    step: models:no_arrays_step\n")
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{''.join(regions)}"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(
        tmp_path_factory.mktemp("real-models"),
        {
            "models.py": MODELS,
            "policies/clean.yaml": clean_policy(),
            "broken/broken.yaml": broken_policy(),
        },
    )


@pytest.fixture(scope="module")
def clean_runs(repo: Path) -> tuple[GateRun, GateRun]:
    """The regions with references, writing them; then the whole clean policy."""
    regions = [arg for name in WITH_REFERENCES for arg in ("--region", name)]
    written = run_gate(
        repo,
        *("run", "policies", "--write-references", *regions, "--junit", "reports/written.xml"),
        report="reports/written.xml",
    )
    compared = run_gate(repo, "run", "policies", "--json", "reports/clean.json")
    return written, compared


@pytest.fixture(scope="module")
def broken_run(repo: Path) -> GateRun:
    return run_gate(repo, "run", "broken", "--json", "reports/broken.json")


def json_region(run: GateRun, path: str, name: str) -> dict[str, Any]:
    report = json.loads((run.report.parent / path).read_text())
    (found,) = [r for s in report["suites"] for r in s["regions"] if r["name"] == name]
    return found  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_clean_real_step_passes_with_checks(
    clean_runs: tuple[GateRun, GateRun], name: str
) -> None:
    written, compared = clean_runs
    runs = [written, compared] if name in WITH_REFERENCES else [compared]
    for run in runs:
        assert run.returncode == 0, run
        case = run.testcase(f"{name}: transfers")
        assert case.find("failure") is None, run
        assert case.find("error") is None, run
        assert run.testcase(f"{name}: result checks").find("failure") is None, run
    leaves = ARRAY_LEAVES[name]
    out = compared.testcase(f"{name}: result checks").findtext("system-out") or ""
    assert f"all {leaves} output leaves are finite" in out, compared
    if name in WITH_REFERENCES:
        assert f"{leaves} leaves match {name}.npz" in out, compared
        out = written.testcase(f"{name}: result checks").findtext("system-out") or ""
        assert f"wrote {leaves} leaves" in out, written
    # A clean step has nothing to say: no transfer, no note about its inputs.
    found = json_region(compared, "clean.json", name)
    assert found["transfers"] == [], found
    assert found["notes"] == [], found
    # Its device memory counted after each of the two runs past warm-up, and no leak: the
    # state each run makes replaces the last.
    assert len(found["memory"]["live_arrays"]) == 2, found
    assert found["memory"]["leak"] is None, found


def test_references_hold_only_the_array_leaves(
    repo: Path, clean_runs: tuple[GateRun, GateRun]
) -> None:
    # The equinox model's activations and the NNX graph def are no data: a
    # reference holds the arrays alone, and loads without pickle.
    eqx_leaves = load_reference(repo / "policies/refs/eqx.npz")
    # weight, bias; adam's count, mu (weight, bias), nu (weight, bias); loss
    shapes = [value.shape for _, value in eqx_leaves]
    assert shapes == [(2, 4), (2,), (), (2, 4), (2,), (2, 4), (2,), ()]
    assert all(path for path, _ in eqx_leaves)  # each leaf with its pytree path
    nnx_leaves = load_reference(repo / "policies/refs/nnx.npz")
    # The dropout's typed PRNG key is kept as its key data.
    assert np.dtype(np.uint32) in [value.dtype for _, value in nnx_leaves]
    _, compared = clean_runs
    checks = json_region(compared, "clean.json", "eqx")["checks"]
    custom = {"name": "custom", "passed": True, "detail": "models:eqx_check accepted the outputs"}
    assert custom in checks, checks


def test_any_other_leaf_is_left_out_of_the_checks(
    repo: Path, clean_runs: tuple[GateRun, GateRun]
) -> None:
    # A string, a NumPy array of objects (np.savez could only pickle it) and a
    # function are ignored; the Python float is a number and is checked.
    _, compared = clean_runs
    for run in clean_runs:
        assert run.testcase("mixed: result checks").find("failure") is None, run
    values = load_reference(repo / "policies/refs/mixed.npz")
    # jax.tree_util order: sorted keys, so "image" then "lr"
    assert [(path, v.dtype, v.shape) for path, v in values] == [
        ("['image']", np.dtype(np.float32), (8, 4)),
        ("['lr']", np.dtype(np.float64), ()),
    ]
    out = compared.testcase("mixed: result checks").findtext("system-out") or ""
    assert "2 leaves match mixed.npz" in out, compared


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_planted_float_of_the_loss_fails_at_its_line(
    repo: Path, broken_run: GateRun, name: str
) -> None:
    assert broken_run.returncode == 1, broken_run
    line = line_of(repo / "models.py", f"# {name}: float")
    case = broken_run.testcase(f"{name}-float: transfers")
    failure = case.find("failure")
    assert failure is not None, broken_run
    message = failure.get("message", "")
    assert "implicit device-to-host" in message, broken_run
    assert f"float32[] at models.py:{line}" in message, broken_run
    assert case.get("line") == str(line)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_numpy_batch_fails_at_the_jitted_call(repo: Path, broken_run: GateRun, name: str) -> None:
    line = line_of(repo / "models.py", f"# {name}: call")
    failure = broken_run.testcase(f"{name}-numpy: transfers").find("failure")
    assert failure is not None, broken_run
    assert f"models.py:{line}" in failure.get("message", ""), broken_run
    # The batch is image float32[8,4] and labels int32[8]; whether the two are
    # one finding or two, the image is named at the call line.
    failing = [
        t
        for t in json_region(broken_run, "broken.json", f"{name}-numpy")["transfers"]
        if t["failing"]
    ]
    assert {t["line"] for t in failing} == {line}, failing
    assert all(t["direction"] == "host-to-device" for t in failing), failing
    assert ("float32", [8, 4]) in [(t["dtype"], t["shape"]) for t in failing], failing


def test_a_train_state_left_with_a_python_step_moves_it_every_call(
    repo: Path, broken_run: GateRun
) -> None:
    # TrainState.create keeps `step=0` as a Python int. In a training loop it
    # moves once; with a fresh state per run it moves on every run: setup
    # must put the whole state on the device (what `linen_state` does).
    line = line_of(repo / "models.py", "# linen: call")
    failure = broken_run.testcase("linen-python-step: transfers").find("failure")
    assert failure is not None, broken_run
    message = failure.get("message", "")
    assert "implicit host-to-device" in message, broken_run
    assert f"int32[] at models.py:{line}" in message, broken_run


def test_every_move_of_flaxs_mnist_epoch_names_its_array(repo: Path, broken_run: GateRun) -> None:
    # The `* 100` of a test accuracy runs the train accuracy's program again: on jit's fast
    # path, which logs the move with an empty description; so do metrics.reset()'s second
    # jnp.array(0) and every one of the second reset. Each names what JAX moved.
    found = json_region(broken_run, "broken.json", "nnx-epoch")["transfers"]
    moved = {(t["line"], t["dtype"], tuple(t["shape"]), t["per_step"]) for t in found}
    assert all(not t["undescribed"] for t in found), found
    for label in ("train accuracy", "test accuracy"):
        line = line_of(repo / "models.py", f"# nnx: {label}")
        assert (line, "int32", (), 1) in moved, found
    for label in ("first reset", "second reset"):
        line = line_of(repo / "models.py", f"# nnx: {label}")
        # Accuracy's and Average's running total (float32) and count (int32).
        assert {(d, n) for ln, d, _, n in moved if ln == line} == {("float32", 2), ("int32", 2)}
    message = broken_run.testcase("nnx-epoch: transfers").find("failure")
    assert message is not None, broken_run
    assert "did not describe" not in ET.tostring(message, encoding="unicode"), broken_run


def test_a_step_returning_no_array_is_still_refused(broken_run: GateRun) -> None:
    error = broken_run.testcase("no-arrays: transfers").find("error")
    assert error is not None, broken_run
    assert error.get("message", "") == (
        "step returned something unusable: models:no_arrays_step returned tuple containing "
        "only custom_jvp, str; return the step's outputs (arrays, or a pytree with arrays "
        "among its leaves) so the gate can wait for them and check them"
    ), broken_run
