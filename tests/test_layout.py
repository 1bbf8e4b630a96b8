"""The layout keeps its promises: data flows one way, JAX internals live in one folder.

Read from the source with `ast`, so a drift fails here, by name, instead of surfacing as an
import cycle or a hook nobody knew about. The layers are docs/development.md's "Layers" list,
read by the test itself: the documentation and the check cannot disagree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

GATE = Path(__file__).resolve().parents[1] / "gate"

DEVELOPMENT = GATE.parent / "docs" / "development.md"


def _layers() -> list[frozenset[str]]:
    """The documented layers, top first, as docs/development.md's "Layers" list states them."""
    text = DEVELOPMENT.read_text(encoding="utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    return [
        frozenset(re.findall(r"`([\w.]+)`", line))
        for line in text.splitlines()
        if re.match(r"^\d+\. ", line)
    ]


LAYERS = _layers()
# Each part of the gate (a folder under gate/, or a module at its top) and its layer's depth.
DEPTH = {part: depth for depth, layer in enumerate(LAYERS) for part in layer}


def _modules() -> list[Path]:
    return sorted(GATE.rglob("*.py"))


def _subsystem(path: Path) -> str:
    parts = path.relative_to(GATE).parts
    return parts[0] if len(parts) > 1 else path.stem


def _imported(path: Path) -> set[str]:
    """Every `gate.*` module `path` imports, at any depth of the file (late imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.startswith("gate.")}


def test_every_part_of_the_gate_is_in_one_documented_layer() -> None:
    parts = {_subsystem(p) for p in _modules()} - {"__init__"}
    assert sorted(parts - DEPTH.keys()) == [], "add them to docs/development.md's Layers"
    assert sorted(DEPTH.keys() - parts) == [], "docs/development.md names parts that are gone"
    counted = [part for layer in LAYERS for part in layer]
    assert len(counted) == len(set(counted)), "a part in two layers"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(GATE.parent)))
def test_imports_flow_one_way(path: Path) -> None:
    """Every import, late and TYPE_CHECKING ones too, goes to the module's own part or to a
    layer below it: no arrow runs back up, and there is no table of exceptions. The package's
    face (gate/__init__.py) hands on the public API from above everything."""
    own = _subsystem(path)
    if own == "__init__":
        return
    upward = sorted(
        name
        for name in _imported(path)
        if (part := name.split(".")[1]) != own and DEPTH.get(part, -1) <= DEPTH[own]
    )
    assert not upward, f"{path.relative_to(GATE.parent)} imports {upward}, not below it"


def test_jax_internals_are_reached_only_from_jaxhooks() -> None:
    outside = [
        str(p.relative_to(GATE.parent))
        for p in _modules()
        if _subsystem(p) != "jaxhooks" and "jax._src" in p.read_text(encoding="utf-8")
    ]
    assert outside == []


def test_the_slot_swap_lives_in_jaxhooks() -> None:
    outside = [
        str(p.relative_to(GATE.parent))
        for p in _modules()
        if _subsystem(p) != "jaxhooks"
        and any(s in p.read_text(encoding="utf-8") for s in ("pythonapi", "tp_as_buffer"))
    ]
    assert outside == []


def test_doctor_does_not_borrow_from_the_reporters() -> None:
    doctor = [p for p in _modules() if _subsystem(p) == "machine"]
    assert doctor
    assert not any(n.startswith("gate.report") for p in doctor for n in _imported(p))


def test_every_folder_is_a_package_with_a_docstring() -> None:
    for folder in sorted(p for p in GATE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder} has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), init


def test_the_readme_layout_names_every_folder_and_top_level_module() -> None:
    text = (GATE.parent / "README.md").read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    parts = [
        f"gate/{p.name}/" if p.is_dir() else f"gate/{p.name}"
        for p in sorted(GATE.iterdir())
        if p.name not in {"__pycache__", "__init__.py", "__main__.py", "py.typed"}
    ]
    missing = [p for p in parts if f"`{p}`" not in section]
    assert missing == []
    stale = [m for m in re.findall(r"`(gate/[\w./]+)`", section) if not (GATE.parent / m).exists()]
    assert stale == []


def test_the_development_page_lists_every_module() -> None:
    text = (GATE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    missing = [
        str(p.relative_to(GATE.parent))
        for p in _modules()
        if p.name not in {"__init__.py", "__main__.py"}
        and f"`{p.relative_to(GATE.parent)}`" not in text
    ]
    assert missing == []


def _records() -> list[tuple[str, type]]:
    """Every public dataclass defined in `gate.results`, by module and name."""
    import dataclasses
    import importlib
    import inspect

    found = []
    for path in sorted((GATE / "results").glob("*.py")):
        module = importlib.import_module(f"gate.results.{path.stem}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and dataclasses.is_dataclass(value)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found.append((f"{path.stem}.{name}", value))
    return found


@pytest.mark.parametrize(("name", "record"), _records(), ids=[n for n, _ in _records()])
def test_every_record_resolves_its_annotations_at_run_time(name: str, record: type) -> None:
    # A cycle hidden behind TYPE_CHECKING leaves a name that only a type checker sees: then
    # typing.get_type_hints (and every tool built on it) fails with NameError here.
    import typing

    assert typing.get_type_hints(record)
