"""The README's quick start on a repository of one's own, and what ``init`` teaches on the way.

The README's third command block is run as written (less its ``pip install``: the gate under
test is installed already) on a throwaway git repository whose loop module is the README's own
``What to gate`` example, from ``init`` to a first ``run --base main``; then a leak in the loop
iteration is caught at its line. ``init`` warns when the step it is given is a jitted function,
names the loop that calls it, and ignores ``reports/``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from cli_helpers import ROOT, make_repo, run_gate
from git_helpers import commit, git, init

from gate.package import docs_url

README = (ROOT / "README.md").read_text(encoding="utf-8")

# What the README's example calls and does not show: a jitted update, a state, a loader that
# puts each batch on the device where it is made.
LOOP_HELPERS = """\
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def train_step(state, batch):
    loss = jnp.mean((batch - state) ** 2)
    return state - 0.1 * (state - jnp.mean(batch)), loss


def create_state():
    return jax.device_put(jnp.zeros((), jnp.float32))


def make_loader():
    rng = np.random.default_rng(0)
    while True:
        yield jax.device_put(rng.normal(size=(8,)).astype(np.float32))


"""


def quick_start_commands() -> list[list[str]]:
    """The README's third command block (its second ``sh`` block), as ``transfer-gate`` argv
    lists: the lines joined by ``&&`` split apart, the install line left out."""
    block = README.split("```sh\n")[2].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        for part in line.split("&&"):
            words = shlex.split(part)
            if words and words[0] == "transfer-gate":
                commands.append(words[1:])
            else:
                assert words[:2] == ["pip", "install"], line
    return commands


def what_to_gate_example() -> str:
    section = README.split("### What to gate", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_quick_start_goes_from_init_to_a_first_run_against_main(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    loop = LOOP_HELPERS + what_to_gate_example()
    commit(repo, {"mytrain/__init__.py": "", "mytrain/loop.py": loop}, "a training loop")
    commands = quick_start_commands()
    assert [c[0] for c in commands] == ["init", "validate", "run"], commands
    assert commands[2] == ["run", "--base", "main"]

    done = run_gate(repo, *commands[0])
    assert done.returncode == 0, done
    assert "warning" not in done.stdout, done  # the loop's iteration is not a jitted function
    assert (repo / "policies" / "loop.yaml").is_file(), done
    assert (repo / ".gitignore").read_text() == "reports/\n"
    for command in commands[1:]:
        done = run_gate(repo, *command)
        assert done.returncode == 0, done
    assert "PASS  loop.train_iteration" in done.stdout, done
    assert "vs base: new region, not compared" in done.stdout, done  # main has no policy yet
    assert git(repo, "status", "--porcelain", "--ignored", "reports") == "!! reports/"

    # The policy on main; then a pull request fetches the loss in the loop's iteration.
    commit(repo, {}, "the gate's policy")
    leaky = loop.replace(
        "    return state, metrics", "    print(float(metrics))\n    return state, metrics"
    )
    assert leaky != loop
    make_repo(repo, {"mytrain/loop.py": leaky})
    line = leaky.splitlines().index("    print(float(metrics))") + 1
    done = run_gate(repo, *commands[2])
    assert done.returncode == 1, done
    assert f"mytrain/loop.py:{line}: implicit device-to-host" in done.stdout, done


JITTED_STEP = """\
import jax


@jax.jit
def train_step(state, batch):
    return state + batch, batch


def train(state, batches):
    for batch in batches:
        state, loss = train_step(state, batch)
        print(float(loss))
    return state
"""


@pytest.mark.parametrize(
    ("source", "how"),
    [
        (JITTED_STEP, "@jax.jit"),
        (
            JITTED_STEP.replace("@jax.jit\ndef train_step", "def _step").replace(
                "\n\n\ndef train(",
                "\n\ntrain_step = jax.jit(_step, donate_argnums=0)\n\n\ndef train(",
            ),
            "train_step = jax.jit(_step, donate_argnums=0)",
        ),
        (
            "from functools import partial\n"
            + JITTED_STEP.replace("@jax.jit", "@partial(jax.jit, static_argnums=())"),
            "@partial(jax.jit, static_argnums=())",
        ),
    ],
    ids=["decorator", "assignment", "partial"],
)
def test_init_warns_that_a_jitted_step_is_gated_without_its_loop(
    tmp_path: Path, source: str, how: str
) -> None:
    repo = make_repo(tmp_path, {"mytrain/__init__.py": "", "mytrain/steps.py": source})
    done = run_gate(repo, "init", "mytrain.steps:train_step")
    assert done.returncode == 0, done  # the policy is written all the same
    lines = done.stdout.splitlines()
    # After what init wrote and what it says of the step's parameters: the warning.
    warned = next((i for i, line in enumerate(lines) if line.startswith("warning:")), None)
    assert warned is not None, done
    lines = lines[warned - 1 :]
    assert lines[1] == (
        f"warning: train_step is itself a jitted function ({how}): gated alone, the region "
        "never sees what the loop around it moves (a NumPy batch from the loader, "
        "print(float(loss)))."
    ), done
    loop_line = source.splitlines().index("    for batch in batches:") + 1
    assert f"Gate one pass of train's loop at mytrain/steps.py:{loop_line} instead" in lines[2]
    assert (
        "`transfer-gate init mytrain.steps:train_iteration --setup mytrain.steps:loop_state`"
        in lines[2]
    ), done
    assert lines[3].strip().endswith("/README.md#what-to-gate"), done


STEP_ALONE = JITTED_STEP[: JITTED_STEP.index("def train(")]


@pytest.mark.parametrize(
    ("files", "step", "module"),
    [
        # The step in a package's __init__.py, the loop in a module beside it.
        (
            {"mytrain/__init__.py": STEP_ALONE, "mytrain/loop.py": "LOOP"},
            "mytrain:train_step",
            "mytrain.loop",
        ),
        # The step in a module, the loop in its package's __init__.py.
        (
            {"mytrain/__init__.py": "LOOP", "mytrain/steps.py": STEP_ALONE},
            "mytrain.steps:train_step",
            "mytrain",
        ),
    ],
    ids=["step in __init__", "loop in __init__"],
)
def test_init_names_the_loops_module_wherever_the_two_lie(
    tmp_path: Path, files: dict[str, str], step: str, module: str
) -> None:
    # Read, not imported: init finds the loop in the step's folder by its source.
    loop = JITTED_STEP[JITTED_STEP.index("def train(") :]
    repo = make_repo(tmp_path, {k: v.replace("LOOP", loop) for k, v in files.items()})
    done = run_gate(repo, "init", step)
    assert done.returncode == 0, done
    assert f"`transfer-gate init {module}:train_iteration --setup {module}:loop_state`" in (
        done.stdout
    ), done


def test_init_says_nothing_of_jit_for_a_plain_function(tmp_path: Path) -> None:
    plain = JITTED_STEP.replace("@jax.jit\n", "")
    repo = make_repo(tmp_path, {"mytrain/__init__.py": "", "mytrain/steps.py": plain})
    done = run_gate(repo, "init", "mytrain.steps:train_step")
    assert done.returncode == 0, done
    assert "jitted" not in done.stdout, done


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("build/\n*.pyc", "build/\n*.pyc\nreports/\n"),
        ("/reports/\n", "/reports/\n"),
        ("reports\n", "reports\n"),
    ],
    ids=["appended", "already-rooted", "already-bare"],
)
def test_init_ignores_the_reports_folder_once(tmp_path: Path, before: str, after: str) -> None:
    repo = make_repo(tmp_path, {"solo.py": "def step():\n    return 1.0\n"})
    (repo / ".gitignore").write_text(before)
    done = run_gate(repo, "init", "solo:step")
    assert done.returncode == 0, done
    assert (repo / ".gitignore").read_text() == after
    assert ("added reports/ to .gitignore" in done.stdout) == (before != after), done


COMMANDS = ("run", "baseline", "validate", "init", "schema", "doctor", "merge", "history")


def test_help_points_at_docs_a_pip_install_can_open(tmp_path: Path) -> None:
    # A pip install has no docs/ folder: a page is named by its address at this version.
    said = run_gate(tmp_path, "--help")
    assert said.returncode == 0, said
    assert f"Docs: {docs_url('README.md')}" in said.stdout, said
    assert docs_url("README.md").startswith("https://github.com/")
    for command in COMMANDS:
        said = run_gate(tmp_path, command, "--help")
        assert said.returncode == 0, said
        text = " ".join(said.stdout.split())  # argparse wraps long words too
        assert not re.search(r"(?<![/\w])docs/[\w-]+\.md", text), (command, said.stdout)
        if command == "run":  # an address is never cut at a hyphen
            assert docs_url("docs/reports.md", "json-report") in said.stdout, said
