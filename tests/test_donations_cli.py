"""Unused donations judged like collectives, through the real CLI on 8 CPU devices.

The loop is equinox's parallelism example (``filter_jit(donate="all")``, the batch put on the
mesh with ``jax.device_put``): it donates the batch with the model, and no output can reuse
a batch, so two donations go unused on every run. That is the library's idiom: by default
(``donation: fail_new``) it is reported, not failed, and only a donation the base (or the
stored baseline) reused and the head does not fails, as a new collective does. ``donation:
fail`` keeps failing every unused one. A planted dtype change (the last bias returned in
bfloat16) loses that parameter's donation; a shape change makes JAX drop a plain jit's
donation while lowering, which the gate hears as JAX's warning: both fail against the base
and against the stored baseline, and a donation lost in both trees fails neither.

One plain run, one ``run --base`` and one ``baseline`` then ``run`` serve the tests: each
costs workers with 8 devices.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import GateRun, make_repo, run_gate
from git_helpers import commit, init

STEPS = """
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((8,), ("batch",), axis_types=(AxisType.Auto,))
SHARDED = NamedSharding(MESH, P("batch"))
REPLICATED = NamedSharding(MESH, P())
OPTIM = optax.adam(3e-4)


def compute_loss(model, x, y):
    return jnp.mean((y - jax.vmap(model)(x)) ** 2)


def update(model, opt_state, x, y, sharding, replicated):
    model, opt_state = eqx.filter_shard((model, opt_state), replicated)
    x, y = eqx.filter_shard((x, y), sharding)
    grads = eqx.filter_grad(compute_loss)(model, x, y)
    updates, opt_state = OPTIM.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state


@eqx.filter_jit(donate="all")
def train_step(model, opt_state, x, y, sharding, replicated):
    model, opt_state = update(model, opt_state, x, y, sharding, replicated)
    return eqx.filter_shard((model, opt_state), replicated)


@eqx.filter_jit(donate="all")
def train_step_cast(model, opt_state, x, y, sharding, replicated):
    model, opt_state = update(model, opt_state, x, y, sharding, replicated)
    return eqx.filter_shard((model, opt_state), replicated)  # the planted change


def setup():
    model = eqx.nn.MLP(4, 4, 32, 1, key=jr.PRNGKey(6789))
    opt_state = OPTIM.init(eqx.filter(model, eqx.is_inexact_array))
    model, opt_state = eqx.filter_shard((model, opt_state), REPLICATED)
    xs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    return model, opt_state, jax.device_put(xs, SHARDED), jax.device_put(np.sin(xs), SHARDED)


def loop(model, opt_state, x, y):
    return train_step(model, opt_state, x, y, SHARDED, REPLICATED)


def loop_cast(model, opt_state, x, y):
    return train_step_cast(model, opt_state, x, y, SHARDED, REPLICATED)


# A plain jit whose output fits its donated input: XLA reuses it. The head's change below
# returns half of it, which JAX cannot alias, so JAX drops the donation with its warning.
scale = jax.jit(lambda x: x * 0.5, donate_argnums=0)
halve = jax.jit(lambda x: x[:4] * 0.5, donate_argnums=0)


def vector():
    return (jnp.ones((16, 8), jnp.float32),)
"""

# The head: the last bias comes back in bfloat16, so XLA cannot write it into its donated
# float32 buffer; and `scale` returns half its input, so JAX drops its donation.
PLANTED = STEPS.replace(
    "    return eqx.filter_shard((model, opt_state), replicated)  # the planted change",
    "    bias = model.layers[-1].bias.astype(jnp.bfloat16)\n"
    "    model = eqx.tree_at(lambda m: m.layers[-1].bias, model, bias)\n"
    "    return eqx.filter_shard((model, opt_state), replicated)",
).replace("scale = jax.jit(lambda x: x * 0.5,", "scale = jax.jit(lambda x: x[:4] * 0.5,")

ENV = "env:\n  XLA_FLAGS: --xla_force_host_platform_device_count=8\n"
DEFAULTS = "defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}\n"

POLICY = f"""version: 1
{ENV}{DEFAULTS}regions:
  - {{name: loop, step: steps:loop, setup: steps:setup}}
  - {{name: loop-fail, step: steps:loop, setup: steps:setup, donation: fail}}
"""

BASE_POLICY = f"""version: 1
{ENV}{DEFAULTS}regions:
  - {{name: steady, step: steps:loop, setup: steps:setup}}
  - {{name: planted, step: steps:loop_cast, setup: steps:setup}}
  - {{name: jax-dropped, step: steps:scale, setup: steps:vector}}
  - {{name: jax-dropped-in-both, step: steps:halve, setup: steps:vector}}
"""

# What XLA says of a donated batch on the mesh: each device's part, and why it stayed unused.
BATCH = [
    f"jit(train_step): donated argument 'dynamic_donate['rest'][{n}]' float32[2,4] per device "
    "is not reused (XLA received it but aliased no output to it"
    for n in (9, 10)
]


def regions_of(repo: Path, report: str = "r.json") -> dict[str, dict[str, Any]]:
    document = json.loads((repo / report).read_text())
    return {r["name"]: r for s in document["suites"] for r in s["regions"]}


def row(run: GateRun, name: str) -> str:
    (found,) = [line for line in run.stdout.splitlines() if f".{name} " in line]
    return found


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[GateRun, Path]:
    repo = make_repo(
        tmp_path_factory.mktemp("donate"), {"steps.py": STEPS, "policies/eqx.yaml": POLICY}
    )
    run = run_gate(repo, "run", "--no-baseline", "--json", "r.json", devices=8)
    return run, repo


def test_equinox_donate_all_passes_by_default_with_a_note_on_each_unused_donation(
    plain: tuple[GateRun, Path],
) -> None:
    run, repo = plain
    loop = regions_of(repo)["loop"]
    assert loop["status"] == "passed", run
    assert row(run, "loop").startswith("PASS"), run
    assert row(run, "loop").endswith("2 unused donations"), run
    # Reported: which argument, its shape per device, why XLA could not reuse it.
    place = f"policies/eqx.yaml:{loop['policy_line']}"
    for text in BATCH:
        assert f"  {place}: note (donation: fail_new): {text})" in run.stdout.splitlines(), run
    judged = [(d["aval"], d["per_device"], d["failing"], d["warning"]) for d in loop["donations"]]
    assert judged == [("float32[2,4]", True, False, False)] * 2
    # In the JUnit report too, as a testcase that passes.
    case = run.testcase("loop: donation")
    assert case.find("failure") is None
    assert BATCH[0] in (case.findtext("system-out") or "")


def test_the_same_loop_fails_under_donation_fail(plain: tuple[GateRun, Path]) -> None:
    run, repo = plain
    failed = regions_of(repo)["loop-fail"]
    assert failed["status"] == "failed", run
    assert run.returncode == 1, run
    assert [d["failing"] for d in failed["donations"]] == [True, True]
    place = f"policies/eqx.yaml:{failed['policy_line']}"
    assert f"  {place}: {BATCH[0]})" in run.stdout.splitlines(), run
    failure = run.testcase("loop-fail: donation").find("failure")
    assert failure is not None
    assert failure.get("type") == "donation"
    assert failure.get("message") == f"2 donated arguments are not reused: {BATCH[0]})"


@pytest.fixture(scope="module")
def against_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[GateRun, Path]:
    """``run --base HEAD~1`` on the planted change."""
    repo = init(tmp_path_factory.mktemp("lost"))
    commit(repo, {"steps.py": STEPS, "policies/eqx.yaml": BASE_POLICY}, "donations reused")
    commit(repo, {"steps.py": PLANTED}, "a bias in bfloat16, half a vector")
    run = run_gate(repo, "run", "--base", "HEAD~1", "--json", "r.json", devices=8)
    return run, repo


LOST_BIAS = (
    "jit(train_step_cast): donated argument 'dynamic_donate['rest'][8]' float32[4] per device "
    "is not reused (XLA received it but aliased no output to it; base: reused)"
)


def test_a_dtype_change_that_loses_a_parameters_donation_fails_against_the_base(
    against_base: tuple[GateRun, Path],
) -> None:
    run, repo = against_base
    assert run.returncode == 1, run
    planted = regions_of(repo)["planted"]
    assert planted["status"] == "failed", run
    place = f"policies/eqx.yaml:{planted['policy_line']}"
    lines = run.stdout.splitlines()
    assert f"  {place}: {LOST_BIAS}" in lines, run
    # The batch's donations were unused in the base too: said, not failed.
    for batch in BATCH:
        text = batch.replace("jit(train_step)", "jit(train_step_cast)")
        assert f"  {place}: note (donation: fail_new): {text}; base: unused too)" in lines, run
    compared = planted["base"]["collectives"]["donations"]
    assert (compared["rule"], compared["compared"], compared["failing"]) == ("fail_new", True, True)
    assert [(d["argument"], d["aval"], d["failing"]) for d in compared["lost"]] == [
        ("dynamic_donate['rest'][8]", "float32[4]", True)
    ]
    assert len(compared["kept"]) == 2
    # Lost, not dropped too: the head still donates it (XLA's path is the base's reused one's).
    assert compared["dropped"] == [], compared
    assert "  donations vs base: 1 lost: jit(train_step_cast): " in run.stdout, run
    failure = run.testcase("planted: donation").find("failure")
    assert failure is not None
    accept = "; to accept it, add `accept: {donations: <why this change is meant>}` to region"
    assert failure.get("message", "").startswith(LOST_BIAS + accept)


def test_a_donation_lost_in_both_trees_does_not_fail_by_default(
    against_base: tuple[GateRun, Path],
) -> None:
    run, repo = against_base
    regions = regions_of(repo)
    for name in ("steady", "jax-dropped-in-both"):
        assert regions[name]["status"] == "passed", (name, run)
        compared = regions[name]["base"]["collectives"]["donations"]
        assert (compared["lost"], compared["failing"]) == ([], False), (name, compared)
        assert len(compared["kept"]) == len(regions[name]["donations"]) > 0
    assert row(run, "steady").startswith("PASS"), run
    assert row(run, "steady").endswith("2 unused donations"), run


def test_a_donation_jax_drops_with_its_warning_follows_the_same_rule(
    against_base: tuple[GateRun, Path],
) -> None:
    run, repo = against_base
    dropped = regions_of(repo)["jax-dropped"]
    assert dropped["status"] == "failed", run
    (lost,) = dropped["base"]["collectives"]["donations"]["lost"]
    assert (lost["argument"], lost["aval"], lost["seen_by"], lost["failing"]) == (
        "x",
        "float32[16,8]",
        "jax",
        True,
    )
    # JAX's path for it is XLA's in the base: the same donation, lost and not dropped.
    assert dropped["base"]["collectives"]["donations"]["dropped"] == []
    assert "Some donated buffers were not usable" not in run.stdout + run.stderr
    both = regions_of(repo)["jax-dropped-in-both"]
    assert [d["seen_by"] for d in both["donations"]] == ["jax"]


@pytest.fixture(scope="module")
def against_baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[GateRun, Path]:
    """``transfer-gate baseline`` on the tree before the change, then ``run`` after it."""
    repo = make_repo(
        tmp_path_factory.mktemp("recorded"),
        {"steps.py": STEPS, "policies/eqx.yaml": BASE_POLICY},
    )
    recorded = run_gate(repo, "baseline", devices=8)
    assert recorded.returncode == 0, recorded
    make_repo(repo, {"steps.py": PLANTED})
    run = run_gate(repo, "run", "--json", "r.json", devices=8)
    return run, repo


def test_a_donation_lost_since_the_stored_baseline_fails_and_one_lost_in_both_does_not(
    against_baseline: tuple[GateRun, Path],
) -> None:
    run, repo = against_baseline
    assert run.returncode == 1, run
    regions = regions_of(repo)
    planted = regions["planted"]
    assert planted["status"] == "failed", run
    lost_bias = LOST_BIAS.replace("base: reused", "baseline: reused")
    assert f"  policies/eqx.yaml:{planted['policy_line']}: {lost_bias}" in run.stdout, run
    compared = planted["collectives_vs_baseline"]["donations"]
    assert [d["argument"] for d in compared["lost"]] == ["dynamic_donate['rest'][8]"]
    assert "  donations vs baseline: 1 lost: jit(train_step_cast): " in run.stdout, run
    (lost,) = regions["jax-dropped"]["collectives_vs_baseline"]["donations"]["lost"]
    assert (lost["seen_by"], lost["failing"]) == ("jax", True)
    for name in ("steady", "jax-dropped-in-both"):
        assert regions[name]["status"] == "passed", (name, run)
        kept = regions[name]["collectives_vs_baseline"]["donations"]["kept"]
        assert len(kept) == len(regions[name]["donations"]) > 0, name
