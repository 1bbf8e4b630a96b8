"""Two trees' code under ``run --base``: each tree's modules its own.

Each tree runs in a worker of its own (`gate.compare.session`), and both define modules of
the same names: ``import helpers`` finds that tree's copy, at the top of a module or lazily
inside a step. Trees whose modules set JAX's options differently at import, or that ship an
extension module of their own, are compared like any others: no process holds both.

The tests run on the CPU, where the two trees' workers hold the device side by side;
tests/test_base_compare.py runs the trees under the accelerator's planted rule.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
import textwrap
from pathlib import Path

from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

STEPS = """
import jax
import numpy as np

import helpers  # the module both trees define, at the top


def make():
    return (jax.device_put(np.arange(8, dtype=np.float32)),)


@jax.jit
def _scaled(x, scale):
    return x * scale


def at_top(x):
    return {"y": _scaled(x, helpers.SCALE)}


def lazily(x):
    import lazy_helpers  # inside the step: imported when the step first runs

    return {"y": _scaled(x, lazy_helpers.SCALE)}
"""

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 3, timing: off}
regions:
  - {name: at-top, step: "steps:at_top", setup: "steps:make"}
  - {name: lazily, step: "steps:lazily", setup: "steps:make"}
"""


def _base(repo: Path) -> dict[str, dict[str, object]]:
    document = json.loads((repo / "r.json").read_text())
    return {r["name"]: r["base"] for suite in document["suites"] for r in suite["regions"]}


def _repo(tmp_path: Path, scale: str) -> Path:
    repo = init(tmp_path / "repo")
    files = {
        "steps.py": STEPS,
        "helpers.py": "SCALE = 2.0\n",
        "lazy_helpers.py": "SCALE = 2.0\n",
        "policies/p.yaml": POLICY,
    }
    commit(repo, files, "base")
    make_repo(repo, {"helpers.py": f"SCALE = {scale}\n", "lazy_helpers.py": f"SCALE = {scale}\n"})
    return repo


def test_a_module_both_trees_define_differently_is_each_trees_own(tmp_path: Path) -> None:
    """The head's helpers scale by 3, the base's by 2: were the head's module used for both
    (or the base's), the results would match."""
    repo = _repo(tmp_path, "3.0")
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run
    for name in ("at-top", "lazily"):
        results = _base(repo)[name]["results"]
        assert isinstance(results, dict), results
        assert results["status"] == "differs", (name, results)
        assert "['y']" in json.dumps(results), results


def test_the_same_module_in_both_trees_matches_in_workers_side_by_side(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "2.0")
    # Unchanged, so run from both trees only when asked (tests/test_base_footprint.py).
    always = POLICY.replace("timing: off}", "timing: off, compare: always}")
    commit(repo, {"policies/p.yaml": always}, "compare always")
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 0, run
    for name in ("at-top", "lazily"):
        base = _base(repo)[name]
        assert base["apart"] == "", base
        assert isinstance(base["results"], dict)
        assert base["results"]["status"] == "matches", base


X64 = """
import jax

jax.config.update("jax_enable_x64", True)  # process-wide, at import
"""


def test_trees_that_set_jax_options_differently_are_each_under_their_own(
    tmp_path: Path,
) -> None:
    """The head turns on 64-bit at import: its worker is 64-bit, the base's is not, and the
    timing is still paired (each tree's worker takes its turns beside the other's)."""
    repo = _repo(tmp_path, "2.0")
    (repo / "policies/p.yaml").write_text(POLICY.replace("timing: off", "repeats: 6"))
    make_repo(repo, {"helpers.py": "SCALE = 2.0\n" + X64})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode in (0, 1), run
    for name in ("at-top", "lazily"):
        base = _base(repo)[name]
        assert base["apart"] == "", base
        timing = base["timing"]
        assert isinstance(timing, dict), base
        assert timing["paired"] is True, timing
    assert "ran apart" not in run.stdout, run


EXTENSION = """
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "native_ops", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_native_ops(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL) PyModule_AddObject(m, "SCALE", PyFloat_FromDouble(2.0));
    return m;
}
"""


def _compile_extension(folder: Path) -> None:
    """A real extension module, ``native_ops``, built with the machine's C compiler."""
    compiler = shutil.which(sysconfig.get_config_var("CC").split()[0]) or shutil.which("cc")
    assert compiler, "no C compiler: the python machines have gcc"
    source = folder / "native_ops.c"
    source.write_text(textwrap.dedent(EXTENSION))
    target = folder / f"native_ops{sysconfig.get_config_var('EXT_SUFFIX')}"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [compiler, "-shared", "-fPIC", f"-I{include}", "-o", str(target), str(source)],
        check=True,
        timeout=120,
    )
    source.unlink()


def test_a_tree_with_an_extension_module_of_its_own_is_compared(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "2.0")
    _compile_extension(repo)
    make_repo(repo, {"helpers.py": "from native_ops import SCALE\n"})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 0, run
    base = _base(repo)["at-top"]
    assert base["apart"] == "", base
    assert isinstance(base["results"], dict), base
    assert base["results"]["status"] == "matches", base
