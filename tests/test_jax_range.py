"""The JAX range pyproject.toml claims is the range .ci/run tests: its floor is the version the
oldest-JAX run pins, it has no ceiling, the `jaxhooks` marker that run selects is registered, and
the tests it marks (tests/jax_hooks.py) exercise every JAX internal the gate reaches."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest
from jax_hooks import HOOKS, Hook, files_to_collect, hook_tests
from processes import run

ROOT = Path(__file__).resolve().parent.parent
CI = (ROOT / ".ci" / "run").read_text()

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib (Python 3.11+)")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement(name: str) -> str:
    (found,) = [
        dep
        for dep in PYPROJECT["project"]["dependencies"]
        if re.match(rf"{name}\s*(?:[<>=!~;\[]|$)", dep)
    ]
    return str(found)


def oldest_pinned_by_ci() -> str:
    (version,) = re.findall(r"^JAX_OLDEST=(\S+)", CI, flags=re.MULTILINE)
    return str(version)


@pytest.mark.parametrize("name", ["jax", "jaxlib"])
def test_the_floor_is_the_jax_ci_runs_oldest_and_there_is_no_ceiling(name: str) -> None:
    # No ceiling on purpose: a JAX that moves an internal makes the gate refuse that hook
    # ("not checked", an error), so a newer JAX can fail a run but never blind it.
    assert requirement(name) == f"{name}>={oldest_pinned_by_ci()}"
    assert f'"{name}==$JAX_OLDEST"' in CI


def test_ci_runs_the_marked_tests_on_both_ends_after_the_readme_command() -> None:
    lines = CI.splitlines()
    readme_run = next(i for i, line in enumerate(lines) if line.startswith("python3 -m venv .venv"))
    installs = [line for line in lines if line.strip().startswith("install_in ")]
    hook_runs = [i for i, line in enumerate(lines) if line.startswith("jax_hook_tests ")]
    assert len(installs) == len(hook_runs) == 3
    # Installed while the main suite runs (a background job started before it); run after it.
    assert CI.index(installs[0]) < CI.index(lines[readme_run]) < CI.index(lines[hook_runs[0]])
    assert '-m pytest -m "$markers"' in CI
    oldest, *newest = (lines[i] for i in sorted(hook_runs))
    assert oldest.split()[1:] == [".venv-jax-oldest", "jaxhooks"]
    assert installs[0].split()[1:3] == [".venv-jax-oldest", "python3"]
    # The newer Pythons also run what the gate does differently there (sys.monitoring).
    assert [line.split()[2] for line in installs[1:]] == ['"$newest"', '"$newest313"']
    assert [line.split()[1] for line in installs[1:]] == [line.split()[1] for line in newest]
    # Each JAX internal's tests on the container's Python; on the next Python, with the same
    # JAX, what a Python can change: the `pythons` tests, the hooks into Python's own machinery
    # among them. The long sweeps (`once`) on the main Python only.
    container, *later = newest
    assert container.endswith('"jaxhooks or (pythons and not once)"')
    assert later
    assert all(line.endswith('"pythons and not once"') for line in later)


# What a hook into Python's own machinery uses: a frame or its locals, ctypes, the trace or
# monitoring functions.
PYTHONS_OWN = re.compile(
    r"sys\._getframe|\bf_locals\b|\bf_back\b|\bctypes\.|settrace|sys\.monitoring|currentframe"
)


def functions_using_pythons_own_machinery() -> list[str]:
    """The source of each function of gate/ that reaches Python's own machinery."""
    found = []
    for path in GATE_SOURCES:
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                source = ast.get_source_segment(text, node) or ""
                if PYTHONS_OWN.search(source):
                    found.append(source)
    return found


def test_a_hook_whose_code_reaches_pythons_own_machinery_runs_on_every_python() -> None:
    # A hook read in the same function as a frame, ctypes or the trace function can change with
    # the Python on the same JAX: .ci/run's later Pythons run only `pythons` tests.
    functions = functions_using_pythons_own_machinery()
    unmarked = [
        hook.what[:60]
        for hook in HOOKS
        if not hook.python and any(e in f for e in hook.evidence for f in functions)
    ]
    assert not unmarked, f"set python=True in tests/jax_hooks.py for: {unmarked}"


def test_the_later_pythons_run_the_tests_of_the_hooks_into_python_and_no_other() -> None:
    # The buffer slot (ctypes), the frames of a pmap and of the donation warning among them.
    for what in ("buffer-protocol slot", "pmap's trace info", "Some donated buffers"):
        assert next(h for h in HOOKS if what in h.what).python, what
    # What .ci/run's 3.13 run selects in a module of both kinds (conftest.py marks them).
    module = "tests/test_jaxhooks.py"
    options = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    selected_by = ["-m", "pythons and not once", module]
    done = run([sys.executable, "-m", "pytest", *options, *selected_by], timeout=120, cwd=ROOT)
    selected = {line for line in done.stdout.splitlines() if line.startswith(module)}
    in_module = {t for t in hook_tests() if t.startswith(module)}
    python = {t for t in hook_tests(python=True) if t.startswith(module)}
    assert python, "the module no longer holds a hook into Python"
    assert in_module - python, "the module no longer holds a hook into JAX alone"
    assert python <= selected, done.stdout
    assert not (in_module - python) & selected, done.stdout


def test_ci_runs_the_newest_jax_on_every_newer_python_pyproject_claims() -> None:
    # A classifier is a promise to the user: each Python past the one the README command runs
    # on (Debian's 3.11) gets the newest JAX's run, and the script stops where it has none.
    claimed = sorted(
        c.rsplit(" :: ", 1)[1]
        for c in PYPROJECT["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert claimed[0] == "3.11", claimed
    found = dict(re.findall(r"^(\w+)=\$\(python_at (\S+)\)", CI, flags=re.MULTILINE))
    assert sorted(found.values()) == claimed[1:]
    for name in found:
        assert re.search(rf'^\s*install_in \S+ "\${name}"', CI, flags=re.MULTILINE), name


def test_the_pythons_marker_is_registered_and_marks_the_transfer_maps_tests() -> None:
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("pythons:") for marker in markers)
    for name in ("test_code_events.py", "test_transfer_map.py"):
        assert "pytestmark = pytest.mark.pythons" in (ROOT / "tests" / name).read_text()


def marked_once() -> set[str]:
    """Every test marked `once`, as "tests/file.py::name"."""
    found = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d) == "pytest.mark.once" for d in node.decorator_list
            ):
                found.add(f"tests/{path.name}::{node.name}")
    return found


def test_a_jax_internals_test_is_never_run_once() -> None:
    # A hook's tests are its evidence on every JAX and Python that .ci/run tries.
    once = marked_once()
    assert once, "the `once` marker marks nothing: drop it from .ci/run and pyproject.toml"
    assert not sorted(once & hook_tests())


def test_the_jaxhooks_marker_is_registered() -> None:
    markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("jaxhooks:") for marker in markers)


# What counts as a JAX internal in gate/'s imports: private modules, jaxlib, jax.extend, and
# ctypes (the gate swaps a slot of jaxlib's array type with it).
INTERNAL = ("jax._src", "jaxlib", "jax.extend", "ctypes")
GATE_SOURCES = sorted((ROOT / "gate").rglob("*.py"))


# Once a process: each hook's test asks, and parsing gate/ takes ~2 s.
@functools.cache
def internals_the_gate_reaches() -> dict[str, str]:
    """Each internal module (or name in it) that gate/ imports or names, -> one file doing so."""
    found: dict[str, str] = {}
    for path in GATE_SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if re.fullmatch(r"jax\._src[\w.]*", node.value) else []
            else:
                continue
            for name in names:
                if name.startswith(INTERNAL):
                    found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_jax_internal_the_gate_reaches_has_a_jaxhooks_test() -> None:
    named = {evidence for hook in HOOKS for evidence in hook.evidence}
    missing = {
        name: where for name, where in internals_the_gate_reaches().items() if name not in named
    }
    assert not missing, (
        f"gate/ reaches JAX internals no entry of tests/jax_hooks.py names: {missing}; add a Hook "
        "with the tests that exercise each, so .ci/run checks it on the oldest and newest JAX"
    )


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: hook.what[:40])
def test_each_hook_is_still_in_the_gate_and_has_tests(hook: Hook) -> None:
    assert hook.tests, hook.what
    source = "\n".join(path.read_text() for path in GATE_SOURCES)
    reached = internals_the_gate_reaches()
    gone = [e for e in hook.evidence if e not in reached and e not in source]
    assert not gone, f"{hook.what}: gate/ no longer shows {gone}; update tests/jax_hooks.py"


def test_every_listed_hook_test_exists() -> None:
    defined = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                defined.add(f"tests/{path.name}::{node.name}")
    assert not sorted(hook_tests() - defined)


def test_the_jaxhooks_marker_comes_only_from_the_list_of_hooks() -> None:
    # One source of truth: a test marked by hand would run on both JAX ends without saying
    # which internal it covers. gate.jaxhooks's own tests are each about one internal.
    by_hand = re.compile(r"^\s*(@pytest\.mark\.jaxhooks|pytestmark\b.*jaxhooks)", re.MULTILINE)
    marked = [
        path.name
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if path.name != "test_jaxhooks.py" and by_hand.search(path.read_text())
    ]
    assert not marked


def test_the_jaxhooks_runs_collect_every_module_that_can_hold_their_tests(tmp_path: Path) -> None:
    # .ci/run hands them these modules alone; a `pythons` mark, in either form, adds its module.
    (tmp_path / "test_module_mark.py").write_text("pytestmark = pytest.mark.pythons\n")
    (tmp_path / "test_one_test.py").write_text("@pytest.mark.pythons\ndef test_a(): pass\n")
    (tmp_path / "test_other.py").write_text("@pytest.mark.gpu\ndef test_a(): pass\n")
    listed = files_to_collect(tmp_path)
    assert {"tests/test_module_mark.py", "tests/test_one_test.py"} <= set(listed)
    assert "tests/test_other.py" not in listed
    assert {test.split("::", 1)[0] for test in hook_tests()} <= set(listed)
    assert "tests/test_jaxhooks.py" in listed  # marked by hand
    ci = (ROOT / ".ci" / "run").read_text()
    assert "hook_files=$(python3 tests/jax_hooks.py)" in ci
    assert "--durations=10 $hook_files\n" in ci, "the jaxhooks runs' pytest gets the modules"
