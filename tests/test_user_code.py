"""gate.user_code: what is a library's code, wherever pip put it.

JAX is not always in site-packages: a TPU VM image may ship it in a folder of its own on
``PYTHONPATH`` (``pip install --target``; the lent v5e's is /opt/…). Its frames must still be
a library's: never the user's line, never a tree's, and turned off by the transfer map after
their first call.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate

from gate.cli.exit_codes import ExitCode
from gate.package import PACKAGE_DIR
from gate.user_code import UserCode, is_library, owning_root

HELPER = "def configure():\n    raise ValueError('no accelerator configured')\n"


def _installed(folder: Path) -> Path:
    """What ``pip install --target folder helperlib`` leaves: the package and its metadata."""
    return make_repo(
        folder,
        {
            "helperlib/__init__.py": HELPER,
            "helperlib-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: helperlib\n",
            "helperlib-1.0.dist-info/RECORD": "",
        },
    )


def test_a_package_pip_installed_into_a_folder_on_the_path_is_a_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _installed(tmp_path / "opt" / "scrub")
    plain = make_repo(tmp_path / "plain", {"helper.py": ""})
    repo = make_repo(tmp_path / "repo", {"steps.py": "", "helperlib-1.0.dist-info/RECORD": ""})
    checkout = make_repo(tmp_path / "checkout", {".git/HEAD": "", "x-1.dist-info/RECORD": ""})
    monkeypatch.chdir(repo)
    for folder in (target, plain, checkout, repo):
        monkeypatch.syspath_prepend(str(folder))
    assert is_library(str(target / "helperlib" / "__init__.py"))
    assert is_library(sys.modules["json"].__file__ or "")
    # Not every folder on the path: one pip never installed into, a repository (a tree the
    # gate runs, or a checkout on PYTHONPATH), and the working directory, the user's.
    assert not is_library(str(plain / "helper.py"))
    assert not is_library(str(checkout / "x.py"))
    assert not is_library(str(repo / "steps.py"))
    # What the import system skips, the rule skips: no error.
    monkeypatch.setattr(sys, "path", [*sys.path, b"/bytes/entry", Path("/a/path")])
    assert is_library(str(target / "helperlib" / "__init__.py"))
    # Off the path, the same folder is nobody's install.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(target)])
    assert not is_library(str(target / "helperlib" / "__init__.py"))


def test_a_removed_working_directory_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = make_repo(tmp_path / "gone", {"steps.py": ""})
    monkeypatch.chdir(gone)
    gone.joinpath("steps.py").unlink()
    gone.rmdir()
    assert not is_library(str(tmp_path / "elsewhere" / "helper.py"))
    assert is_library(sys.modules["json"].__file__ or "")


def test_an_error_raised_inside_such_a_library_names_the_users_line(tmp_path: Path) -> None:
    vendor = _installed(tmp_path / "vendor")
    repo = make_repo(
        tmp_path / "repo",
        {
            "steps.py": "import helperlib\n\nhelperlib.configure()\n\n\ndef step():\n    pass\n",
            "policies/p.yaml": "version: 1\nregions:\n  - name: a\n    step: steps:step\n",
        },
    )
    run = run_gate(repo, "validate", env={"PYTHONPATH": str(vendor)})
    assert run.returncode == ExitCode.USAGE, run
    assert "importing 'steps' raised ValueError: no accelerator configured" in run.stderr, run
    assert "(at steps.py:3)" in run.stderr, run  # not helperlib/__init__.py:2


def test_the_longest_root_around_a_file_owns_it_never_a_venvs_or_a_librarys(
    tmp_path: Path,
) -> None:
    """A policy's python_path folder inside the repository owns its files; what lies in a
    virtual environment under a root (the README's ``.venv``), the standard library and the
    gate's own package are no root's."""
    repo = make_repo(tmp_path / "repo", {"steps.py": "", ".venv/pyvenv.cfg": "", "venv.py": ""})
    lib = make_repo(repo / "lib", {"helpers.py": ""})  # a policy's python_path folder
    make_repo(repo, {".venv/lib/python3/site-packages/pkg.py": "", ".venv/src/x/x.py": ""})
    roots = {str(repo) + os.sep, str(lib) + os.sep}
    assert owning_root(str(repo / "steps.py"), roots) == str(repo) + os.sep
    assert owning_root(str(repo / "venv.py"), roots) == str(repo) + os.sep
    assert owning_root(str(lib / "helpers.py"), roots) == str(lib) + os.sep
    for venv_file in (".venv/lib/python3/site-packages/pkg.py", ".venv/src/x/x.py"):
        assert owning_root(str(repo / venv_file), roots) is None
    assert owning_root(json.__file__, roots) is None
    assert owning_root(os.path.join(PACKAGE_DIR, "cli", "main.py"), roots | {"/"}) is None
    code = UserCode(repo, (lib,))
    assert code.is_user(str(repo / "steps.py"))
    assert code.is_user(str(lib / "helpers.py"))
    assert not code.is_user(str(repo / ".venv/src/x/x.py"))
    assert not code.is_user(json.__file__)
