"""The JAX requirements doctor reads from requirements files and pyproject.toml
(`gate.machine.requirements`, on ``packaging``). The command's use of them: tests/test_doctor.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gate.machine.requirements import RequirementsError, parse_requirement, read_requirements
from gate.machine.version_check import _admits


def test_an_installed_pre_release_inside_a_specifier_meets_it_as_pip_check_says() -> None:
    # packaging alone would not admit 0.11.0rc1 to >=0.10 (it leaves pre-releases out of a
    # download); doctor judges what is installed.
    requirement = parse_requirement("jax>=0.10", "requirements.txt:1")
    assert requirement is not None
    assert _admits(requirement, "0.11.0rc1") is True
    assert _admits(requirement, "0.9.0") is False
    assert _admits(requirement, "not-a-version") is None


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def test_a_requirements_file_keeps_jax_s_distributions_with_their_lines(tmp_path: Path) -> None:
    write(tmp_path / "constraints.txt", "JAX_CUDA12.Plugin==0.10.2\n")
    path = write(
        tmp_path / "requirements.txt",
        """
        # the model
        flax>=0.12
        jax[cuda12] >=0.10, \\
            <0.11  # CUDA 12
        jaxlib==0.10.2 --hash=sha256:abc
        -c constraints.txt
        -e ./vendored/thing
        jax; sys_platform == "darwin"
        jax @ https://example.org/jax-0.10.2.tar.gz
        ./local/jax
        """,
    )
    found = read_requirements(path)
    assert [(r.where, r.name, str(r.specifier), r.unchecked) for r in found] == [
        (f"{path}:3", "jax", "<0.11,>=0.10", None),
        (f"{path}:5", "jaxlib", "==0.10.2", None),
        (f"{tmp_path / 'constraints.txt'}:1", "jax-cuda12-plugin", "==0.10.2", None),
        (f"{path}:8", "jax", "", """its marker (sys_platform == "darwin") is not evaluated"""),
        (f"{path}:9", "jax", "", "a URL names no version"),
    ]


def test_pyproject_lists_every_dependency_list(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pyproject.toml",
        """
        [project]
        name = "model"
        dependencies = ["numpy", "jax>=0.10.1"]

        [project.optional-dependencies]
        train = ["optax", 'jax[cuda12]==0.10.2']

        [dependency-groups]
        dev = [{include-group = "train"}, "jaxlib>=0.10"]
        """,
    )
    found = read_requirements(path)
    assert [(r.where, r.text) for r in found] == [
        (f"{path}:3", "jax>=0.10.1"),
        (f"{path}:6", "jax[cuda12]==0.10.2"),
        (f"{path}:9", "jaxlib>=0.10"),
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "requirements.txt",
            "jax=>0.10\n",
            r"requirements.txt:1: jax=>0.10: Expected semicolon \(after name with no version",
        ),
        ("requirements.txt", "-r other.txt\n", r"requirements.txt:1: -r other.txt: no such file"),
        ("pyproject.toml", "[project\n", r"pyproject.toml: not valid TOML"),
        ("pyproject.toml", "[project]\ndependencies = 'jax'\n", r"project.dependencies is not a"),
    ],
)
def test_files_doctor_cannot_read_name_the_file_and_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(RequirementsError, match=message):
        read_requirements(path)


def test_a_missing_file_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(RequirementsError, match="no such file; name a requirements file"):
        read_requirements(tmp_path / "nope.txt")


def test_requirement_files_that_include_each_other_are_read_once(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "-r b.txt\njax>=0.10\n")
    write(tmp_path / "b.txt", "-r a.txt\njaxlib>=0.10\n")
    assert [r.name for r in read_requirements(tmp_path / "a.txt")] == ["jaxlib", "jax"]
