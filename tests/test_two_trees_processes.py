"""``run --base`` against each tree run alone, where a tree leaves state in its process.

Each tree of a ``run --base`` runs in a worker process of its own. These are the repositories
where sharing one process made the verdict wrong: state a tree leaves at import or as it runs
(a cache or a registry in an installed package, ``os.environ``, an RNG, warning filters,
``np.seterr``, a pytree registration, a tracer, logging) that the other tree then met. Each
test runs each tree alone (its step in a Python of its own, as the user would), then
``run --base HEAD`` through the real CLI, and holds the verdict to what the trees do alone:
results that differ alone differ, results that match alone match and pass, a step that does
not raise alone does not raise, a step slower alone is slower, a transfer the base does not
make alone is new.

The base is the committed HEAD, the head the working tree's edits. A folder outside both
trees, put on ``PYTHONPATH``, plays an installed package. These run on the plain CPU, where
both trees' workers live side by side. Under the gate that imported both trees into one worker
(f4a9ddd's parent) every test here but the registry of functions fails; that one it caught as
"ran the other tree's code" and ran the trees apart.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import GateRun, make_repo, run_gate
from git_helpers import commit, git, init
from processes import run
from test_two_trees_verdicts import POLICY  # one region, timing off: the same repository shape

MAKE = """
import jax
import numpy as np


def make():
    return (jax.device_put(np.arange(8, dtype=np.float32)),)
"""

# A step's arithmetic jitted: an eager ``x * 2.0`` copies the 2.0 to the device (a transfer).
DOUBLE = """


@jax.jit
def double(x):
    return x * 2.0
"""

# The tree's step run alone, in a Python of its own started in the tree's root: the policy's
# python_path folders first, then the root (as the gate's worker has them), setup before every
# run, as the gate calls it. One JSON line: what the last run returned (dtype and values),
# what raised instead, and the median time of a run.
ALONE = """
import importlib
import json
import sys
import time

paths, step_ref, setup_ref, runs = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
sys.path[:0] = [*paths, "."]


def named(ref):
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


record = {"raised": None, "dtype": None, "y": None, "median_s": None}
try:
    import jax
    import numpy as np

    step, setup = named(step_ref), named(setup_ref)
    times = []
    for _ in range(int(runs)):
        args = setup()
        start = time.perf_counter()
        out = jax.block_until_ready(step(*args)["y"])
        times.append(time.perf_counter() - start)
    record.update(
        dtype=str(out.dtype), y=np.asarray(out).tolist(), median_s=sorted(times)[len(times) // 2]
    )
except Exception as exc:
    record["raised"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(record))
"""

# Runs of the step alone: enough for what a step keeps (a counter, an RNG's stream) to move on
# as it does under the gate; identical trees give identical outcomes at any count.
RUNS = 6


@dataclass(frozen=True)
class Alone:
    """How a tree runs alone: what its policy's ``python_path`` names (relative to the tree's
    root), what is on ``PYTHONPATH`` (relative to the root: the tree's own folder, as
    ``PYTHONPATH=$PWD/src`` in a CI step; absolute: an installed package), and its policy's
    ``env:``."""

    python_path: tuple[str, ...] = ()
    pythonpath: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Trees:
    """A repository whose working tree is the head and whose HEAD commit is the base."""

    repo: Path  # the git top level
    head: Alone = Alone()
    base: Alone = Alone()
    subfolder: str = ""  # where the gate runs (a monorepo's app); "" for the top level

    @property
    def root(self) -> Path:
        return self.repo / self.subfolder

    def gate_pythonpath(self) -> dict[str, str | None] | None:
        """The gate's ``PYTHONPATH``: the head's, as its CI step sets it."""
        if not self.head.pythonpath:
            return None
        return {"PYTHONPATH": os.pathsep.join(str(self.root / p) for p in self.head.pythonpath)}


@dataclass(frozen=True)
class Outcome:
    """One tree's step run alone."""

    raised: str | None
    dtype: str | None
    y: Any
    median_s: float | None

    @property
    def returned(self) -> tuple[str | None, str]:
        return self.dtype, json.dumps(self.y)


def _alone(root: Path, alone: Alone, runs: int = RUNS) -> Outcome:
    """The tree at ``root`` run alone, as its user runs it: no gate, nothing of the other tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.pop("PYTHONPATH", None)
    env["JAX_PLATFORMS"] = "cpu"
    env.update(alone.env)
    if alone.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(root / p) for p in alone.pythonpath)
    paths = json.dumps([str(root / p) for p in alone.python_path])
    argv = [sys.executable, "-c", ALONE, paths, "steps:step", "steps:make", str(runs)]
    done = run(argv, cwd=root, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return Outcome(**json.loads(done.stdout.strip().splitlines()[-1]))


def _base_alone(trees: Trees, tmp_path: Path) -> Path:
    """The base commit checked out on its own, to run it alone: its root there."""
    checkout = tmp_path / "base-alone"
    git(trees.repo, "worktree", "add", "--detach", str(checkout), "HEAD")
    return checkout / trees.subfolder


def _both_alone(trees: Trees, tmp_path: Path, runs: int = RUNS) -> tuple[Outcome, Outcome]:
    """(the head alone, the base alone)."""
    head = _alone(trees.root, trees.head, runs)
    return head, _alone(_base_alone(trees, tmp_path), trees.base, runs)


def _truth(head: Outcome, base: Outcome) -> str:
    """What the results comparison must say, from the trees run alone."""
    assert head.raised is None, head
    assert base.raised is None, base
    return "matches" if head.returned == base.returned else "differs"


@dataclass(frozen=True)
class Compared:
    """``run --base HEAD``: the gate's run, the region's report and its comparison with the
    base, as the JSON report has them."""

    gate: GateRun
    region: dict[str, Any]

    @property
    def base(self) -> dict[str, Any]:
        base = self.region["base"]
        assert isinstance(base, dict), self
        return base

    @property
    def results(self) -> str:
        results = self.base["results"]
        assert isinstance(results, dict), self
        return str(results["status"])

    def __str__(self) -> str:  # shown by pytest when an assertion fails
        shown = {k: self.region.get(k) for k in ("status", "error", "notes", "checks")}
        shown["transfers"] = [
            {k: t[k] for k in ("direction", "kind", "failing", "in_base", "source", "line")}
            for t in self.region["transfers"]
        ]
        base = {k: self.base.get(k) for k in ("status", "error", "apart", "already_in_base")}
        base |= {"results": self.base.get("results"), "timing": self.base.get("timing")}
        region = json.dumps({**shown, "base": base}, indent=1)
        return f"{self.gate}\n--- region ---\n{region}"

    __repr__ = __str__


def _compared(trees: Trees) -> Compared:
    gate = run_gate(
        trees.root, "run", "--base", "HEAD", "--json", "r.json", env=trees.gate_pythonpath()
    )
    assert gate.returncode in (0, 1), gate
    document = json.loads((trees.root / "r.json").read_text())
    (region,) = (r for suite in document["suites"] for r in suite["regions"])
    return Compared(gate, region)


# -- silent passes: the trees differ alone, and the comparison must say so ---------------------

LOADER = """
import functools
import json


@functools.lru_cache(maxsize=None)
def load(path):  # keyed by the path as given: relative to the working directory
    with open(path) as file:
        return json.load(file)
"""

STEP_LOADED = """
import weights_loader


def step(x):
    return {"y": x * weights_loader.load("data/w.json")["scale"]}
"""


def _installed(tmp_path: Path, files: dict[str, str]) -> str:
    return str(make_repo(tmp_path / "installed", files))


def _loader_cached_by_relative_path(tmp_path: Path) -> Trees:
    installed = _installed(tmp_path, {"weights_loader.py": LOADER})
    repo = init(tmp_path / "repo")
    files = {"steps.py": MAKE + STEP_LOADED, "policies/p.yaml": POLICY}
    commit(repo, {**files, "data/w.json": '{"scale": 2.0}\n'}, "base")
    make_repo(repo, {"data/w.json": '{"scale": 3.0}\n'})
    return Trees(repo, Alone(pythonpath=(installed,)), Alone(pythonpath=(installed,)))


STEP_ENV_DEFAULT = """
import os

os.environ.setdefault("SCALE", "{scale}")


def step(x):
    return {{"y": x * float(os.environ["SCALE"])}}
"""


def _environ_set_at_import(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    steps = MAKE + STEP_ENV_DEFAULT
    commit(repo, {"steps.py": steps.format(scale="3"), "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": steps.format(scale="2")})
    return Trees(repo)


REGISTRY = """
REGISTERED = {}


def register(name):
    def add(function):
        REGISTERED[name] = function
        return function

    return add


def bind(name, value):
    REGISTERED[name] = value


def get(name):
    return REGISTERED[name]
"""

STEP_REGISTERED = """
import knob_registry


@knob_registry.register("forward")
def forward(x):
    return x * {scale}


def step(x):
    return {{"y": knob_registry.get("forward")(x)}}
"""


STEP_BOUND = """
import knob_registry

knob_registry.bind("scale", {scale})


def step(x):
    return {{"y": x * knob_registry.get("scale")}}
"""


def _registry(tmp_path: Path, steps: str) -> Trees:
    """The base's steps with ``scale`` 2.0, the head's with 3.0."""
    installed = _installed(tmp_path, {"knob_registry.py": REGISTRY})
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": steps.format(scale="2.0"), "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": steps.format(scale="3.0")})
    return Trees(repo, Alone(pythonpath=(installed,)), Alone(pythonpath=(installed,)))


def _registry_filled_at_import(tmp_path: Path) -> Trees:
    return _registry(tmp_path, MAKE + STEP_REGISTERED)


def _registry_bound_at_import(tmp_path: Path) -> Trees:
    """As gin binds a parameter: a value, no function of either tree's to tell them apart."""
    return _registry(tmp_path, MAKE + STEP_BOUND)


SCALE_OPS = """
def scale(x, factor=2.0):
    return x * factor
"""

STEP_OPS = """
import scale_ops


def step(x):
    return {"y": scale_ops.scale(x)}
"""

PATCHED = """
import functools

scale_ops.scale = functools.partial(scale_ops.scale, factor=5.0)  # the head's tuning
"""


def _partial_assigned_onto_installed(tmp_path: Path) -> Trees:
    installed = _installed(tmp_path, {"scale_ops.py": SCALE_OPS})
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_OPS, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_OPS + PATCHED})
    return Trees(repo, Alone(pythonpath=(installed,)), Alone(pythonpath=(installed,)))


STEP_ARANGE = """
import jax.numpy as jnp


def step(x):
    return {"y": jnp.arange(8.0) * 2.0 + x}
"""


def _policy_env_changed(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_ARANGE, "policies/p.yaml": POLICY}, "base")
    x64 = POLICY.replace("version: 1\n", 'version: 1\nenv: {JAX_ENABLE_X64: "1"}\n')
    make_repo(repo, {"policies/p.yaml": x64})
    return Trees(repo, Alone(env={"JAX_ENABLE_X64": "1"}))


STEP_PKG = """
from pkg import mod


def step(x):
    return {"y": x * mod.FACTOR}
"""


def _src_layout_on_pythonpath(tmp_path: Path) -> Trees:
    """``pip install -e .`` of a src layout puts the checkout's ``src`` on the path; so does a
    CI step's ``PYTHONPATH=$PWD/src``: the base's worker must take the base's."""
    repo = init(tmp_path / "repo")
    package = {"src/pkg/__init__.py": "", "src/pkg/mod.py": "FACTOR = 2.0\n"}
    commit(repo, {**package, "steps.py": MAKE + STEP_PKG, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"src/pkg/mod.py": "FACTOR = 3.0\n"})
    return Trees(repo, Alone(pythonpath=("src",)), Alone(pythonpath=("src",)))


STEP_SHARED = """
import shared_ops


def step(x):
    return {"y": x * shared_ops.FACTOR}
"""


def _monorepo_shared_code(tmp_path: Path) -> Trees:
    """The gate runs in ``monorepo/app``; the code shared with other apps lies in
    ``monorepo/shared``, outside the folder the gate runs from, so on ``PYTHONPATH`` (a policy's
    ``python_path`` may not lead out of that folder: `gate.policy.meaning`)."""
    repo = init(tmp_path / "monorepo")
    app = {"app/steps.py": MAKE + STEP_SHARED, "app/policies/p.yaml": POLICY}
    commit(repo, {**app, "shared/shared_ops.py": "FACTOR = 2.0\n"}, "base")
    make_repo(repo, {"shared/shared_ops.py": "FACTOR = 3.0\n"})
    on_path = Alone(pythonpath=("../shared",))
    return Trees(repo, on_path, on_path, subfolder="app")


@pytest.mark.parametrize(
    "scenario",
    [
        _loader_cached_by_relative_path,
        _environ_set_at_import,
        _registry_filled_at_import,
        _registry_bound_at_import,
        _partial_assigned_onto_installed,
        _policy_env_changed,
        _src_layout_on_pythonpath,
        _monorepo_shared_code,
    ],
    ids=lambda scenario: scenario.__name__.strip("_"),
)
def test_trees_that_differ_alone_differ_against_the_base(
    tmp_path: Path, scenario: Callable[[Path], Trees]
) -> None:
    trees = scenario(tmp_path)
    head, base = _both_alone(trees, tmp_path)
    assert _truth(head, base) == "differs", (head, base)
    compared = _compared(trees)
    assert compared.base["status"] == "compared", compared
    assert compared.results == "differs", compared
    assert compared.gate.returncode == 1, compared
    if head.dtype != base.dtype:  # the policy's env: the head's step in 64 bits, the base's not
        assert (head.dtype, base.dtype) == ("float64", "float32"), (head, base)
        assert "float64" in json.dumps(compared.base["results"]), compared


# -- false failures: the trees agree alone, and the comparison must pass ----------------------

STEP_NUMPY_SEEDED = """
np.random.seed(0)
W = np.random.rand(8).astype(np.float32)  # drawn at import


def step(x):
    noise = np.random.rand(8).astype(np.float32)  # and in every step, from the same stream
    return {"y": x * jax.device_put(W) + jax.device_put(noise)}
"""


def _numpy_seeded_at_import(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_NUMPY_SEEDED, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_NUMPY_SEEDED + "REVIEWED = True\n"})
    return Trees(repo)


STEP_RANDOM_SEEDED = """
import random

random.seed(0)
SCALE = random.random()  # drawn at import


def step(x):
    return {"y": x * (SCALE + random.random())}  # and in every step, from the same stream
"""


def _random_seeded_at_import(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_RANDOM_SEEDED, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_RANDOM_SEEDED + "REVIEWED = True\n"})
    return Trees(repo)


COUNTER = """
STEPS = 0


def tick():
    global STEPS
    STEPS += 1
    return STEPS
"""

STEP_COUNTED = """
import step_counter


def step(x):
    return {"y": x * float(step_counter.tick())}
"""


def _counter_in_installed_module(tmp_path: Path) -> Trees:
    installed = _installed(tmp_path, {"step_counter.py": COUNTER})
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_COUNTED, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_COUNTED + "REVIEWED = True\n"})
    return Trees(repo, Alone(pythonpath=(installed,)), Alone(pythonpath=(installed,)))


STEP_QUIET = """
import warnings

warnings.simplefilter("error")  # the head's: every warning of its own is a bug


def step(x):
    return {"y": double(x)}
"""

STEP_WARNS = """
import warnings


def step(x):
    warnings.warn("the slow path", UserWarning)  # harmless, printed once
    return {"y": double(x)}
"""


def _warnings_made_errors_in_head(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + DOUBLE + STEP_WARNS, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + DOUBLE + STEP_QUIET})
    return Trees(repo)


STEP_SETERR = """
np.seterr(all="raise")  # the head's: a floating-point error in NumPy is a bug


def step(x):
    return {"y": double(x)}
"""

STEP_DIVIDES = """
def step(x):
    np.float32(1.0) / np.zeros(1, np.float32)  # inf, and a RuntimeWarning: harmless
    return {"y": double(x)}
"""


def _seterr_raise_in_head(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + DOUBLE + STEP_DIVIDES, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + DOUBLE + STEP_SETERR})
    return Trees(repo)


PAIRS = """
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b
"""

STEP_PYTREE = """
import pairs_lib

jax.tree_util.register_pytree_node(
    pairs_lib.Pair, lambda p: ((p.a, p.b), None), lambda _, c: pairs_lib.Pair(*c)
)


@jax.jit
def added(pair):
    return pair.a + pair.b


def step(x):
    return {"y": added(pairs_lib.Pair(x, x * 2.0))}
"""


def _pytree_registered_by_both(tmp_path: Path) -> Trees:
    installed = _installed(tmp_path, {"pairs_lib.py": PAIRS})
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_PYTREE, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_PYTREE + "REVIEWED = True\n"})
    return Trees(repo, Alone(pythonpath=(installed,)), Alone(pythonpath=(installed,)))


STEP_MODEL = """
import model


def step(x):
    return {"y": model.forward(x)}
"""


def _python_path_moved(tmp_path: Path) -> Trees:
    repo = init(tmp_path / "repo")
    policy = POLICY.replace("version: 1\n", "version: 1\npython_path: [../FOLDER]\n")
    model = "def forward(x):\n    return x * 2.0\n"
    files = {"steps.py": MAKE + STEP_MODEL, "policies/p.yaml": policy.replace("FOLDER", "lib")}
    commit(repo, {**files, "lib/model.py": model}, "base")
    git(repo, "mv", "lib", "src")
    make_repo(repo, {"policies/p.yaml": policy.replace("FOLDER", "src")})
    return Trees(repo, Alone(python_path=("src",)), Alone(python_path=("lib",)))


@pytest.mark.parametrize(
    "scenario",
    [
        _numpy_seeded_at_import,
        _random_seeded_at_import,
        _counter_in_installed_module,
        _warnings_made_errors_in_head,
        _seterr_raise_in_head,
        _pytree_registered_by_both,
        _python_path_moved,
    ],
    ids=lambda scenario: scenario.__name__.strip("_"),
)
def test_trees_that_agree_alone_match_the_base_and_pass(
    tmp_path: Path, scenario: Callable[[Path], Trees]
) -> None:
    trees = scenario(tmp_path)
    head, base = _both_alone(trees, tmp_path)
    assert _truth(head, base) == "matches", (head, base)
    compared = _compared(trees)
    assert compared.base["status"] == "compared", compared
    assert compared.base["error"] is None, compared
    assert compared.region["error"] is None, compared
    assert compared.results == "matches", compared
    assert compared.region["status"] == "passed", compared
    assert compared.gate.returncode == 0, compared
    assert "Duplicate custom PyTreeDef" not in str(compared), compared


# -- a slowdown the head's import brings ----------------------------------------------------

STEP_PYTHON_WORK = """
def step(x):
    total = sum(float(i) * 1.5 for i in range(4000))  # allocates: a float each turn
    return {"y": x + total}
"""

TRACED = """
import tracemalloc

tracemalloc.start()  # the head's memory profiling, left on: every allocation is traced
"""

TIMED_POLICY = """
version: 1
defaults:
  warmup: 1
  guarded_runs: 1
  repeats: 5
  timing: {rounds: 20, max_rounds: 60, max_slowdown: 1.5}
regions:
  - {name: step, step: "steps:step", setup: "steps:make"}
"""


def test_a_tracer_the_head_starts_at_import_makes_its_step_slower(tmp_path: Path) -> None:
    """In one process the base's step ran traced too, and the timing said "unchanged"."""
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_PYTHON_WORK, "policies/p.yaml": TIMED_POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + TRACED + STEP_PYTHON_WORK})
    trees = Trees(repo)
    head, base = _both_alone(trees, tmp_path, runs=21)
    assert _truth(head, base) == "matches", (head, base)
    assert head.median_s is not None, head
    assert base.median_s is not None, base
    assert head.median_s > 3 * base.median_s, (head, base)  # ~10x on the 2-core machine
    compared = _compared(trees)
    timing = compared.base["timing"]
    assert isinstance(timing, dict), compared
    assert compared.base["apart"] == "", compared  # side by side, in paired rounds
    assert timing["paired"] is True, timing
    assert timing["verdict"] == "slower", compared
    assert timing["head_median_s"] > 1.5 * timing["base_median_s"], timing
    assert compared.results == "matches", compared


# -- a transfer the head's logging makes ------------------------------------------------------

STEP_LOGGED = """
import logging

log = logging.getLogger("steps")


def step(x):
    y = double(x)
    log.debug("y: %s", y)  # formats y, reading it back to the host, only when DEBUG is on
    return {"y": y}
"""

DEBUG_ON = """
logging.basicConfig(level=logging.DEBUG)  # the head's: verbose while it is being debugged
"""


def _new_reads(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The region's device-to-host transfers at the step's ``log.debug`` line."""
    return [
        t
        for t in report["transfers"]
        if t["direction"] == "device-to-host" and "log.debug" in (t["source"] or "")
    ]


def test_a_read_the_heads_logging_brings_is_new_not_already_in_the_base(tmp_path: Path) -> None:
    """In one process the base's step logged at the head's level too: its read made the head's
    look "already in the base"."""
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + DOUBLE + STEP_LOGGED, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + DOUBLE + STEP_LOGGED + DEBUG_ON})
    trees = Trees(repo)
    head, base = _both_alone(trees, tmp_path)
    assert _truth(head, base) == "matches", (head, base)
    # Alone, under the gate without --base: the head reads y back at the log line, the base not.
    base_root = tmp_path / "base-alone"
    alone = {}
    for name, root in (("head", repo), ("base", base_root)):
        gate = run_gate(root, "run", "--json", "alone.json")
        assert gate.returncode in (0, 1), gate
        document = json.loads((root / "alone.json").read_text())
        (alone[name],) = (r for suite in document["suites"] for r in suite["regions"])
    assert _new_reads(alone["head"]), alone["head"]
    assert not _new_reads(alone["base"]), alone["base"]
    compared = _compared(trees)
    reads = _new_reads(compared.region)
    assert reads, compared
    assert all(t["failing"] and not t["in_base"] for t in reads), compared
    assert compared.base["already_in_base"] == 0, compared
    assert compared.region["status"] == "failed", compared
    assert compared.gate.returncode == 1, compared
    assert compared.results == "matches", compared


# -- messages ---------------------------------------------------------------------------------


def test_a_base_whose_step_does_not_parse_is_named_and_no_rename_is_suggested(
    tmp_path: Path,
) -> None:
    repo = init(tmp_path / "repo")
    broken = MAKE + STEP_ARANGE.replace("def step(x):", "def step(x)")
    commit(repo, {"steps.py": broken, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_ARANGE})
    trees = Trees(repo)
    head, base = _both_alone(trees, tmp_path)
    assert head.raised is None, head
    assert str(base.raised).startswith("SyntaxError"), base
    compared = _compared(trees)
    assert compared.base["status"] == "base_failed", compared
    assert compared.gate.returncode == 1, compared
    message = compared.base["error"]["message"]
    assert "the base" in message.lower(), compared
    assert "SyntaxError" in message or "does not parse" in message, compared
    assert "import" in message or "does not parse" in message, compared
    # A base that does not parse is no renamed region: the one-worker gate said "If it is new in
    # this change, give the region a new name in the policy".
    assert compared.base["renamed"] == [], compared
    said = f"{compared.gate.stdout}\n{compared.gate.stderr}\n{compared.base['error']}".lower()
    assert "rename" not in said, compared
    assert "new name" not in said, compared
    # The head is still judged on its own.
    assert compared.region["error"] is None, compared
