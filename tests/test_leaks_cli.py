"""Device memory a step keeps, through the real CLI: leaks fail at what holds them.

One module of steps, each run as a region with three guarded runs (four counts after
warm-up): a loss appended to a module's list, to a closure's list, a growing cache keyed by
the step's count, and an optax parameter tree kept on an object's attribute leak; the last
result kept in a dict, the last two in a ``deque(maxlen=2)``, and a flax NNX model with its
optimizer updated in place at module level do not. ``memory: {leaks: warn}`` reports and
passes; ``allow`` counts nothing. Then the same leak planted in a head, against the base
(``run --base``) and against the stored baseline (``baseline``, then ``run``).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import GateRun, line_of, make_repo, run_gate
from git_helpers import commit, init

from gate.levels import GuardLevel, GuardSpec
from gate.policy.model import LeakRule
from gate.region.leaks import judge_memory
from gate.report.github_annotations import AnnotationKind, region_annotations
from gate.results.leaks import Holder, KeptArrays, Leak, StepMemory
from gate.results.records import RegionResult
from gate.user_code import UserCode
from gate.witness.live_arrays import LiveArrays

STEPS = """
import collections
import functools
import itertools
import os
import sys

import jax
import jax.numpy as jnp
import optax
from flax import nnx


@jax.jit
def _loss(x):
    return jnp.sum(x * x)


# A library of the repository's virtual environment (site-packages: never the user's code).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".venv", "site-packages"))
import cachedlib  # noqa: E402

_calls = itertools.count()
_current = {}  # the step's input: only the last is kept


def _current_loss():
    return _loss(_current["x"])


@functools.lru_cache(maxsize=None)
def _scores(n):
    return _current_loss()


def user_cache_step(x):
    _current["x"] = x
    return _scores(next(_calls))  # a new key each step: the cache keeps every result


def library_cache_step(x):
    _current["x"] = x
    return cachedlib.table(next(_calls), _current_loss)


def setup():
    return (jnp.ones((8, 4)),)


history = []


def list_step(x):
    loss = _loss(x)
    history.append(loss)
    return loss


def make_step():
    seen = []

    def step(x):
        loss = _loss(x)
        seen.append(loss)
        return loss

    return step


closure_step = make_step()

_cache = {}


_scale = jax.jit(lambda x: x * 2.0)


def cache_step(x):
    scaled = _scale(x)
    _cache[len(_cache)] = scaled  # a new key every step: it never forgets
    return _loss(scaled)


OPTAX_TX = optax.sgd(1e-2)


@jax.jit
def _update(params, x):
    grads = jax.grad(lambda p: jnp.sum((x @ p["w"] + p["b"]) ** 2))(params)
    updates, _ = OPTAX_TX.update(grads, OPTAX_TX.init(params), params)
    return optax.apply_updates(params, updates)


class Tracker:
    def __init__(self):
        self.snapshots = []

    def __getattr__(self, name):  # the walk reads attributes without running this
        raise RuntimeError(f"no {name}")


tracker = Tracker()


def optax_setup():
    return ({"w": jnp.full((4, 2), 0.1), "b": jnp.zeros(2)}, jnp.ones((8, 4)))


def attribute_step(params, x):
    params = _update(params, x)
    tracker.snapshots.append(params)
    return params


_last = {}


def bounded_step(x):
    loss = _loss(x)
    _last["loss"] = loss  # only the last: the one before goes
    return loss


recent = collections.deque(maxlen=2)


def recent_step(x):
    loss = _loss(x)
    recent.append(loss)
    return loss


def hidden_step(x):
    # Kept where no module of the user's reaches: an attribute of a library's module.
    loss = _loss(x)
    collections.__dict__.setdefault("_kept_by_a_test", []).append(loss)
    return loss


MODEL = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
OPTIMIZER = nnx.Optimizer(MODEL, optax.adam(1e-2), wrt=nnx.Param)


@nnx.jit
def _nnx_train(model, optimizer, x):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
    optimizer.update(model, grads)
    return loss


def nnx_in_place_step(x):
    return _nnx_train(MODEL, OPTIMIZER, x)
"""

CACHED_LIBRARY = """
import functools


@functools.cache
def table(key, make):
    return make()
"""

DEFAULTS = "defaults: {warmup: 1, guarded_runs: 3, repeats: 2, timing: off}\n"


def region(name: str, step: str, setup: str = "setup", extra: str = "") -> str:
    return f"  - {{name: {name}, step: steps:{step}, setup: steps:{setup}{extra}}}\n"


POLICY = (
    f"version: 1\n{DEFAULTS}regions:\n"
    + region("list", "list_step")
    + region("closure", "closure_step")
    + region("cache", "cache_step")
    + region("attribute", "attribute_step", "optax_setup")
    + region("bounded", "bounded_step")
    + region("recent", "recent_step")
    + region("nnx-in-place", "nnx_in_place_step")
    + region("hidden", "hidden_step")
    + region("user-cache", "user_cache_step")
    + region("library-cache", "library_cache_step")
    + region("list-warn", "list_step", extra=", memory: {leaks: warn}")
    + region("list-allow", "list_step", extra=", memory: {leaks: allow}")
)


@pytest.fixture(scope="module")
def leaks(tmp_path_factory: pytest.TempPathFactory) -> tuple[GateRun, Path]:
    repo = make_repo(
        tmp_path_factory.mktemp("leaks"),
        {
            "steps.py": STEPS,
            "policies/memory.yaml": POLICY,
            ".venv/pyvenv.cfg": "home = /usr/bin\n",
            ".venv/site-packages/cachedlib.py": CACHED_LIBRARY,
        },
    )
    run = run_gate(repo, "run", "--no-baseline", "--json", "r.json")
    return run, repo


def regions_of(repo: Path) -> dict[str, dict[str, Any]]:
    document = json.loads((repo / "r.json").read_text())
    return {r["name"]: r for s in document["suites"] for r in s["regions"]}


def row(run: GateRun, name: str) -> str:
    (found,) = [line for line in run.stdout.splitlines() if line[6:].startswith(f"memory.{name} ")]
    return found


@pytest.mark.parametrize(
    ("name", "needle", "what", "arrays", "per_step"),
    [
        ("list", "history = []", "global 'history' (list)", [("float32", [])], 4),
        (
            "closure",
            "    def step(x):",
            "global 'closure_step', closure variable 'seen' of make_step.<locals>.step (list)",
            [("float32", [])],
            4,
        ),
        ("cache", "_cache = {}", "global '_cache' (dict)", [("float32", [8, 4])], 128),
        # A cached function of the user's: its def, not "a dict no module reaches".
        (
            "user-cache",
            "@functools.lru_cache(maxsize=None)",
            "the cache of _scores (functools.lru_cache)",
            [("float32", [])],
            4,
        ),
        (
            "attribute",
            "self.snapshots = []",
            "global 'tracker', attribute 'snapshots' (list)",
            [("float32", [4, 2]), ("float32", [2])],
            40,
        ),
    ],
)
def test_a_leak_fails_at_what_holds_it(
    leaks: tuple[GateRun, Path],
    name: str,
    needle: str,
    what: str,
    *,
    arrays: list[tuple[str, list[int]]],
    per_step: int,
) -> None:
    run, repo = leaks
    assert run.returncode == 1, run
    found = regions_of(repo)[name]
    assert found["status"] == "failed", found
    memory = found["memory"]
    line = line_of(repo / "steps.py", needle)
    leak = memory["leak"]
    assert leak["holder"] == {"path": "steps.py", "line": line, "what": what}, leak
    assert [(a["dtype"], a["shape"], a["per_step"]) for a in leak["arrays"]] == [
        (dtype, shape, 1.0) for dtype, shape in arrays
    ]
    assert leak["bytes_per_step"] == per_step
    assert (leak["failing"], leak["warning"]) == (True, False)
    # Four counts after warm-up, each one step's arrays more than the last.
    counts = memory["live_arrays"]
    assert len(counts) == 4
    assert [b - a for a, b in itertools.pairwise(counts)] == [len(arrays)] * 3, counts
    # Nothing else fails the region: the leak is the only finding.
    assert found["transfers"] == [], found
    kept = ", ".join(f"+1 {dtype}[{','.join(map(str, shape))}] per step" for dtype, shape in arrays)
    text = f"steps.py:{line}: device memory kept every step: {what}, {kept} ({per_step} B per step)"
    assert leak["text"] == text
    assert f"  {text}" in run.stdout.splitlines(), run
    assert row(run, name).startswith("FAIL"), run
    assert row(run, name).endswith(f"leaks {per_step} B/step"), run
    # JUnit: a failing testcase at the holder's line, for the PR tools to annotate.
    case = run.testcase(f"{name}: device memory")
    assert (case.get("file"), case.get("line")) == ("steps.py", str(line))
    failure = case.find("failure")
    assert failure is not None
    assert (failure.get("type"), failure.get("message")) == ("memory-leak", text)
    assert "fix: keep no device array in a container that outlives the step" in (failure.text or "")


@pytest.mark.parametrize("name", ["bounded", "recent", "nnx-in-place"])
def test_a_bounded_cache_and_an_in_place_model_pass(leaks: tuple[GateRun, Path], name: str) -> None:
    run, repo = leaks
    found = regions_of(repo)[name]
    assert found["status"] == "passed", run
    memory = found["memory"]
    assert memory["leak"] is None
    assert memory["note"] is None
    # Counted, and flat: the live set does not grow from one step to the next.
    assert len(memory["live_arrays"]) == 4, memory
    assert len(set(memory["live_arrays"])) == 1, memory
    assert row(run, name).startswith("PASS"), run
    assert "leaks" not in row(run, name), run
    names = {c.get("name") for c in run.junit().iter("testcase")}
    assert f"{name}: device memory" not in names


@pytest.mark.parametrize(
    ("name", "what"),
    [
        # A global of a library's module: named with its module and file.
        (
            "hidden",
            "global '_kept_by_a_test' of module collections (list) in collections/__init__.py",
        ),
        # A library's cached function: named with its file and line.
        (
            "library-cache",
            "the cache of cachedlib.table (functools.lru_cache) in cachedlib.py:4",
        ),
    ],
)
def test_a_leak_in_a_library_names_its_holder_at_the_policy_line(
    leaks: tuple[GateRun, Path], name: str, what: str
) -> None:
    run, repo = leaks
    found = regions_of(repo)[name]
    assert found["status"] == "failed", run
    leak = found["memory"]["leak"]
    assert leak["holder"] == {"path": None, "line": None, "what": what}, leak
    place = f"policies/memory.yaml:{found['policy_line']}"
    assert leak["text"] == (
        f"{place}: device memory kept every step: {what}, +1 float32[] per step (4 B per step)"
    )
    case = run.testcase(f"{name}: device memory")
    # The annotation stays on a file of the repository: the region's policy line.
    assert (case.get("file"), case.get("line")) == (
        "policies/memory.yaml",
        str(found["policy_line"]),
    )
    assert case.find("failure") is not None


def test_one_run_past_warm_up_cannot_tell_a_leak_and_says_so() -> None:
    live = LiveArrays()
    live.count()
    live.count()
    memory = judge_memory(live, LeakRule.FAIL, UserCode(Path.cwd()))
    assert memory.leak is None
    assert memory.note == (
        "device memory not judged: 1 run after warm-up was counted, and a leak shows over 2; "
        "set guarded_runs: 2 or more"
    )


def test_leaks_warn_reports_and_passes(leaks: tuple[GateRun, Path]) -> None:
    run, repo = leaks
    found = regions_of(repo)["list-warn"]
    assert found["status"] == "passed", run
    assert (found["memory"]["leak"]["failing"], found["memory"]["leak"]["warning"]) == (False, True)
    assert row(run, "list-warn").endswith("leaks 4 B/step (warn)"), run
    line = line_of(repo / "steps.py", "history = []")
    said = f"  steps.py:{line}: warning (leaks: warn): device memory kept every step: global"
    assert any(text.startswith(said) for text in run.stdout.splitlines()), run
    case = run.testcase("list-warn: device memory")
    assert case.find("failure") is None
    assert "global 'history' (list), +1 float32[] per step" in (case.findtext("system-out") or "")


def test_leaks_allow_counts_nothing(leaks: tuple[GateRun, Path]) -> None:
    run, repo = leaks
    found = regions_of(repo)["list-allow"]
    assert found["status"] == "passed", run
    assert "memory" not in found


CLEAN = """
import jax
import jax.numpy as jnp

history = []


@jax.jit
def _loss(x):
    return jnp.sum(x * x)


def setup():
    return (jnp.ones((8, 4)),)


def step(x):
    loss = _loss(x)
    return loss
"""

LEAKING = CLEAN.replace("    return loss\n", "    history.append(loss)\n    return loss\n")
ONE_REGION = f"version: 1\n{DEFAULTS}regions:\n" + region("train", "step")


def test_a_leak_the_head_adds_fails_against_the_base(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": CLEAN, "policies/p.yaml": ONE_REGION}, "a clean step")
    commit(repo, {"steps.py": LEAKING}, "keep every loss")
    run = run_gate(repo, "run", "--base", "HEAD~1", "--json", "r.json")
    assert run.returncode == 1, run
    (found,) = regions_of(repo).values()
    assert found["status"] == "failed", run
    line = line_of(repo / "steps.py", "history = []")
    assert found["memory"]["leak"]["holder"]["line"] == line
    assert run.testcase("train: device memory").find("failure") is not None


def test_a_leak_fails_against_the_stored_baseline(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": CLEAN, "policies/p.yaml": ONE_REGION}, "a clean step")
    stored = run_gate(repo, "baseline")
    assert stored.returncode == 0, stored
    (repo / "steps.py").write_text(LEAKING)
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 1, run
    (found,) = regions_of(repo).values()
    # The baseline accepts transfers and stores times; a leak is never accepted.
    assert found["status"] == "failed", run
    line = line_of(repo / "steps.py", "history = []")
    assert found["memory"]["leak"]["text"].startswith(f"steps.py:{line}: device memory"), found


def test_the_leak_is_an_annotation_at_its_holder() -> None:
    leak = Leak(
        bytes_per_step=4,
        devices=1,
        arrays=(KeptArrays("float32", (), 3, 3),),
        holder=Holder("steps.py", 5, "global 'history' (list)"),
        failing=True,
        warning=False,
    )
    result = RegionResult(
        suite="s",
        name="r",
        policy_path="policies/p.yaml",
        policy_line=3,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        memory=StepMemory((1, 2, 3, 4), (4, 8, 12, 16), leak),
    )
    assert not result.passed
    (annotation,) = region_annotations(result)
    assert annotation.kind is AnnotationKind.MEMORY
    assert (annotation.path, annotation.line) == ("steps.py", 5)
    assert annotation.message == "global 'history' (list), +1 float32[] per step (4 B per step)"
    # Under warn it passes and is no annotation.
    warned = replace(leak, failing=False, warning=True)
    result = replace(result, memory=StepMemory((1, 2, 3, 4), (4, 8, 12, 16), warned))
    assert result.passed
    assert region_annotations(result) == []


MESH_STEPS = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((8,), ("data",))
SPLIT = NamedSharding(MESH, P("data"))
REPLICATED = NamedSharding(MESH, P())
kept = []


@jax.jit
def _step(x):
    y = x * 2.0
    return y, jax.lax.with_sharding_constraint(jnp.sum(y), REPLICATED)


def setup():
    return (jax.device_put(np.ones((16, 4), np.float32), SPLIT),)


def step(x):
    y, total = _step(x)
    kept.append((y, total))
    return total
"""


def test_a_leak_on_a_mesh_counts_the_bytes_on_every_device(tmp_path: Path) -> None:
    env = "env:\n  XLA_FLAGS: --xla_force_host_platform_device_count=8\n"
    policy = f"version: 1\n{env}{DEFAULTS}regions:\n" + region("mesh", "step")
    repo = make_repo(tmp_path, {"steps.py": MESH_STEPS, "policies/mesh.yaml": policy})
    run = run_gate(repo, "run", "--no-baseline", "--json", "r.json", devices=8)
    assert run.returncode == 1, run
    (found,) = regions_of(repo).values()
    leak = found["memory"]["leak"]
    # f32[16,4] split 8 ways is 256 B on the devices in all; f32[] replicated is 4 B on each.
    assert (leak["bytes_per_step"], leak["devices"]) == (256 + 8 * 4, 8), leak
    line = line_of(repo / "steps.py", "kept = []")
    assert leak["text"] == (
        f"steps.py:{line}: device memory kept every step: global 'kept' (list), "
        "+1 float32[16,4] per step, +1 float32[] per step (288 B per step over 8 devices)"
    )


kept_by_the_test: list[Any] = []


def test_check_region_takes_leaks_as_the_policy_does() -> None:
    import jax
    import jax.numpy as jnp

    from gate import check_region

    double = jax.jit(lambda x: x * 2.0)

    def leaking(x: jax.Array) -> jax.Array:
        y = double(x)
        kept_by_the_test.append(y)
        return y

    def setup() -> tuple[jax.Array]:
        return (jnp.ones(4),)

    try:
        runs = {"warmup": 1, "guarded_runs": 2, "repeats": 1}
        failed = check_region(leaking, setup=setup, **runs)
        assert not failed.passed
        assert failed.memory is not None
        assert failed.memory.leak is not None
        line = line_of(Path(__file__), "kept_by_the_test: list[Any] = [" + "]")
        assert str(failed.memory.leak.holder) == (
            f"tests/test_leaks_cli.py:{line}: global 'kept_by_the_test' (list)"
        )
        warned = check_region(leaking, setup=setup, leaks="warn", **runs)
        assert warned.passed
        assert warned.memory is not None
        assert warned.memory.leak is not None
        assert warned.memory.leak.warning
        assert check_region(leaking, setup=setup, leaks="allow", **runs).memory is None
        with pytest.raises(ValueError, match="leaks is 'sometimes'; use one of fail, warn, allow"):
            check_region(leaking, setup=setup, leaks="sometimes", **runs)
    finally:
        kept_by_the_test.clear()  # what the leak kept goes with the test
