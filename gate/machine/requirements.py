"""The JAX requirements a user's repository states, read for ``doctor --requirements FILE``.

Two kinds of file, told apart by the name: a ``*.toml`` file is read as ``pyproject.toml``
(``[project] dependencies``, every list of ``[project.optional-dependencies]`` and of
``[dependency-groups]``), anything else as a pip requirements file (one requirement a line,
``#`` comments, ``\\`` continuations, ``-r``/``-c`` files followed, other options skipped).
Only requirements on JAX's own distributions are kept (`JAX_DISTRIBUTIONS`): doctor checks
that the installed JAX is the one the code asks for, not the user's whole environment.

A requirement with an environment marker (``; python_version >= "3.12"``) or a URL
(``jax @ https://...``) is kept but not checked: doctor does not evaluate markers, and a URL
names no version. doctor prints it as not checked.

Requirements, specifiers and versions are read by ``packaging``, the reference
implementation of PEP 440 and PEP 508 that pip itself vendors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.machine.diagnosis import PLUGIN_DISTRIBUTIONS

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

JAX_DISTRIBUTIONS = frozenset({"jax", "jaxlib", *PLUGIN_DISTRIBUTIONS})

# pip's options that name another file whose requirements count too.
_INCLUDES = ("-r", "--requirement", "-c", "--constraint")


class RequirementsError(Exception):
    """A requirements file doctor cannot read; one line naming the file, the line and the fix."""


@dataclass(frozen=True)
class Requirement:
    """One requirement on a JAX distribution, and where it was stated."""

    where: str  # "requirements.txt:3", "pyproject.toml:16"
    text: str  # as written
    name: str  # normalized: "jax-cuda12-plugin"
    specifier: SpecifierSet
    unchecked: str | None = None  # why doctor does not check it: a marker, a URL


def parse_requirement(text: str, where: str) -> Requirement | None:
    """The requirement in ``text`` when it names a JAX distribution; None for any other."""
    # packaging here, not at the top: every run imports this module (`gate.cli.errors` names
    # RequirementsError), and only doctor --requirements parses a requirement.
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Pep508
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name

    try:
        parsed = Pep508(text)
    except InvalidRequirement as exc:
        raise RequirementsError(f"{where}: {text.strip()}: {_first_line(exc)}") from None
    name = canonicalize_name(parsed.name)
    if name not in JAX_DISTRIBUTIONS:
        return None
    if parsed.url is not None:
        return Requirement(where, text.strip(), name, SpecifierSet(), "a URL names no version")
    marker = f"its marker ({parsed.marker}) is not evaluated" if parsed.marker else None
    return Requirement(where, text.strip(), name, parsed.specifier, marker)


def _first_line(exc: Exception) -> str:
    # packaging points at the column on lines of its own; the error names the file's line.
    return str(exc).strip().splitlines()[0]


def read_requirements(path: Path) -> tuple[Requirement, ...]:
    """The JAX requirements stated in ``path`` (and the files it includes)."""
    if not path.is_file():
        raise RequirementsError(
            f"{path}: no such file; name a requirements file or pyproject.toml with --requirements"
        )
    if path.suffix == ".toml":
        return _from_pyproject(path)
    return _from_requirements_file(path, seen=frozenset())


def _from_requirements_file(path: Path, seen: frozenset[Path]) -> tuple[Requirement, ...]:
    seen = seen | {path.resolve()}
    found: list[Requirement] = []
    for number, line in _logical_lines(_read(path)):
        where = f"{path}:{number}"
        if line.startswith("-"):
            option, _, value = line.replace("=", " ", 1).partition(" ")
            if option in _INCLUDES and value.strip():
                included = (path.parent / value.strip()).resolve()
                if included in seen:
                    continue  # a cycle of -r files: pip refuses it; doctor reads each once
                if not included.is_file():
                    raise RequirementsError(
                        f"{where}: {option} {value.strip()}: no such file next to {path.name}"
                    )
                found += _from_requirements_file(included, seen)
            continue  # -e, --index-url, --hash ...: no version to check
        if line.startswith((".", "/")) or "://" in line.split("@", 1)[0]:
            continue  # a local path or an archive's URL: no name to match
        # pip's per-requirement options (`--hash=...`) follow the requirement.
        requirement = parse_requirement(re.split(r"\s+--", line, maxsplit=1)[0], where)
        if requirement is not None:
            found.append(requirement)
    return tuple(found)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line's number, text) of each non-empty line, continuations joined, comments cut."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        line = re.sub(r"(^|\s)#.*$", "", raw)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines


def _from_pyproject(path: Path) -> tuple[Requirement, ...]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10; JAX itself has needed 3.11 since 0.4.31
        raise RequirementsError(
            f"{path}: reading TOML needs Python 3.11 or newer; name a requirements file instead"
        ) from None
    text = _read(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RequirementsError(f"{path}: not valid TOML ({exc})") from None
    project = data.get("project", {})
    lists: list[tuple[str, Any]] = [("project.dependencies", project.get("dependencies", []))]
    for extra, items in project.get("optional-dependencies", {}).items():
        lists.append((f"project.optional-dependencies.{extra}", items))
    for group, items in data.get("dependency-groups", {}).items():
        lists.append((f"dependency-groups.{group}", items))
    lines = text.splitlines()
    found: list[Requirement] = []
    for key, items in lists:
        if not isinstance(items, list):
            raise RequirementsError(f"{path}: {key} is not a list of requirements")
        for item in items:
            if not isinstance(item, str):
                continue  # {include-group = "..."}: that group is read under its own name
            requirement = parse_requirement(item, f"{path}:{_line_of(lines, item)}")
            if requirement is not None:
                found.append(requirement)
    return tuple(found)


def _line_of(lines: list[str], item: str) -> int:
    """The first line that quotes ``item``: tomllib keeps no positions, the error needs one."""
    for number, line in enumerate(lines, start=1):
        if f'"{item}"' in line or f"'{item}'" in line:
            return number
    return 1


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RequirementsError(f"{path}: cannot be read ({exc})") from None
