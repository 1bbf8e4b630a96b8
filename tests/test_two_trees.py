"""Two trees' code under ``run --base``: each tree's modules its own.

Each tree runs in a worker of its own (`gate.compare.session`), and both define modules of
the same names: ``import helpers`` finds that tree's copy, at the top of a module or lazily
inside a step. Trees whose modules set JAX's options differently at import, or that ship an
extension module of their own, are compared like any others: no process holds both.
`gate.policy.trees`, which puts a tree's root first while its code runs, is tested here too.

The CLI tests run on the CPU, where the two trees' workers hold the device side by side;
tests/test_base_compare.py runs the trees under the accelerator's planted rule.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

from gate.package import PACKAGE_DIR
from gate.policy.trees import Trees
from gate.user_code import UserCode, owning_root

# -- the mechanism, in this process ------------------------------------------------


@pytest.fixture
def trees(tmp_path: Path) -> Iterator[tuple[Trees, Path, Path]]:
    """Two checkouts with modules of the same names; every module they define forgotten after."""
    head, base = tmp_path / "head", tmp_path / "base"
    for root, value in ((head, "head"), (base, "base")):
        make_repo(
            root,
            {
                "helpers.py": f"WHO = {value!r}\n",
                "pkg/__init__.py": "",
                "pkg/deep.py": f"WHO = {value!r}\n",
                "steps.py": """
                    def lazy():
                        import helpers  # inside the step: found when the step runs
                        from pkg import deep

                        return helpers.WHO, deep.WHO
                """,
            },
        )
    before = set(sys.modules)
    yield Trees(), head, base
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_each_tree_imports_its_own_module_of_a_shared_name(
    trees: tuple[Trees, Path, Path],
) -> None:
    switch, head, base = trees
    with switch.entered(head):
        import helpers  # type: ignore[import-not-found]

        head_helpers = helpers
        assert helpers.WHO == "head"
        assert Path.cwd() == head
        assert sys.path[0] == str(head)
    with switch.entered(base):
        import helpers

        assert helpers.WHO == "base"
        assert helpers is not head_helpers
        assert "pkg.deep" not in sys.modules  # the head never imported it: nothing to see
    with switch.entered(head):
        import helpers

        assert helpers is head_helpers  # the head's own copy, kept while the base ran


def test_a_lazy_import_inside_a_step_finds_the_tree_the_step_runs_in(
    trees: tuple[Trees, Path, Path],
) -> None:
    switch, head, base = trees
    with switch.entered(head):
        import steps  # type: ignore[import-not-found]

        head_step = steps.lazy
    with switch.entered(base):
        import steps

        base_step = steps.lazy
    for _ in range(2):  # and again, both trees' modules now imported
        with switch.entered(head):
            assert head_step() == ("head", "head")
        with switch.entered(base):
            assert base_step() == ("base", "base")


def test_leaving_a_tree_puts_the_path_and_the_working_directory_back(
    trees: tuple[Trees, Path, Path],
) -> None:
    switch, head, _ = trees
    path, cwd = list(sys.path), os.getcwd()
    with switch.entered(head, [head / "pkg"]):
        assert sys.path[:2] == [str(head / "pkg"), str(head)]
    assert (sys.path, os.getcwd()) == (path, cwd)


def test_a_module_outside_both_trees_is_shared_and_an_extension_of_a_trees_own_is_named(
    trees: tuple[Trees, Path, Path],
) -> None:
    switch, head, base = trees
    fake = types.ModuleType("native_ops")
    fake.__file__ = str(head / f"native_ops{sysconfig.get_config_var('EXT_SUFFIX')}")
    with switch.entered(head):
        import helpers

        sys.modules["native_ops"] = fake  # as if the head's own extension had been imported
    with switch.entered(base):
        assert "native_ops" not in sys.modules
        assert sys.modules["json"] is json  # outside both roots: one copy for both
    assert helpers.WHO == "head"


def _installed(tmp_path: Path, files: dict[str, str]) -> Path:
    """A folder of installed modules on `sys.path` (as PYTHONPATH puts one), for the test."""
    folder = make_repo(tmp_path / "installed", files)
    sys.path.append(str(folder))
    return folder


def test_an_installed_module_a_trees_own_displaced_is_put_back_when_the_tree_is_left(
    trees: tuple[Trees, Path, Path], tmp_path: Path
) -> None:
    switch, head, base = trees
    make_repo(base, {"mathlib.py": "WHO = 'base'\n"})
    installed = _installed(tmp_path, {"mathlib.py": "WHO = 'installed'\n"})
    try:
        with switch.entered(base):
            import mathlib  # type: ignore[import-not-found]

            assert mathlib.WHO == "base"
        with switch.entered(head):
            import mathlib

            shared = mathlib
            assert mathlib.WHO == "installed"
        for _ in range(2):
            with switch.entered(base):
                import mathlib

                assert mathlib.WHO == "base"
            with switch.entered(head):
                import mathlib

                assert mathlib is shared  # never imported again at a switch
    finally:
        sys.path.remove(str(installed))


def test_an_import_of_a_name_a_tree_ships_finds_its_file_not_the_installed_module(
    trees: tuple[Trees, Path, Path], tmp_path: Path
) -> None:
    switch, head, base = trees
    make_repo(base, {"mathlib/__init__.py": "WHO = 'base'\n", "mathlib/ops.py": ""})
    installed = _installed(
        tmp_path,
        {
            "mathlib/__init__.py": "WHO = 'installed'\n",
            "mathlib/ops.py": "",
            "mathlib/extra.py": "",
        },
    )
    try:
        with switch.entered(head):
            import mathlib.ops

            shared = mathlib
            assert mathlib.WHO == "installed"
        with switch.entered(base):
            import mathlib.ops

            assert mathlib.WHO == "base"
            assert Path(mathlib.ops.__file__).parent == base / "mathlib"
        with switch.entered(head):
            assert sys.modules["mathlib"] is shared
            assert Path(sys.modules["mathlib.ops"].__file__).parent == installed / "mathlib"
            import mathlib.extra  # the installed package's only: never the base's

        with switch.entered(base), pytest.raises(ModuleNotFoundError):
            import mathlib.extra
    finally:
        sys.path.remove(str(installed))


def test_what_the_process_held_before_any_tree_is_everyones(
    trees: tuple[Trees, Path, Path],
) -> None:
    """A tree's ``json.py`` does not displace the standard library's, which any run of that
    tree alone would meet already imported, nor a module imported before the trees."""
    switch, head, _ = trees
    make_repo(head, {"json.py": "WHO = 'head'\n"})
    with switch.entered(head):
        assert sys.modules["json"] is json


def test_a_venv_in_the_repository_is_no_trees_code(trees: tuple[Trees, Path, Path]) -> None:
    """The README's install: ``.venv`` in the repository root. What lies in it (installed
    packages, a checkout pip made in its ``src``) is shared, and never named as the tree's."""
    switch, head, base = trees
    venv = head / ".venv"
    make_repo(venv, {"pyvenv.cfg": "home = /usr/bin\n", "src/vcs/vcs_helpers.py": ""})
    fake = types.ModuleType("venv_ext")
    fake.__file__ = str(venv / "lib" / f"venv_ext{sysconfig.get_config_var('EXT_SUFFIX')}")
    sys.path.append(str(venv / "src" / "vcs"))
    try:
        with switch.entered(head):
            import vcs_helpers  # type: ignore[import-not-found]

            sys.modules["venv_ext"] = fake
        with switch.entered(base):
            assert sys.modules["vcs_helpers"] is vcs_helpers
            assert sys.modules["venv_ext"] is fake
    finally:
        sys.path.remove(str(venv / "src" / "vcs"))


def test_which_root_owns_a_file_is_one_rule_for_trees_and_the_users_line(tmp_path: Path) -> None:
    head = make_repo(tmp_path / "head", {"steps.py": "", ".venv/pyvenv.cfg": "", "venv.py": ""})
    base = make_repo(head / "base", {"steps.py": ""})  # a base checkout inside the head
    make_repo(head, {".venv/lib/python3/site-packages/pkg.py": "", ".venv/src/x/x.py": ""})
    roots = {str(head) + os.sep, str(base) + os.sep}
    assert owning_root(str(head / "steps.py"), roots) == str(head) + os.sep
    assert owning_root(str(head / "venv.py"), roots) == str(head) + os.sep
    assert owning_root(str(base / "steps.py"), roots) == str(base) + os.sep
    for venv_file in (".venv/lib/python3/site-packages/pkg.py", ".venv/src/x/x.py"):
        assert owning_root(str(head / venv_file), roots) is None
    assert owning_root(json.__file__, roots) is None
    assert owning_root(os.path.join(PACKAGE_DIR, "cli", "main.py"), roots | {"/"}) is None
    code = UserCode(head)
    assert code.is_user(str(head / "steps.py"))
    assert code.is_user(str(base / "steps.py"))  # a folder inside the root is the root's own
    assert not code.is_user(str(head / ".venv/src/x/x.py"))


# -- through the CLI, one worker holding both trees -------------------------------------

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
