"""doctor's own PEP 440 specifiers (`gate.machine.versions`), cross-checked against ``packaging``,
and the requirements it reads from requirements files and pyproject.toml
(`gate.machine.requirements`). The command's use of them: tests/test_doctor.py."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version as ReferenceVersion

from gate.machine.requirements import RequirementsError, read_requirements
from gate.machine.versions import Specifier, SpecifierError, Version

VERSIONS = [
    "0.9", "0.10", "0.10.0", "0.10.1", "0.10.2", "0.10.2+cuda12", "0.10.2.post1", "0.10.3.dev0",
    "0.10.3a1", "0.10.3rc1", "0.10.3", "0.10.20", "0.11.0", "1.0", "1!0.1",
]  # fmt: skip
SPECIFIERS = [
    "", "==0.10.2", "==0.10.2+cuda12", "!=0.10.2", "==0.10.*", "!=0.10.*", ">=0.10.1",
    ">0.10.2", "<0.10.3", "<=0.10.2", "~=0.10.1", "~=0.10", ">=0.10.1,<0.11", "<0.10.3rc1",
    ">0.10.2.post0", "==0.10", "<1!0", ">=0.10.3.dev0", "==0.10.2.post1",
]  # fmt: skip


@pytest.mark.parametrize(
    ("specifier", "version"), list(itertools.product(SPECIFIERS, VERSIONS)), ids=repr
)
def test_specifiers_agree_with_packaging(specifier: str, version: str) -> None:
    # prereleases=True: an installed pre-release is judged like any other, as `pip check` does.
    expected = SpecifierSet(specifier).contains(version, prereleases=True)
    assert Specifier.parse(specifier).admits(version) is expected


def test_versions_order_as_pep_440_does() -> None:
    keys = sorted(VERSIONS, key=lambda v: Version.parse(v).key)
    assert keys == sorted(VERSIONS, key=ReferenceVersion)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("===0.10.2", "'===' is not supported; use '=='"),
        (">=0.10.*", "'.*' goes only with == or !="),
        ("~=1", "'~=' needs two numbers or more"),
        ("=>0.10", "is not OPERATOR VERSION"),
        (">=0.10,", "an empty clause between commas"),
        (">=ten", "'ten' is not a version"),
    ],
)
def test_specifiers_doctor_cannot_read_say_why(text: str, message: str) -> None:
    with pytest.raises(SpecifierError, match=message):
        Specifier.parse(text)


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
        (f"{path}:3", "jax", ">=0.10,<0.11", None),
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
        ("requirements.txt", "jax===0.10.2\n", r"requirements.txt:1: jax===0.10.2: '===' is not"),
        ("requirements.txt", "-r other.txt\n", r"requirements.txt:1: -r other.txt: no such file"),
        ("requirements.txt", "jax>=0.10,\n", r"requirements.txt:1: jax>=0.10,: an empty clause"),
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
