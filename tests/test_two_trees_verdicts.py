"""``run --base`` against each tree run alone, on ordinary repositories where the trees meet.

Each scenario is a repository a new user could have: a module of the same name as an installed
one, a registry that caches what it resolved, a step that switches JAX to 64 bits lazily, the
README's own install (``.venv`` in the repository, the gate installed in it). Each test runs
each tree alone (its step in a Python of its own, as the user would), then ``run --base`` through
the real CLI, and holds the verdict to what the trees do alone.

Each tree's regions run in a worker process of its own, started in that tree's root: on the
plain CPU both workers live side by side (``base.apart`` is ""). A few scenarios run again under
the accelerator's planted one-process rule (tests/accelerator_rule.py), where the trees' workers
hold the device in turn: the verdict is the same.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
from cli_helpers import gate_env, make_repo, run_gate
from git_helpers import commit, git, init
from processes import run
from test_two_trees import _compile_extension

from gate.package import PACKAGE_DIR

MAKE = """
import jax
import numpy as np


def make():
    return (jax.device_put(np.arange(8, dtype=np.float32)),)
"""

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 3, timing: off}
regions:
  - {name: step, step: "steps:step", setup: "steps:make"}
"""

# One run of a tree's step, alone in a Python of its own: what the step returns, as text.
ALONE = """
import sys
sys.path.insert(0, ".")
import numpy as np
import steps
out = steps.step(*getattr(steps, sys.argv[1])())["y"]
print(out.dtype, np.asarray(out).tolist())
"""

# Why the trees ran in turn, as ``base.apart`` says it under the planted one-process rule.
REFUSED_BESIDE = "the device refused the base's worker beside the head's"
ONE_CHIP = "the device admits one process at a time"


def _alone(
    root: Path, installed: Path | None = None, setup: str = "make", python: Path | None = None
) -> str:
    """The tree at ``root`` run alone, as its user runs it (no gate, no planted device): its
    step's output, dtype first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("PYTHONPATH", None)
    if installed is not None:
        env["PYTHONPATH"] = str(installed)
    argv = [str(python or sys.executable), "-c", ALONE, setup]
    done = run(argv, cwd=root, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _base_tree(repo: Path, tmp_path: Path) -> Path:
    """The base commit checked out on its own, to run it alone."""
    alone = tmp_path / "base-alone"
    git(repo, "worktree", "add", "--detach", str(alone), "HEAD")
    return alone


def _compared(repo: Path, installed: Path | None = None) -> dict[str, object]:
    """``run --base HEAD`` of ``repo``: its region's comparison with the base, as the JSON
    report has it, and the gate's terminal report under ``_stdout``. With ``installed``, the
    gate is a process of its own with that folder on its ``PYTHONPATH``, as the user's."""
    with pytest.MonkeyPatch.context() as patch:
        if installed is not None:  # inherited: the planted rule's sitecustomize goes first
            patch.setenv("PYTHONPATH", str(installed))
        done = run_gate(
            repo, "run", "--base", "HEAD", "--json", "r.json", process=installed is not None
        )
    assert done.returncode in (0, 1), done
    document = json.loads((repo / "r.json").read_text())
    (region,) = (r for suite in document["suites"] for r in suite["regions"])
    base = region["base"]
    assert isinstance(base, dict), region
    base["_stdout"] = done.stdout
    return base


def _results(base: dict[str, object]) -> str:
    results = base["results"]
    assert isinstance(results, dict), base
    return str(results["status"])


def _side_by_side(base: dict[str, object]) -> None:
    """Both trees' workers were up at once, each in its own tree: nothing ran apart."""
    assert base["apart"] == "", base
    assert "ran apart" not in str(base["_stdout"]), base["_stdout"]


def _in_turn(request: pytest.FixtureRequest, how: str) -> str:
    """Under the planted one-process rule for ``how`` "in-turn" (with the test's ``chips``
    mark, if any): what ``base.apart`` must say; "" for "side-by-side" (the plain CPU)."""
    if how == "side-by-side":
        return ""
    request.getfixturevalue("one_process_on_the_device")
    return ONE_CHIP if request.node.get_closest_marker("chips") else REFUSED_BESIDE


def _as_run(base: dict[str, object], apart: str) -> None:
    """The trees ran as the device lets them: side by side, or (``apart``) in turn, said so."""
    if not apart:
        _side_by_side(base)
        return
    assert apart in str(base["apart"]), base
    assert "ran apart" in str(base["_stdout"]), base["_stdout"]


# -- a module of the same name as an installed one --------------------------------------

MATHLIB = """
import os

import jax

with open(os.environ["MATHLIB_LOG"], "a") as log:  # each import of this file: whose, where
    log.write({who!r} + " " + str(os.getpid()) + "\\n")


@jax.jit
def scale(x):
    return x * {factor}
"""

STEP_AT_TOP = """
import mathlib


def step(x):
    return {"y": mathlib.scale(x)}
"""

STEP_LAZY = """
def step(x):
    import mathlib  # the installed one: the head no longer ships its own

    return {"y": mathlib.scale(x)}
"""


def _mathlib_repo(
    tmp_path: Path, base_factor: str, package: bool = False, head_step: str = STEP_LAZY
) -> tuple[Path, Path]:
    """The base ships ``mathlib`` and imports it at the top; the head deletes its copy and
    imports the installed one (inside the step, or at the top with ``head_step``). With
    ``package``, both are packages whose ``scale`` lives in a submodule."""
    installed, repo = tmp_path / "installed", init(tmp_path / "repo")

    def files(who: str, factor: str) -> dict[str, str]:
        text = MATHLIB.format(who=who, factor=factor)
        if not package:
            return {"mathlib.py": text}
        return {"mathlib/__init__.py": "from mathlib.ops import scale\n", "mathlib/ops.py": text}

    make_repo(installed, files("installed", "2.0"))
    commit(
        repo,
        {
            **files("base", base_factor),
            "steps.py": MAKE + STEP_AT_TOP,
            "policies/p.yaml": POLICY,
        },
        "base",
    )
    shutil.rmtree(repo / "mathlib") if package else (repo / "mathlib.py").unlink()
    make_repo(repo, {"steps.py": MAKE + head_step})
    return repo, installed


@pytest.fixture
def mathlib_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MATHLIB_LOG", str(tmp_path / "mathlib.log"))
    return tmp_path / "mathlib.log"


def _imported_once_per_tree(log: Path) -> None:
    """Since ``log`` was emptied: the head's worker imported the installed ``mathlib`` once,
    the base's worker its own copy once, each in a process of its own, neither the other's."""
    imports = [tuple(line.split()) for line in log.read_text().splitlines()]
    assert sorted(who for who, _ in imports) == ["base", "installed"], imports
    assert len({pid for _, pid in imports}) == 2, imports


@pytest.mark.parametrize("package", [False, True], ids=["module", "package"])
def test_an_installed_module_in_place_of_the_bases_is_imported_once_in_the_heads_worker(
    tmp_path: Path, mathlib_log: Path, package: bool
) -> None:
    """The head imports the installed ``mathlib`` where the base shipped its own: imported
    again in every round, it would compile its jitted function again in every round, a false
    "slower" (the issue's 4.34x). Each tree's worker imports the copy it finds alone, once."""
    repo, installed = _mathlib_repo(tmp_path, "2.0", package)
    head_alone = _alone(repo, installed)
    base_alone = _alone(_base_tree(repo, tmp_path), installed)
    assert head_alone == base_alone == "float32 [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]"
    mathlib_log.write_text("")
    (repo / "policies/p.yaml").write_text(POLICY.replace("timing: off", "repeats: 20"))
    base = _compared(repo, installed)
    _side_by_side(base)
    assert _results(base) == "matches", base
    timing = base["timing"]
    assert isinstance(timing, dict), base
    assert timing["paired"] is True, timing
    assert timing["verdict"] != "slower", timing  # the false 4.34x
    _imported_once_per_tree(mathlib_log)


@pytest.mark.parametrize(
    ("package", "how"),
    [
        (False, "side-by-side"),
        (True, "side-by-side"),
        pytest.param(False, "in-turn", marks=pytest.mark.chips(1)),
    ],
    ids=["module", "package", "module-on-one-chip"],
)
def test_an_import_of_a_name_the_base_ships_finds_the_bases_file(
    tmp_path: Path, mathlib_log: Path, request: pytest.FixtureRequest, package: bool, how: str
) -> None:
    """The head imports the installed ``mathlib`` at the top; the base's own copy scales by 4,
    so the results differ, as they do alone. On a TPU chip the trees' workers hold it in
    turn, and the verdict is the same."""
    apart = _in_turn(request, how)
    repo, installed = _mathlib_repo(tmp_path, "4.0", package, head_step=STEP_AT_TOP)
    head_alone = _alone(repo, installed)
    base_alone = _alone(_base_tree(repo, tmp_path), installed)
    assert head_alone == "float32 [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]"
    assert base_alone == "float32 [0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0]"
    mathlib_log.write_text("")
    base = _compared(repo, installed)
    _as_run(base, apart)
    assert _results(base) == "differs", base
    _imported_once_per_tree(mathlib_log)


# -- a cache outside both trees ---------------------------------------------------------

REGISTRY = """
import functools
import importlib


@functools.lru_cache(maxsize=None)
def resolve(name):
    module, attribute = name.split(":")
    return getattr(importlib.import_module(module), attribute)
"""

STEP_RESOLVED = """
def step(x):
    import registry

    return {"y": registry.resolve("model:forward")(x)}
"""


SETUP_RESOLVED = """
def make_resolved():
    import registry

    return registry.resolve("model:forward")(*make()),


def step(x):
    return {"y": x * 1.0}
"""


@pytest.mark.parametrize(
    ("jitted", "where"),
    [(False, "step"), (True, "step"), (False, "setup")],
    ids=["python", "jitted", "setup"],
)
def test_a_registry_that_caches_what_it_resolved_resolves_each_trees_own_code(
    tmp_path: Path, jitted: bool, where: str
) -> None:
    """An installed registry caches what it resolved: had the base met the head's cache, it
    would run the head's ``forward`` (in its step, or in its setup), and its results would
    "match". Each tree's worker resolves its own."""
    installed, repo = tmp_path / "installed", init(tmp_path / "repo")
    make_repo(installed, {"registry.py": REGISTRY})
    decorator = "import jax\n\n\n@jax.jit\n" if jitted else ""
    model = decorator + "def forward(x):\n    return x * {}\n"
    steps = MAKE + (STEP_RESOLVED if where == "step" else SETUP_RESOLVED)
    policy = POLICY if where == "step" else POLICY.replace('"steps:make"', '"steps:make_resolved"')
    commit(
        repo,
        {"model.py": model.format("2.0"), "steps.py": steps, "policies/p.yaml": policy},
        "base",
    )
    make_repo(repo, {"model.py": model.format("3.0")})
    setup = "make" if where == "step" else "make_resolved"
    base_tree = _base_tree(repo, tmp_path)
    assert _alone(repo, installed, setup) != _alone(base_tree, installed, setup)
    base = _compared(repo, installed)
    _side_by_side(base)
    # Alone, the steps differ; or, where setup ran the model, setup's inputs do (and outputs
    # of different inputs are not compared): never "matches".
    assert _results(base) == ("differs" if where == "step" else "not compared"), base


# -- configuration set late --------------------------------------------------------------

STEP_PLAIN = """
import jax.numpy as jnp


def step(x):
    return {"y": jnp.arange(8.0) * 2.0 + x}
"""

PRECISION = """
import jax

jax.config.update("jax_enable_x64", True)  # process-wide, when first imported
"""

STEP_X64 = """
import jax.numpy as jnp


def step(x):
    import precision  # lazily: the first call switches the process to 64 bits

    return {"y": jnp.arange(8.0) * 2.0 + x}
"""

SETUP_X64 = """
import jax.numpy as jnp


def make_x64():
    jax.config.update("jax_enable_x64", True)
    return make()


def step(x):
    return {"y": jnp.arange(8.0) * 2.0 + x}
"""


@pytest.mark.parametrize(
    ("where", "how"),
    [("step", "side-by-side"), ("setup", "side-by-side"), ("step", "in-turn")],
    ids=["step", "setup", "step-in-turn"],
)
def test_options_a_tree_sets_as_it_runs_stay_in_its_own_worker(
    tmp_path: Path, request: pytest.FixtureRequest, where: str, how: str
) -> None:
    """The head's step (or setup) switches JAX to 64 bits; had the base run in that process,
    it would run in 64 bits too, and its float32 results would "match". Where the device
    refuses the base's worker beside the head's, the trees run in turn: the verdict is the
    same."""
    apart = _in_turn(request, how)
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": MAKE + STEP_PLAIN, "policies/p.yaml": POLICY}, "base")
    if where == "step":
        make_repo(repo, {"steps.py": MAKE + STEP_X64, "precision.py": PRECISION})
    else:
        make_repo(repo, {"steps.py": MAKE + SETUP_X64})
        policy = (repo / "policies/p.yaml").read_text().replace('"steps:make"', '"steps:make_x64"')
        (repo / "policies/p.yaml").write_text(policy)
    setup = "make_x64" if where == "setup" else "make"
    head_alone, base_alone = _alone(repo, setup=setup), _alone(_base_tree(repo, tmp_path))
    assert head_alone.startswith("float64")
    assert base_alone.startswith("float32")
    base = _compared(repo)
    _as_run(base, apart)
    assert _results(base) == "differs", base
    assert "float64" in json.dumps(base["results"]), base


def test_trees_that_leave_options_alone_match_side_by_side(tmp_path: Path) -> None:
    """The gate's own runs change nothing in either tree's worker: unchanged trees match."""
    repo = init(tmp_path / "repo")
    # compare: always, or the tree, the same as its base, would run once (its footprint).
    policy = POLICY.replace("timing: off}", "timing: off, compare: always}")
    assert policy != POLICY
    commit(repo, {"steps.py": MAKE + STEP_PLAIN, "policies/p.yaml": policy}, "base")
    assert _alone(repo) == _alone(_base_tree(repo, tmp_path))
    base = _compared(repo)
    _side_by_side(base)
    assert _results(base) == "matches", base


# -- the README's own install: .venv in the repository -----------------------------------

STEP_VENV = """
import os


def step(x):
    import jax.scipy.special  # lazily: jax lives in the repository's .venv
    import native_ops  # an extension module installed in that .venv
    import vcs_helpers  # a package pip checked out into the .venv's src folder

    if "SPECIAL_LOG" in os.environ:  # the gate's runs: where each module came from
        files = [m.__file__ for m in (jax.scipy.special, native_ops, vcs_helpers)]
        with open(os.environ["SPECIAL_LOG"], "a") as log:
            log.write(" ".join([str(os.getpid()), *files]) + "\\n")
    return {"y": jax.scipy.special.erf(x) * native_ops.SCALE * vcs_helpers.ONE}
"""


def _readme_venv(repo: Path) -> Path:
    """``python -m venv .venv`` in the repository, with jax, the gate and an extension module
    installed in it (copies: their files lie under the repository, as pip puts them), and the
    rest of this environment's packages reachable through a ``.pth`` file."""
    venv = repo / ".venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    done = run([base_python, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    assert done.returncode == 0, done.stderr
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    assert site.is_dir(), list(venv.rglob("site-packages"))
    ours = Path(sysconfig.get_paths()["purelib"])
    shutil.copytree(ours / "jax", site / "jax", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PACKAGE_DIR, site / "gate", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "outer.pth").write_text(f"{ours}\n")  # jaxlib, numpy, scipy, yaml, msgspec...
    _compile_extension(site)
    make_repo(venv / "src" / "vcs-helpers", {"vcs_helpers.py": "ONE = 1.0\n"})
    (site / "vcs.pth").write_text(f"{venv / 'src' / 'vcs-helpers'}\n")
    return venv / "bin" / "python"


def test_the_readmes_venv_in_the_repository_serves_both_trees_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jax, an extension module and a source checkout, all in the repository's ``.venv`` (which
    git ignores: the base's checkout has none): none is the head's own code, so each tree's
    worker imports them from that ``.venv``, as each tree run alone with its Python does; nor
    is any in the region's footprint, so a change to prose alone runs the region once."""
    repo = init(tmp_path / "repo")
    (repo / ".gitignore").write_text(".venv/\n")
    policy = POLICY.replace("timing: off}", "timing: off, compare: always}")
    assert policy != POLICY
    commit(repo, {"steps.py": MAKE + STEP_VENV, "policies/p.yaml": policy}, "base")
    python = _readme_venv(repo)
    assert _alone(repo, python=python) == _alone(_base_tree(repo, tmp_path), python=python)
    log = tmp_path / "special.log"
    monkeypatch.setenv("SPECIAL_LOG", str(log))
    gate = [python, "-m", "gate", "run", "--base", "HEAD", "--json", "r.json"]
    done = run(gate, cwd=repo, env=gate_env(), timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    document = json.loads((repo / "r.json").read_text())
    (region,) = (r for suite in document["suites"] for r in suite["regions"])
    base = {**region["base"], "_stdout": done.stdout}
    _side_by_side(base)
    assert base["results"]["status"] == "matches", base
    # Two processes ran the step, each tree's worker, and every run's modules came from the
    # .venv (none from the base's checkout, which has none).
    runs = [line.split() for line in log.read_text().splitlines()]
    assert len({pid for pid, *_ in runs}) == 2, log.read_text()
    venv = str((repo / ".venv").resolve()) + os.sep
    files = {file for _, *found in runs for file in found}
    assert all(os.path.realpath(f).startswith(venv) for f in files), log.read_text()

    # Compared only when the change reaches it: the .venv is the environment's, not the tree's.
    # The reports outside the repository: git's changed paths are README.md's alone.
    commit(repo, {"policies/p.yaml": POLICY}, "the default rule")
    (repo / "README.md").write_text("changed\n")
    log.unlink()
    outside = [*gate[:-2], "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "r.xml")]
    done = run(outside, cwd=repo, env=gate_env(), timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert git(repo, "status", "--porcelain").split()[1:] == ["README.md"]
    (region,) = (
        r for s in json.loads((tmp_path / "r.json").read_text())["suites"] for r in s["regions"]
    )
    assert region["base"]["status"] == "unchanged", region["base"]
    assert not [f for f, _ in region["footprint"]["files"] if f.startswith(".venv/")], region
    assert len({line.split()[0] for line in log.read_text().splitlines()}) == 1, log.read_text()
