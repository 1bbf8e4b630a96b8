"""``run --base`` runs from the base only the regions a change reached (issue 55), through the
real CLI on throwaway git repositories.

Each region's footprint is what its head run read of the tree (`gate.witness.footprint`): a
region whose footprint the base has byte for byte, or as the same code (a comment, a layout),
reads "unchanged" and its base is not run.
Detection must not drop: each way a region reads a file is changed once here and must be
compared. The documented limits (docs/compare.md, "What a change can reach") are asserted as
limits, with ``compare: always`` as their way out.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from accelerator_rule import AcceleratorRule
from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

from gate.isolation import spawn as spawn_module
from gate.isolation import worker_process
from gate.isolation.scheduler import Scheduler

STEP = """
import jax
import jax.numpy as jnp
{imports}

def make():
    return (jnp.ones((8, 16)), jnp.ones((16, 16)))


@jax.jit
def _matmul(x, w):
    return x @ w * SCALE


def step(x, w):
{body}    return _matmul(x, w)
"""

POLICY_HEAD = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 3, timing: {rounds: 4, max_rounds: 8}}
regions:
"""


def _module(imports: str = "", body: str = "", scale: str = "1.0") -> str:
    return STEP.format(imports=imports + f"\nSCALE = {scale}\n", body=body)


def _policy(*names: str, extra: str = "") -> str:
    rows = [f'  - {{name: {n}, step: "{n}:step", setup: "{n}:make"{extra}}}\n' for n in names]
    return POLICY_HEAD + "".join(rows)


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    root = init(tmp_path / "repo")
    commit(root, {"README.md": "a repo\n", **files}, "base")
    return root


def _statuses(repo: Path, *args: str) -> dict[str, str]:
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "out/r.json", *args)
    assert run.returncode == 0, run
    return {name: region["base"]["status"] for name, region in _regions(repo).items()}


def _regions(repo: Path) -> dict[str, dict[str, Any]]:
    document = json.loads((repo / "out" / "r.json").read_text())
    return {r["name"]: r for suite in document["suites"] for r in suite["regions"]}


def test_a_readme_change_runs_every_region_once(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path, {"a.py": _module(), "b.py": _module(), "policies/p.yaml": _policy("a", "b")}
    )
    make_repo(repo, {"README.md": "a repo, changed\n"})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "out/r.json")
    assert run.returncode == 0, run
    assert run.stdout.count("vs base: unchanged: the same code and data as the base (1 file)")
    for name, region in _regions(repo).items():
        assert region["base"]["status"] == "unchanged", (name, region["base"])
        assert region["base"]["timing"] is None, region["base"]
        assert region["footprint"]["files"][0][0] == f"{name}.py", region["footprint"]
        assert region["footprint"]["policy"], region["footprint"]
    # JUnit: one passing `vs base` case a region, nothing timed against the base.
    case = run.testcase("a: vs base")
    assert case.find("skipped") is None, run
    assert case.find("failure") is None, run
    assert "unchanged: the same code and data as the base" in (case.findtext("system-out") or "")


def test_a_change_to_one_regions_module_compares_that_region_only(tmp_path: Path) -> None:
    names = ("a", "b", "c")
    repo = _repo(
        tmp_path, {**{f"{n}.py": _module() for n in names}, "policies/p.yaml": _policy(*names)}
    )
    make_repo(repo, {"b.py": _module(scale="2.0 / 2")})  # other code, computing the same
    statuses = _statuses(repo)
    assert statuses == {"a": "unchanged", "b": "compared", "c": "unchanged"}, statuses


# A step with an implicit upload (a NumPy array into the jitted matmul), in the base and the
# head alike: with its line moved by a comment, it is still the base's own.
UPLOADS = _module("import numpy as np\n", "    x = np.asarray(x) + 0\n")


def test_code_that_differs_only_in_comments_and_layout_runs_once(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path, {"a.py": UPLOADS, "b.py": _module(), "policies/p.yaml": _policy("a", "b")}
    )
    laid_out = UPLOADS.replace(
        "import numpy as np\n", "# a comment\n\nimport numpy   as np  # np\n"
    )
    laid_out = laid_out.replace("x @ w * SCALE", "(x @ w) * SCALE  # the same product")
    make_repo(repo, {"a.py": laid_out})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "out/r.json")
    assert run.returncode == 0, run
    a = _regions(repo)["a"]
    assert a["base"]["status"] == "unchanged", a["base"]
    assert a["base"]["same_code_files"] == 1, a["base"]
    assert a["base"]["already_in_base"] >= 1, a["base"]  # the upload, its line moved
    assert "(1 file; 1 differs only in comments or layout)" in run.stdout, run


# Changes that keep a module's lines but not its code: each is compared.
NOT_LAYOUT = {
    "a docstring (a module may read its __doc__)": ('"""A module."""\n', '"""Another."""\n'),
    "a name": ("SCALE", "FACTOR"),
    "a literal written otherwise": ("SCALE = 1.0", "SCALE = 1.00 + 0"),
}


@pytest.mark.parametrize("what", NOT_LAYOUT)
def test_a_change_to_code_beside_its_layout_is_compared(tmp_path: Path, what: str) -> None:
    before, after = NOT_LAYOUT[what]
    module = '"""A module."""\n' + _module()
    repo = _repo(tmp_path, {"a.py": module, "policies/p.yaml": _policy("a")})
    make_repo(repo, {"a.py": module.replace(before, after) + "# and a comment\n"})
    assert _statuses(repo) == {"a": "compared"}, what


# Each way a region reaches a file, as (base files, head's change): the change must be compared.
READS = {
    "a module in a tracked folder named site-packages (vendored, not installed)": (
        {
            "a.py": _module(
                "import os, sys\n"
                "_HERE = os.path.dirname(__file__)\n"
                "sys.path.insert(0, os.path.join(_HERE, 'vendor', 'site-packages'))\n"
                "import helperlib\n"
            ),
            "vendor/site-packages/helperlib.py": "X = 1\n",
        },
        {"vendor/site-packages/helperlib.py": "X = 2 - 1\n"},
    ),
    "a data file loaded beside the module (open)": (
        {
            "a.py": _module(
                "import os\n_HERE = os.path.dirname(__file__)\n",
                "    open(os.path.join(_HERE, 'scale.txt')).read()\n",
            ),
            "scale.txt": "1\n",
        },
        {"scale.txt": "2\n"},
    ),
    "a helper module imported at the top": (
        {"a.py": _module("import helper\n"), "helper.py": "FACTOR = 1\n"},
        {"helper.py": "FACTOR = 2\n"},
    ),
    "a config read at import": (
        {"a.py": _module("CONFIG = open('config.ini').read()\n"), "config.ini": "x=1\n"},
        {"config.ini": "x=2\n"},
    ),
    "a module imported inside the step (lazy)": (
        {"a.py": _module(body="    import lazy_helper\n"), "lazy_helper.py": "X = 1\n"},
        {"lazy_helper.py": "X = 2\n"},
    ),
    "a helper imported lazily by a helper": (
        {
            "a.py": _module("from pkg import helper\n"),
            "pkg/__init__.py": "",
            "pkg/helper.py": "def f():\n    from . import deep\n    return deep.X\n",
            "pkg/deep.py": "X = 1\n",
        },
        {"pkg/deep.py": "X = 2\n"},
    ),
    "a folder listed with os.listdir": (
        {"a.py": _module("import os\n", "    os.listdir('data')\n"), "data/one.txt": "1\n"},
        {"data/two.txt": "2\n"},
    ),
    "a module absent in the base that shadows an installed one": (
        {"a.py": _module("import colorsys\n")},
        {"colorsys.py": "# shadows the standard library's\nfrom math import *\n"},
    ),
}


def test_a_module_the_tree_has_but_that_came_from_elsewhere_is_not_absent(
    tmp_path: Path,
) -> None:
    """The worker imports jax before the tree is on sys.path, so a ``jax.py`` in the tree
    shadows nothing, in either tree: it is not one of the footprint's absent paths, which the
    base's copy of it would contradict (every region compared, as the gate's own repository's
    were: its ``gate/__init__.py`` and the gate imported from the README's ``.venv``)."""
    shadow = "raise ImportError('the tree's jax.py is never imported')\n"
    repo = _repo(tmp_path, {"a.py": _module(), "jax.py": shadow, "policies/p.yaml": _policy("a")})
    make_repo(repo, {"README.md": "a repo, changed\n"})
    assert _statuses(repo) == {"a": "unchanged"}
    footprint = _regions(repo)["a"]["footprint"]
    assert "jax.py" not in footprint["absent"], footprint
    assert "jax/__init__.py" in footprint["absent"], footprint


@pytest.mark.parametrize("what", READS)
def test_a_change_to_what_a_region_reads_is_compared(tmp_path: Path, what: str) -> None:
    base, change = READS[what]
    repo = _repo(tmp_path, {**base, "b.py": _module(), "policies/p.yaml": _policy("a", "b")})
    make_repo(repo, change)
    assert _statuses(repo) == {"a": "compared", "b": "unchanged"}, what


def test_a_changed_policy_entry_is_compared_and_another_regions_is_not(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path, {"a.py": _module(), "b.py": _module(), "policies/p.yaml": _policy("a", "b")}
    )
    policy = _policy("a", "b").replace(
        'name: a, step: "a:step"', 'name: a, warmup: 2, step: "a:step"'
    )
    make_repo(
        repo, {"policies/p.yaml": policy + '  - {name: c, step: "b:step", setup: "b:make"}\n'}
    )
    statuses = _statuses(repo)
    assert statuses == {"a": "compared", "b": "unchanged", "c": "new_region"}, statuses


EXISTS = _module("import os\n", "    os.path.exists('flag')\n")


def test_a_path_only_tested_with_exists_is_not_seen_a_documented_limit(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a.py": EXISTS, "policies/p.yaml": _policy("a")})
    make_repo(repo, {"flag": "now here\n"})
    assert _statuses(repo) == {"a": "unchanged"}
    make_repo(repo, {"policies/p.yaml": _policy("a", extra=", compare: always")})
    commit(repo, {}, "compare always")
    make_repo(repo, {"flag": "now here\n"})
    assert _statuses(repo) == {"a": "compared"}


@pytest.mark.chips(1)
@pytest.mark.usefixtures("one_process_on_the_device")
def test_on_a_tpu_an_unchanged_policy_starts_no_base_worker(
    tmp_path: Path, accelerator_rule: AcceleratorRule
) -> None:
    repo = _repo(
        tmp_path, {"a.py": _module(), "b.py": _module(), "policies/p.yaml": _policy("a", "b")}
    )
    make_repo(repo, {"README.md": "changed\n"})
    assert _statuses(repo) == {"a": "unchanged", "b": "unchanged"}
    workers = [s for s in accelerator_rule.starts() if s.is_worker]
    assert len(workers) == 1, workers  # the head's only


@pytest.mark.chips(1)
def test_on_a_tpu_a_region_that_reads_the_changed_prose_is_compared_apart(
    tmp_path: Path, accelerator_rule: AcceleratorRule
) -> None:
    """The head's first run of a region that reads the changed README is a plain run's; its
    footprint sends the region again, held, through a fresh head worker (one process on the
    chip at a time), then the base's: the trees compared apart, the other region unchanged."""
    reads = _module(
        "import os\n", "    open(os.path.join(os.path.dirname(__file__), 'README.md'))\n"
    )
    repo = _repo(tmp_path, {"a.py": reads, "b.py": _module(), "policies/p.yaml": _policy("a", "b")})
    make_repo(repo, {"README.md": "changed\n"})
    assert _statuses(repo) == {"a": "compared", "b": "unchanged"}
    assert "one process at a time" in _regions(repo)["a"]["base"]["apart"]
    workers = [s for s in accelerator_rule.starts() if s.is_worker]
    assert len(workers) == 3, workers  # the head's first, the head's again, the base's
    accelerator_rule.assert_only_workers_held_the_device()


def _events(monkeypatch: pytest.MonkeyPatch, repo: Path) -> list[str]:
    """What this test's gate does, in order: each worker spawned (``spawn head``/``spawn
    base``, by the tree it starts in), the head's check of the policies' callables, and each
    head run of a region that returned."""
    events: list[str] = []

    def spy(real: Any) -> Any:
        def spawned(root: Path, *args: Any, **kwargs: Any) -> Any:
            events.append("spawn head" if Path(root) == repo else "spawn base")
            return real(root, *args, **kwargs)

        return spawned

    monkeypatch.setattr(spawn_module, "spawn", spy(spawn_module.spawn))
    monkeypatch.setattr(worker_process, "spawn", spy(worker_process.spawn))

    def ran(tree: str, name: str, began: float, ended: float) -> None:
        if tree == "head":
            events.append(f"head ran {name}")

    _each_run(monkeypatch, ran)
    check = Scheduler.check

    def checked(self: Scheduler, *args: Any, **kwargs: Any) -> Any:
        done = check(self, *args, **kwargs)
        events.append("head checked")
        if self.audited:  # its worker heard what the modules read as they were imported
            events.append("head checked, listening")
        return done

    monkeypatch.setattr(Scheduler, "check", checked)
    return events


def test_the_bases_worker_starts_beside_the_heads_first_region_when_code_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change to code starts the base's worker as the head's first worker starts, so a region
    the change reaches, the first included, does not wait for it to import JAX; the verdicts
    are the footprints'."""
    repo = _repo(
        tmp_path, {"a.py": _module(), "b.py": _module(), "policies/p.yaml": _policy("a", "b")}
    )
    make_repo(repo, {"b.py": _module(scale="2.0 / 2")})  # b's code changed, its work not
    events = _events(monkeypatch, repo)
    assert _statuses(repo) == {"a": "unchanged", "b": "compared"}
    assert events.count("spawn base") == 1, events
    # While the head's worker imports the policies' callables, not when region b needs it.
    assert events.index("spawn base") < events.index("head checked"), events
    assert events.index("head checked") < events.index("head ran a"), events


def test_a_change_to_prose_alone_starts_no_base_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path, {"a.py": _module(), "policies/p.yaml": _policy("a")})
    make_repo(repo, {"README.md": "a repo, changed\n", "docs/guide.rst": "new\n"})
    events = _events(monkeypatch, repo)
    assert _statuses(repo) == {"a": "unchanged"}
    assert "spawn base" not in events, events
    assert "head checked, listening" in events, events


def test_a_region_always_compared_starts_the_bases_worker_early_whatever_the_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compare: always`` runs the region from the base even for a change to prose alone: its
    worker starts as the head's does, not when the first region needs it (waiting cost the
    first region the base worker's start)."""
    policy = _policy("a") + _policy("b", extra=", compare: always").removeprefix(POLICY_HEAD)
    repo = _repo(tmp_path, {"a.py": _module(), "b.py": _module(), "policies/p.yaml": policy})
    make_repo(repo, {"README.md": "a repo, changed\n"})
    events = _events(monkeypatch, repo)
    assert _statuses(repo) == {"a": "unchanged", "b": "compared"}
    assert events.count("spawn base") == 1, events
    assert events.index("spawn base") < events.index("head checked"), events


def test_a_change_to_comments_alone_starts_no_base_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reworded comment or a formatter's change is known, before anything runs, to reach no
    region: the base's worker is not started early to sit idle beside the head's."""
    repo = _repo(tmp_path, {"a.py": _module(), "policies/p.yaml": _policy("a")})
    make_repo(repo, {"a.py": "# a new first line\n" + _module().replace("x @ w", "(x @ w)")})
    events = _events(monkeypatch, repo)
    assert _statuses(repo) == {"a": "unchanged"}
    assert "spawn base" not in events, events


# Setup that counts its calls, one character a call, in a file of its own process beside the
# tree (written: no footprint hears a write), and raises past LIMIT calls when that is set.
COUNTED = STEP.replace(
    "def make():\n",
    "def make():\n"
    "    import os\n"
    "    log = os.path.join(os.environ['SETUP_LOG'], str(os.getpid()))\n"
    "    with open(log, 'a') as out:\n"
    "        out.write('x')\n"
    "    limit = os.environ.get('SETUP_LIMIT')\n"
    "    if limit and os.path.getsize(log) > int(limit):\n"
    "        raise RuntimeError('setup broke as it repeated')\n",
)


def _setup_calls(folder: Path) -> list[int]:
    return sorted(path.stat().st_size for path in folder.iterdir())


def test_an_unchanged_region_is_not_made_again_for_a_comparison_it_does_not_need(
    tmp_path: Path,
) -> None:
    """The head leaves its outputs in its worker until the footprint says the base must run
    (`Job.fetch_later`): a region the base has unchanged calls setup only for its own run,
    never twice more to fetch and check its outputs; a compared one still fetches them."""
    module = COUNTED.format(imports="\nSCALE = 1.0\n", body="")
    repo = _repo(tmp_path, {"a.py": module, "policies/p.yaml": _policy("a")})
    plain, based, compared = (tmp_path / name for name in ("plain", "based", "compared"))
    for folder in (plain, based, compared):
        folder.mkdir()
    run = run_gate(repo, "run", env={"SETUP_LOG": str(plain)})
    assert run.returncode == 0, run
    [own] = _setup_calls(plain)  # the calls of the region's own run
    make_repo(repo, {"README.md": "a repo, changed\n"})
    run = run_gate(
        repo, "run", "--base", "HEAD", "--json", "out/r.json", env={"SETUP_LOG": str(based)}
    )
    assert run.returncode == 0, run
    assert _regions(repo)["a"]["base"]["status"] == "unchanged", run
    # The head's worker alone, its own run alone: untraced (a trace's folder in the tree would
    # have made its footprint differ from the base's, and the region run again).
    assert _setup_calls(based) == [own], run
    make_repo(repo, {"a.py": module.replace("x @ w * SCALE", "SCALE * (w.T @ x.T).T")})
    run = run_gate(
        repo, "run", "--base", "HEAD", "--json", "out/r.json", env={"SETUP_LOG": str(compared)}
    )
    assert run.returncode == 0, run
    assert _regions(repo)["a"]["base"]["results"]["status"] == "matches", run
    # Each tree's worker: its run, and setup twice more for its outputs (then its turns).
    assert all(calls >= own + 2 for calls in _setup_calls(compared)), run


def test_a_region_that_reads_the_changed_prose_runs_again_held_and_is_compared(
    tmp_path: Path,
) -> None:
    """A change to prose alone reaches no region by its paths, so each head's run is made as a
    plain run's: let go of as it ends, untraced (`_Pair._unheld_first`). A region whose
    footprint then holds the changed README runs again, held, from a fresh worker, and is
    compared in full, paired rounds and all; the others are unchanged from their one run."""
    reads = COUNTED.format(
        imports="\nSCALE = 1.0\n",
        body="    open(os.path.join(os.path.dirname(__file__), 'README.md')).read()\n",
    ).replace("import jax\n", "import os\n\nimport jax\n", 1)
    repo = _repo(tmp_path, {"a.py": reads, "b.py": _module(), "policies/p.yaml": _policy("a", "b")})
    make_repo(repo, {"README.md": "a repo, changed\n"})
    calls = tmp_path / "calls"
    calls.mkdir()
    run = run_gate(
        repo, "run", "--base", "HEAD", "--json", "out/r.json", env={"SETUP_LOG": str(calls)}
    )
    assert run.returncode == 0, run
    regions = _regions(repo)
    assert {n: r["base"]["status"] for n, r in regions.items()} == {
        "a": "compared",
        "b": "unchanged",
    }, run
    assert "README.md" in dict(regions["a"]["footprint"]["files"]), regions["a"]["footprint"]
    assert regions["a"]["base"]["timing"]["rounds"] >= 4, regions["a"]["base"]
    assert regions["a"]["base"]["results"]["status"] == "matches", regions["a"]["base"]
    # Setup ran in three workers: the head's first, the head's fresh one, the base's.
    assert len(_setup_calls(calls)) == 3, run


def test_after_one_region_runs_twice_the_rest_of_its_policy_are_held_from_the_start(
    tmp_path: Path,
) -> None:
    """Regions that read git-ignored data, which the base's checkout lacks, are compared
    whatever the change. Under a change to prose alone the first of them is run as a plain
    run's, then again, held; the second is held from its first run: setup ran in three
    workers (the head's first, the head's fresh one, the base's), not four."""
    reads = COUNTED.format(
        imports="\nSCALE = 1.0\n",
        body="    data = os.path.join(os.path.dirname(__file__), 'data', 'x.txt')\n"
        "    if os.path.exists(data):  # the base's checkout has none\n"
        "        open(data).read()\n",
    ).replace("import jax\n", "import os\n\nimport jax\n", 1)
    repo = _repo(
        tmp_path,
        {
            "a.py": reads,
            "b.py": reads,
            "policies/p.yaml": _policy("a", "b"),
            ".gitignore": "data/\n",
        },
    )
    make_repo(repo, {"README.md": "a repo, changed\n", "data/x.txt": "1\n"})
    calls = tmp_path / "calls"
    calls.mkdir()
    run = run_gate(
        repo, "run", "--base", "HEAD", "--json", "out/r.json", env={"SETUP_LOG": str(calls)}
    )
    assert run.returncode == 0, run
    assert {n: r["base"]["status"] for n, r in _regions(repo).items()} == {
        "a": "compared",
        "b": "compared",
    }, run
    assert len(_setup_calls(calls)) == 3, run


def test_setup_failing_as_the_heads_outputs_are_fetched_is_the_heads_error(
    tmp_path: Path,
) -> None:
    """Fetched after the footprint, the outputs still need setup to repeat: when it raises
    then, the head's region fails with setup's error, as it did when fetched in its run. (The
    change is to a file the step reads as it runs, which only the footprint at the head's end
    finds: a change to the region's code would start the base's run beside the head's, whose
    setup, counted alike, would break first.)"""
    module = COUNTED.format(imports="\nSCALE = 1.0\n", body="    open('data.txt').read()\n")
    files = {"a.py": module, "data.txt": "1\n", "policies/p.yaml": _policy("a")}
    repo = _repo(tmp_path, files)
    plain = tmp_path / "plain"
    plain.mkdir()
    run = run_gate(repo, "run", env={"SETUP_LOG": str(plain)})
    assert run.returncode == 0, run
    [own] = _setup_calls(plain)
    make_repo(repo, {"data.txt": "2\n"})
    based = tmp_path / "based"
    based.mkdir()
    env = {"SETUP_LOG": str(based), "SETUP_LIMIT": str(own)}
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "out/r.json", env=env)
    assert run.returncode == 1, run
    a = _regions(repo)["a"]
    assert a["error"]["kind"] == "setup", a["error"]
    assert "setup broke as it repeated" in a["error"]["message"], a["error"]


# Planted in the gate's process: whether it had imported numpy when it ended (its workers leave
# by os._exit, past atexit, so only the gate's own process writes).
NUMPY_AT_EXIT = """
import atexit
import sys


def _ended():
    with open({log!r}, "w") as out:
        out.write("numpy" if "numpy" in sys.modules else "none")


atexit.register(_ended)
"""


def test_a_change_that_reaches_no_region_leaves_numpy_out_of_the_gates_process(
    tmp_path: Path,
) -> None:
    """Nothing is compared, so nothing needs numpy: no output arrives, no statistic is taken
    (~0.07 s of the gate's process, as in a plain run); a compared region does need it."""
    repo = _repo(tmp_path, {"a.py": _module(), "policies/p.yaml": _policy("a")})
    log = tmp_path / "numpy.txt"
    site = make_repo(tmp_path / "site", {"sitecustomize.py": NUMPY_AT_EXIT.format(log=str(log))})
    make_repo(repo, {"README.md": "a repo, changed\n"})
    run = run_gate(repo, "run", "--base", "HEAD", env={"PYTHONPATH": str(site)})
    assert run.returncode == 0, run
    assert log.read_text() == "none", run
    make_repo(repo, {"a.py": _module(scale="2.0 / 2")})
    run = run_gate(repo, "run", "--base", "HEAD", env={"PYTHONPATH": str(site)})
    assert run.returncode == 0, run
    assert log.read_text() == "numpy", run


def _each_run(
    monkeypatch: pytest.MonkeyPatch, heard: Callable[[str, str, float, float], None]
) -> None:
    """``heard`` each region's run in each tree as it returns: the tree, the region, when it
    started and when it returned."""
    run_held = Scheduler.run_held

    def held(
        self: Scheduler, policy: Any, region: Any, tree: Any = None, *rest: Any, **named: Any
    ) -> Any:
        began = time.monotonic()
        done = run_held(self, policy, region, tree, *rest, **named)
        heard(tree, region.name, began, time.monotonic())
        return done

    monkeypatch.setattr(Scheduler, "run_held", held)


def test_on_the_cpu_a_region_the_base_runs_whatever_its_footprint_runs_in_both_trees_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compare: always`` (or a changed policy entry), a change to the region's own module, or
    to a helper its code imports (its footprint so far, once the head's code is imported):
    the base's run does not wait for the head's to end. One whose change only the rest of the
    footprint finds (a file the step reads as it runs) waits for it: it may not run at all."""
    policy = _policy("a", "c", "d")
    policy += _policy("b", extra=", compare: always").removeprefix(POLICY_HEAD)
    repo = _repo(
        tmp_path,
        {
            "a.py": _module(),
            "b.py": _module(),
            "c.py": _module("from helper import K\n"),
            "helper.py": "K = 1\n",
            "d.py": _module(body="    open('d.txt').read()\n"),
            "d.txt": "1\n",
            "policies/p.yaml": policy,
        },
    )
    # a's code changed, its work not; c's helper, which c's module does not show; d's data.
    make_repo(repo, {"a.py": _module(scale="2.0 / 2"), "helper.py": "K = 2\n", "d.txt": "2\n"})
    runs: dict[tuple[str, str], tuple[float, float]] = {}
    _each_run(monkeypatch, lambda tree, name, *span: runs.setdefault((tree, name), span))
    statuses = _statuses(repo)
    assert statuses == {"a": "compared", "b": "compared", "c": "compared", "d": "compared"}
    assert runs[("base", "b")][0] < runs[("head", "b")][1], runs  # at once
    assert runs[("base", "a")][0] < runs[("head", "a")][1], runs  # at once
    assert runs[("base", "c")][0] < runs[("head", "c")][1], runs  # once c's code is imported
    assert runs[("base", "d")][0] >= runs[("head", "d")][1], runs  # after its footprint


def test_a_guess_that_a_change_reaches_a_region_leaves_the_verdict_to_its_footprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module by the step's name changed at the repository's root, but the policy's
    python_path imports the step from src/, unchanged: the base's run started at once on the
    guess, and the verdict is still the footprint's."""
    policy = POLICY_HEAD.replace("version: 1\n", "version: 1\npython_path: [../src]\n")
    policy += _policy("a").removeprefix(POLICY_HEAD)
    repo = _repo(tmp_path, {"a.py": _module(), "src/a.py": _module(), "policies/p.yaml": policy})
    make_repo(repo, {"a.py": _module(scale="2.0 / 2")})
    runs: dict[tuple[str, str], tuple[float, float]] = {}
    _each_run(monkeypatch, lambda tree, name, *span: runs.setdefault((tree, name), span))
    assert _statuses(repo) == {"a": "unchanged"}
    assert runs[("base", "a")][0] < runs[("head", "a")][1], runs  # the guess ran it at once
    assert _regions(repo)["a"]["footprint"]["files"][0][0] == "src/a.py"


def test_a_job_that_says_what_it_reached_hashes_each_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The footprint so far (`Reached`) and the one at the job's end come from one recording:
    a file is hashed once for both, on the head's clock (a large data file read at import
    would otherwise be read twice), and again only where it changed in between."""
    from gate.witness import footprint as recorded

    hashed: list[str] = []
    real = recorded.file_sha256
    monkeypatch.setattr(recorded, "file_sha256", lambda path: hashed.append(path) or real(path))
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 1000)
    recorder = recorded.FootprintRecorder()
    with recorder.recording(), open(data, "rb") as file:
        file.read()
    first = recorder.footprint(tmp_path, [tmp_path], [])
    again = recorder.footprint(tmp_path, [tmp_path], [])
    assert first == again
    assert first.files == (("data.bin", real(str(data))),), first
    assert hashed == [str(data)], hashed
    data.write_bytes(b"y" * 2000)  # another file now: hashed anew
    changed = recorder.footprint(tmp_path, [tmp_path], [])
    assert changed.files == (("data.bin", real(str(data))),), changed
    assert hashed == [str(data)] * 2, hashed
