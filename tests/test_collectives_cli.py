"""What sharded steps communicate, read through the real CLI on 8 CPU devices.

One run of six regions serves the inventory and donation tests, one ``run --base`` on a planted
sharding change the comparison tests: each run costs a worker with 8 devices, so the
assertions share them. tests/jax_hooks.py lists these tests, so they run again on the oldest
and the newest JAX: the HLO text, replica-group forms and JAX's lowering warning they read
differ between versions, and every version must give the same inventory (or its
differences, named below).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jax
import pytest
from cli_helpers import GateRun, make_repo, run_gate
from git_helpers import commit, init

NEWER = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 12)

STEPS = """
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # jax 0.10
    from jax.experimental.shard_map import shard_map

MESH = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
MESH2 = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
W1 = P()  # the spec the --base test changes


def put(x, mesh, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def loss(params, x, y):
    h = jnp.tanh(x @ params["w1"])  # layer-1
    return jnp.mean((h @ params["w2"] - y) ** 2)  # layer-2


@jax.jit
def train_step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def _inputs(mesh, w1, w2):
    params = {"w1": put(jnp.ones((64, 128)), mesh, w1), "w2": put(jnp.ones((128, 8)), mesh, w2)}
    return params, put(jnp.ones((32, 64)), mesh, P("data")), put(jnp.ones((32, 8)), mesh, P("data"))


def data_parallel():
    return _inputs(MESH, W1, P())


def fsdp():
    return _inputs(MESH, P("data"), P("data"))


def tensor_parallel():
    return _inputs(MESH2, P(None, "model"), P("model", None))


def _twice(x):  # the second psum sums an already summed value again
    total = jax.lax.psum(x.sum(0), "data")  # psum-1
    return jax.lax.psum(total, "data")  # psum-2


@jax.jit
def double_psum(x):
    return shard_map(_twice, mesh=MESH, in_specs=P("data"), out_specs=P())(x)


def batch():
    return (put(jnp.ones((32, 4)), MESH, P("data")),)


lose_donation = jax.jit(lambda x: (x * 0.5).astype(jnp.bfloat16), donate_argnums=0)
keep_donation = jax.jit(lambda x: x * 0.5, donate_argnums=0)
drop_donation = jax.jit(lambda x: x[:4] * 0.5, donate_argnums=0)


def vector():
    return (jnp.ones((16, 8), jnp.float32),)
"""

POLICY = """
version: 1
env:
  XLA_FLAGS: --xla_force_host_platform_device_count=8
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: data_parallel, step: steps:train_step, setup: steps:data_parallel}
  - {name: fsdp, step: steps:train_step, setup: steps:fsdp}
  - {name: tensor_parallel, step: steps:train_step, setup: steps:tensor_parallel}
  - {name: double_psum, step: steps:double_psum, setup: steps:batch}
  - {name: lost_donation, step: steps:lose_donation, setup: steps:vector, donation: fail}
  - {name: kept_donation, step: steps:keep_donation, setup: steps:vector}
  - {name: dropped_donation, step: steps:drop_donation, setup: steps:vector, donation: warn}
"""


def line_of(marker: str, text: str = STEPS) -> str:
    """``steps.py:N`` of the line marked ``# marker``."""
    lines = text.lstrip("\n").splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if line.endswith(f"# {marker}")]
    return f"steps.py:{number}"


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[GateRun, dict[str, Any]]:
    repo = make_repo(
        tmp_path_factory.mktemp("mesh"), {"steps.py": STEPS, "policies/mesh.yaml": POLICY}
    )
    run = run_gate(repo, "run", "--no-baseline", "--json", "r.json", devices=8)
    regions = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    return run, {r["name"]: r for r in regions}


def inventory(region: dict[str, Any]) -> list[tuple[Any, ...]]:
    comm = region["cost"]["communication"]
    assert comm["measured"], comm
    return [
        (
            c["kind"],
            c["buffer"],
            tuple(c["axes"]) if c["axes"] is not None else None,
            f"{c['path']}:{c['line']}",
            c["bytes_per_device"],
            c["runs_per_step"],
        )
        for c in comm["collectives"]
    ]


L1, L2 = line_of("layer-1"), line_of("layer-2")
DATA, MODEL = ("data",), ("model",)
# Exact, on jax 0.10.1, 0.10.2 and 0.12.0.1 alike (but the one all-to-all jax 0.10 adds): a
# data-parallel step all-reduces its replicated weights' gradients (one tuple on CPU, split
# per weight at each weight's line); sharding the weights over the same axis (FSDP) gathers
# them back (and, on CPU, all-reduces and all-to-alls instead of a reduce-scatter); splitting
# them over 'model' (tensor parallel) all-reduces layer 2's activations over 'model' and the
# gradients over 'data'.
INVENTORIES = {
    "data_parallel": [
        ("all-reduce", "f32[128,64]", DATA, L1, 32768, 1),
        ("all-reduce", "f32[8,128]", DATA, L2, 4096, 1),
    ],
    "fsdp": [
        ("all-gather", "f32[64,128]", DATA, L1, 32768, 1),
        ("all-gather", "f32[128,8]", DATA, L2, 4096, 1),
        ("all-to-all", "8x f32[4,1,8]", DATA, L1, 1024, 1),
        ("all-to-all", "8x f32[4,1,16]", DATA, L1, 2048, 1),
        *([] if NEWER else [("all-to-all", "8x f32[4,1,16]", DATA, L1, 2048, 1)]),
        ("all-gather", "f32[32,8]", DATA, L2, 1024, 1),
        ("all-reduce", "f32[8,128]", DATA, L2, 4096, 1),
        ("all-gather", "f32[32,128]", DATA, L1, 16384, 1),
    ],
    "tensor_parallel": [
        ("all-reduce", "f32[8,8]", MODEL, L2, 256, 1),
        ("all-reduce", "f32[64,64]", DATA, L1, 16384, 1),
        ("all-reduce", "f32[8,64]", DATA, L2, 2048, 1),
    ],
    # shard_map's two psums are two all-reduces, each at its own line.
    "double_psum": [
        ("all-reduce", "f32[4]", DATA, line_of("psum-1"), 16, 1),
        ("all-reduce", "f32[4]", DATA, line_of("psum-2"), 16, 1),
    ],
}


@pytest.mark.parametrize("name", sorted(INVENTORIES))
def test_each_sharded_step_lists_exactly_its_collectives(
    mesh_run: tuple[GateRun, dict[str, Any]], name: str
) -> None:
    run, regions = mesh_run
    assert inventory(regions[name]) == INVENTORIES[name], run
    comm = regions[name]["cost"]["communication"]
    total = sum(c[4] * c[5] for c in INVENTORIES[name])
    assert comm["bytes_per_step_per_device"] == total
    (row,) = [line for line in run.stdout.splitlines() if f"mesh.{name} " in line]
    assert row.startswith("PASS"), run
    assert row.endswith(f"comm {_kb(total)}/step"), run


def _kb(size: int) -> str:
    return f"{size / 1000:.3g} kB" if size >= 1000 else f"{size} B"


def test_memory_is_per_device_and_shards_shrink_the_arguments(
    mesh_run: tuple[GateRun, dict[str, Any]],
) -> None:
    _, regions = mesh_run

    def arguments(name: str) -> float:
        return float(regions[name]["cost"]["totals"]["argument_bytes"])

    # Per device: a replicated weight is whole on each device, a batch 1/8 of it; FSDP keeps
    # 1/8 of the weights too. XLA's figures are one device's, exactly.
    weights, batch = (64 * 128 + 128 * 8) * 4, (32 * 64 + 32 * 8) * 4
    assert arguments("data_parallel") == weights + batch / 8
    assert arguments("fsdp") == (weights + batch) / 8


def test_a_lost_donation_fails_at_its_argument_and_a_kept_one_passes(
    mesh_run: tuple[GateRun, dict[str, Any]],
) -> None:
    run, regions = mesh_run
    lost = regions["lost_donation"]
    assert lost["status"] == "failed", run
    # f32 in, bf16 out: XLA received the donation and could alias nothing; JAX said nothing.
    assert lost["donations"] == [
        {
            "function": "jit(<lambda>)",
            "argument": "x",
            "aval": "float32[16,8]",
            "per_device": False,
            "seen_by": "xla",
            "failing": True,
            "warning": False,
            "text": "jit(<lambda>): donated argument 'x' float32[16,8] is not reused "
            "(XLA received it but aliased no output to it)",
        }
    ]
    place = f"policies/mesh.yaml:{lost['policy_line']}"
    assert f"  {place}: {lost['donations'][0]['text']}" in run.stdout.splitlines(), run
    assert regions["kept_donation"]["donations"] == []
    assert regions["kept_donation"]["status"] == "passed"
    case = run.testcase("lost_donation: donation")
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "donation"


def test_a_donation_jax_dropped_is_caught_not_printed_and_warns_under_warn(
    mesh_run: tuple[GateRun, dict[str, Any]],
) -> None:
    run, regions = mesh_run
    dropped = regions["dropped_donation"]
    # A shape no output has: JAX drops it before XLA sees it, and says so only in a warning.
    assert [
        (d["argument"], d["aval"], d["seen_by"], d["failing"]) for d in dropped["donations"]
    ] == [("x", "float32[16,8]", "jax", False)]
    assert dropped["status"] == "passed", run
    assert "warning (donation: warn): jit(<lambda>): donated argument 'x'" in run.stdout
    assert "Some donated buffers were not usable" not in run.stdout + run.stderr


BASE_POLICY = """
version: 1
env:
  XLA_FLAGS: --xla_force_host_platform_device_count=8
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: sharded, step: steps:train_step, setup: steps:data_parallel}
  - {name: unchanged, step: steps:double_psum, setup: steps:batch}
"""


@pytest.fixture(scope="module")
def spec_change(tmp_path_factory: pytest.TempPathFactory) -> tuple[GateRun, Path]:
    """``run --base HEAD~1`` on a change that shards w1 over 'data' (FSDP for one weight)."""
    repo = init(tmp_path_factory.mktemp("spec"))
    commit(repo, {"steps.py": STEPS, "policies/p.yaml": BASE_POLICY}, "replicated weights")
    changed = STEPS.replace("W1 = P()  # the spec", 'W1 = P("data")  # the spec')
    commit(repo, {"steps.py": changed}, "shard w1")
    summary = repo / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    run = run_gate(repo, "run", "--base", "HEAD~1", "--json", "r.json", devices=8, env=env)
    return run, repo


# The all-gather's line is untouched: the changed spec above it made it (git's line map).
SPEC = line_of("the spec the --base test changes")
NEW_GATHER = (
    f"{L1}: new all-gather f32[64,128] over 'data', 32.8 kB/step/device (base: none) "
    f"(unchanged line; the change at {SPEC} caused it)"
)


def test_a_changed_spec_fails_naming_the_new_all_gather_its_bytes_and_axis(
    spec_change: tuple[GateRun, Path],
) -> None:
    run, repo = spec_change
    assert run.returncode == 1, run
    # The finding, at the line whose sharding made it, with that line's text.
    assert f'  {NEW_GATHER}   h = jnp.tanh(x @ params["w1"])  # layer-1' in run.stdout, run
    (row,) = [line for line in run.stdout.splitlines() if line.startswith("FAIL  p.sharded ")]
    assert row.endswith("/step"), run  # the comm column: what it communicates now
    assert "  collectives vs base: new all-gather f32[64,128] over 'data'" in run.stdout, run
    # JUnit: a failing testcase at the all-gather's own line, for the PR tools to annotate.
    name = f"sharded: new all-gather over 'data' at {L1}"
    case = run.testcase(name)
    assert (case.get("file"), case.get("line")) == ("steps.py", L1.split(":")[1])
    failure = case.find("failure")
    assert failure is not None
    accept = "; to accept it, add `accept: {collectives: <why this change is meant>}` to region"
    assert failure.get("message", "").startswith(NEW_GATHER + accept)
    # The JSON has every figure of it.
    regions = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    sharded = {r["name"]: r for r in regions}["sharded"]
    changes = sharded["base"]["collectives"]["changes"]
    gathered = [c for c in changes if c["change"] == "new" and c["line"] == int(L1.split(":")[1])]
    assert [
        (c["head"]["collective"]["buffer"], c["head"]["bytes_per_step_per_device"], c["failing"])
        for c in gathered
        if c["head"]["collective"]["kind"] == "all-gather"
    ] == [("f32[64,128]", 32768, True)]
    assert sharded["base"]["collectives"]["rule"] == "fail"


def test_github_annotates_the_new_all_gather_at_its_line_and_summarises_it(
    spec_change: tuple[GateRun, Path],
) -> None:
    run, repo = spec_change
    number = L1.split(":")[1]
    annotations = [line for line in run.stdout.splitlines() if line.startswith("::error ")]
    assert any(
        f"file=steps.py,line={number}," in a and "::new all-gather f32[64,128] over 'data'" in a
        for a in annotations
    ), annotations
    summary = (repo / "summary.md").read_text()
    assert "new all-gather f32\\[64,128\\] over 'data', 32.8 kB/step/device" in summary
    assert re.search(r"`p\.sharded` collectives \| — .*\*\*FAIL\*\*", summary), summary


def test_an_unchanged_sharded_step_passes_against_its_base(
    spec_change: tuple[GateRun, Path],
) -> None:
    run, _ = spec_change
    (row,) = [line for line in run.stdout.splitlines() if line.startswith("PASS  p.unchanged")]
    assert row.endswith("comm 32 B/step"), run
    assert not any("p.unchanged" in line for line in run.stdout.splitlines() if "::error" in line)


def test_jaxs_dropped_donation_is_caught_with_its_program_and_argument_and_put_back(
    recwarn: pytest.WarningsRecorder,
) -> None:
    import warnings

    import jax.numpy as jnp

    from gate.jaxhooks.donation_warnings import WarnedDonation, donation_warnings_caught

    def shrink(x: jax.Array, y: jax.Array) -> jax.Array:
        return x[:2] * y

    step = jax.jit(shrink, donate_argnums=0)
    before = (warnings.showwarning, list(warnings.filters))
    with donation_warnings_caught() as caught:
        step(jnp.ones((4, 3)), jnp.ones((2, 3)))
        step(jnp.ones((4, 3)), jnp.ones((2, 3)))  # lowered once: warned once
    assert caught.found == [WarnedDonation("jit(shrink)", "x", "float32[4,3]")]
    assert (warnings.showwarning, list(warnings.filters)) == before
    assert len(recwarn) == 0  # caught, not shown (and not an error under filterwarnings)


def test_programs_that_cannot_be_read_make_donation_fail_an_error_and_the_others_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jax.numpy as jnp

    import gate.witness.programs
    from gate import check_region
    from gate.results.errors import ErrorKind

    # As on a jaxlib whose executables hide their text: nobody sees what XLA aliased.
    blind = "the executable has no hlo_modules() and no get_hlo_text()"
    monkeypatch.setattr(gate.witness.programs, "program_texts", lambda executable: blind)
    step = jax.jit(lambda x: x * 2.0)

    def setup() -> tuple[jax.Array]:
        return (jnp.ones(4),)

    failed = check_region(step, setup=setup, warmup=0, guarded_runs=1, repeats=1, donation="fail")
    assert failed.error is not None
    assert failed.error.kind is ErrorKind.UNCHECKED
    assert blind in failed.error.message
    assert failed.error.message.startswith("unused donations could not be checked on cpu")
    # `warn`, and the default `fail_new` (with nothing to compare against): a note.
    for rule in ("warn", "fail_new"):
        noted = check_region(step, setup=setup, warmup=0, guarded_runs=1, repeats=1, donation=rule)
        assert noted.passed, rule
        assert any(n.startswith("unused donations could not be checked") for n in noted.notes)
        assert noted.cost is not None
        assert noted.cost.comm is not None
        assert not noted.cost.comm.measured
