"""The package as it is released and installed, tested where neither PyPI nor Docker is at hand:
the sdist and the wheel built as the release workflow builds them (`python -m build`, then
`twine check --strict`), their contents and metadata, and the wheel installed into a fresh
virtual environment and used the way the image uses it.

The Dockerfile runs `pip install .` and `transfer-gate --help`; a wheel that forgot its
package data (the policy schema) or its console script would pass every other test,
because they run from the source tree.
"""

from __future__ import annotations

import email
import email.message
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import processes
import pytest
import trove_classifiers

ROOT = Path(__file__).resolve().parent.parent


def run(
    *command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = processes.run(command, cwd=cwd, env=env, timeout=240)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


# What a checkout holds that is not the package: none of it may ship in the wheel or the sdist.
NOT_SHIPPED = ("tests/", "benchmarks/", "examples/", "policies/", "docs/", ".github/", ".ci/")


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel, built as the release workflow builds them, from a copy of the
    files a fresh checkout has (tracked and not ignored): local state such as a stale
    *.egg-info must not decide what ships."""
    checkout = tmp_path_factory.mktemp("checkout")
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name)
    out = tmp_path_factory.mktemp("dist")
    # No --sdist/--wheel: the wheel is built from the sdist, which proves the sdist complete.
    # --no-isolation: setuptools comes from the test extra, so the build needs no network.
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, checkout)
    (sdist,) = out.glob("jax_transfer_gate-*.tar.gz")
    (wheel,) = out.glob("jax_transfer_gate-*.whl")
    return sdist, wheel


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_twine_check_strict_passes_the_sdist_and_the_wheel(dists: tuple[Path, Path]) -> None:
    # PyPI renders the long description (README.md) and refuses what twine --strict refuses.
    checked = run(sys.executable, "-m", "twine", "check", "--strict", *dists)
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_wheel_holds_the_package_data_and_the_command_and_nothing_else(
    dists: tuple[Path, Path],
) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        commands = archive.read(entry_points).decode()
    assert "gate/policy/policy.schema.json" in names
    # The history page's style and script, inlined into every page it writes.
    assert {"gate/report/history_page.css", "gate/report/history_page.js"} <= set(names)
    assert "gate/py.typed" in names
    assert "transfer-gate = gate.cli.main:main" in commands.splitlines()
    assert "transfer_gate = gate.pytest_plugin" in commands.splitlines()  # the pytest fixture
    assert [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert not [n for n in names if n.startswith(NOT_SHIPPED)]
    assert {n.split("/")[0] for n in names if "/" in n} == {"gate", wheel_dist_info(wheel)}


def wheel_dist_info(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name}-{version}.dist-info"


def test_the_sdist_holds_what_a_build_needs_and_no_tests(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    with tarfile.open(sdist) as archive:
        top = sdist.name.removesuffix(".tar.gz")
        names = [n.removeprefix(f"{top}/") for n in archive.getnames()]
    for needed in ("pyproject.toml", "README.md", "LICENSE", "gate/policy/policy.schema.json"):
        assert needed in names
    assert not [n for n in names if n.startswith(NOT_SHIPPED) or n in ("tests", "benchmarks")]


def test_the_metadata_is_fit_for_an_index(dists: tuple[Path, Path]) -> None:
    metadata = wheel_metadata(dists[1])
    assert metadata["Name"] == "jax-transfer-gate"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().startswith("# jax-transfer-gate")  # README.md, the long one
    assert metadata["Keywords"]
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL", []))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    # The repository pyproject.toml names (.ci/repository.py keeps every file to it).
    source = urls["Source"]
    assert source.startswith("https://github.com/")
    assert all(u.startswith(source) for u in urls.values())
    # PyPI refuses an upload with a classifier it does not know.
    classifiers = metadata.get_all("Classifier", [])
    assert classifiers
    assert [c for c in classifiers if c not in trove_classifiers.classifiers] == []
    # No license classifier: PEP 639 leaves the license to License-Expression alone.
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_the_wheel_installs_into_a_fresh_environment_and_runs(
    tmp_path: Path, dists: tuple[Path, Path]
) -> None:
    _, wheel = dists
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)

    # The dependencies come from the test environment: installing jax again from
    # the network would only test PyPI.
    deps = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": deps, "JAX_PLATFORMS": "cpu"}
    run(env_dir / "bin" / "transfer-gate", "--help", env=env)
    validated = run(env_dir / "bin" / "transfer-gate", "validate", cwd=ROOT, env=env)
    assert "regions: valid" in validated.stdout
    where = run(python, "-c", "import gate; print(gate.__file__)", cwd=tmp_path, env=env)
    assert str(env_dir) in where.stdout  # the installed copy, not the source tree
