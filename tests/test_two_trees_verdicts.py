"""``run --base`` against each tree run alone, on ordinary repositories that meet in one worker.

Each scenario is a repository a new user could have: a module of the same name as an installed
one, a registry that caches what it resolved, a step that switches JAX to 64 bits lazily, the
README's own install (``.venv`` in the repository, the gate installed in it). Each test runs
each tree alone (its step in a Python of its own, as the user would), then ``run --base`` through
the real CLI, and holds the verdict to what the trees do alone: sharing a worker may cost a run
apart, never a verdict.

The gates run under the accelerator's planted rule (tests/accelerator_rule.py): a second process
that opened the device would fail as on a TPU.
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

pytestmark = pytest.mark.usefixtures("one_process_on_the_device")

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


def _alone(root: Path, installed: Path | None = None, setup: str = "make") -> str:
    """The tree at ``root`` run alone, as its user runs it (no gate, no planted device): its
    step's output, dtype first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("PYTHONPATH", None)
    if installed is not None:
        env["PYTHONPATH"] = str(installed)
    done = run([sys.executable, "-c", ALONE, setup], cwd=root, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _base_tree(repo: Path, tmp_path: Path) -> Path:
    """The base commit checked out on its own, to run it alone."""
    alone = tmp_path / "base-alone"
    git(repo, "worktree", "add", "--detach", str(alone), "HEAD")
    return alone


def _compared(repo: Path, installed: Path | None = None) -> dict[str, object]:
    """``run --base HEAD`` of ``repo``: its region's comparison with the base, as the JSON
    report has it, and the gate's terminal report under ``_stdout``."""
    with pytest.MonkeyPatch.context() as patch:
        if installed is not None:  # inherited: the planted rule's sitecustomize goes first
            patch.setenv("PYTHONPATH", str(installed))
        done = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
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


# -- a module of the same name as an installed one --------------------------------------

MATHLIB = """
import os

import jax

with open(os.environ["MATHLIB_LOG"], "a") as log:  # each import of this file, once a line
    log.write({who!r} + "\\n")


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


@pytest.mark.parametrize("package", [False, True], ids=["module", "package"])
def test_an_installed_module_the_base_displaced_is_never_imported_again_at_a_switch(
    tmp_path: Path, mathlib_log: Path, package: bool
) -> None:
    """Were it popped with the base's copy at every switch, the head would import it again
    (and compile its jitted function again) in every round: a false "slower"."""
    repo, installed = _mathlib_repo(tmp_path, "2.0", package)
    head_alone = _alone(repo, installed)
    base_alone = _alone(_base_tree(repo, tmp_path), installed)
    assert head_alone == base_alone == "float32 [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]"
    mathlib_log.write_text("")
    (repo / "policies/p.yaml").write_text(POLICY.replace("timing: off", "repeats: 20"))
    base = _compared(repo, installed)
    assert base["apart"] == "", base
    assert _results(base) == "matches", base
    timing = base["timing"]
    assert isinstance(timing, dict), base
    assert timing["paired"] is True, timing
    assert timing["rounds"] >= 5, timing  # enough switches to have imported it again
    assert timing["verdict"] != "slower", timing  # the false 4.34x
    # One worker held both trees: the installed file was imported once, the base's once.
    assert mathlib_log.read_text().split().count("installed") == 1, mathlib_log.read_text()


@pytest.mark.parametrize("package", [False, True], ids=["module", "package"])
def test_an_import_of_a_name_the_base_ships_finds_the_bases_file(
    tmp_path: Path, mathlib_log: Path, package: bool
) -> None:
    """The head's tree was imported first, and with it the installed ``mathlib``; the base's
    own copy scales by 4, so the results differ, as they do alone."""
    repo, installed = _mathlib_repo(tmp_path, "4.0", package, head_step=STEP_AT_TOP)
    assert _alone(repo, installed) != _alone(_base_tree(repo, tmp_path), installed)
    base = _compared(repo, installed)
    assert base["apart"] == "", base
    assert _results(base) == "differs", base


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
def test_a_tree_that_runs_the_other_trees_code_runs_apart_and_says_which(
    tmp_path: Path, jitted: bool, where: str
) -> None:
    """An installed registry caches what it resolved: in one worker the base would run the
    head's ``forward`` (in its step, or in its setup), and its results would "match"."""
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
    line = 4 if jitted else 1  # a decorated function starts at its decorator
    assert (
        f"the base's run ran the head's code, forward() of module model (model.py:{line})"
        in str(base["apart"])
    ), base
    # Alone, the steps differ; or, where setup ran the model, setup's inputs do (and outputs
    # of different inputs are not compared): never "matches".
    assert _results(base) == ("differs" if where == "step" else "not compared"), base
    assert "ran apart" in str(base["_stdout"]), base


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


@pytest.mark.parametrize("where", ["step", "setup"])
def test_options_a_tree_sets_as_it_runs_make_the_trees_run_apart(
    tmp_path: Path, where: str
) -> None:
    """The head's step (or setup) switches JAX to 64 bits; in one worker the base would then
    run in 64 bits too, and its float32 results would "match"."""
    repo = init(tmp_path / "repo")
    plain = STEP_PLAIN
    commit(repo, {"steps.py": MAKE + plain, "policies/p.yaml": POLICY}, "base")
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
    apart = str(base["apart"])
    assert "the head's run changed JAX's process-wide options (jax_enable_x64: False → True" in (
        apart
    ), base
    assert "while compiling), and one process has one set of them" in apart, base
    assert _results(base) == "differs", base
    assert "float64" in json.dumps(base["results"]), base


def test_options_both_trees_leave_alone_share_a_worker(tmp_path: Path) -> None:
    """The gate's own runs change nothing a late-configuration check would see."""
    repo = init(tmp_path / "repo")
    plain = STEP_PLAIN
    commit(repo, {"steps.py": MAKE + plain, "policies/p.yaml": POLICY}, "base")
    base = _compared(repo)
    assert base["apart"] == "", base
    assert _results(base) == "matches", base


# -- the README's own install: .venv in the repository -----------------------------------

STEP_VENV = """
import os


def step(x):
    import jax.scipy.special  # lazily: jax lives in the repository's .venv
    import native_ops  # an extension module installed in that .venv
    import vcs_helpers  # a package pip checked out into the .venv's src folder

    with open(os.environ["SPECIAL_LOG"], "a") as log:
        log.write(f"{id(jax.scipy.special)},{id(native_ops)},{id(vcs_helpers)}\\n")
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


def test_the_readmes_venv_in_the_repository_is_no_trees_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jax, an extension module and a source checkout, all in the repository's ``.venv``: none
    is the head's own code, so the trees share a worker and one copy of each module."""
    repo = init(tmp_path / "repo")
    (repo / ".gitignore").write_text(".venv/\n")
    commit(repo, {"steps.py": MAKE + STEP_VENV, "policies/p.yaml": POLICY}, "base")
    python = _readme_venv(repo)
    log = tmp_path / "special.log"
    monkeypatch.setenv("SPECIAL_LOG", str(log))
    gate = [python, "-m", "gate", "run", "--base", "HEAD", "--json", "r.json"]
    done = run(gate, cwd=repo, env=gate_env(), timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    document = json.loads((repo / "r.json").read_text())
    (region,) = (r for suite in document["suites"] for r in suite["regions"])
    base = region["base"]
    assert base["apart"] == "", base
    assert base["results"]["status"] == "matches", base
    # Both trees' runs used one copy of each module: none imported a second time.
    ids = set(log.read_text().split())
    assert len(ids) == 1, log.read_text()


def test_regions_compared_before_the_trees_parted_stand_and_the_rest_run_apart(
    tmp_path: Path,
) -> None:
    """The policy's first region shares the worker; its second switches JAX to 64 bits as it
    runs: that region, and only it, is compared with the trees run apart."""
    repo = init(tmp_path / "repo")
    policy = POLICY + '  - {name: x64, step: "steps:step_x64", setup: "steps:make"}\n'
    lazy = STEP_X64.replace("def step(x):", "def step_x64(x):")
    in_32_bits = "\n".join(line for line in lazy.splitlines() if "import precision" not in line)
    commit(repo, {"steps.py": MAKE + STEP_PLAIN + in_32_bits, "policies/p.yaml": policy}, "base")
    make_repo(repo, {"steps.py": MAKE + STEP_PLAIN + lazy, "precision.py": PRECISION})
    done = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert done.returncode == 1, done
    document = json.loads((repo / "r.json").read_text())
    bases = {r["name"]: r["base"] for suite in document["suites"] for r in suite["regions"]}
    assert bases["step"]["apart"] == "", bases["step"]
    assert bases["step"]["results"]["status"] == "matches", bases["step"]
    assert "jax_enable_x64: False → True, while compiling" in bases["x64"]["apart"], bases
    assert bases["x64"]["results"]["status"] == "differs", bases["x64"]
