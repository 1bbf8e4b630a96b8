"""Arrays compiled into a program as constants: reported at their line, a new one fails.

A jitted function that closes over a NumPy array embeds it in every compile; XLA's cost
figures barely move, so only the program's text shows it (`gate.witness.constants`). A JAX
that passes closed-over arrays as arguments (0.12's default, `jax_use_simplified_jaxpr_constants`)
compiles nothing in, and then nothing is reported (docs/policy.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import FAST_DEFAULTS, line_of, run_gate
from git_helpers import commit, init

# How JAX treats a closed-over array, whatever its version's default: compiled in as a
# constant (0.10's), or passed to the program as an argument (0.12's).
EMBEDDED = {"JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS": "false"}
AS_ARGUMENTS = {"JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS": "true"}

PASSED = """
import jax
import numpy as np

TABLE = np.random.default_rng(0).normal(size=(512, 1024)).astype(np.float32)  # 2 MiB
SMALL = np.ones((8, 1024), np.float32)  # 32 KiB: under the 1 MiB threshold


@jax.jit
def step(x, table):
    return (x @ table.T).sum() + (x * SMALL).sum()


def setup():
    return jax.device_put(np.ones((8, 1024), np.float32)), jax.device_put(TABLE)


def train(x, table):
    return step(x, table)
"""

CLOSED_OVER = PASSED.replace(
    "    return (x @ table.T).sum() + (x * SMALL).sum()",
    "    del table\n    return (x @ TABLE.T).sum() + (x * SMALL).sum()  # closes over TABLE",
)

POLICY = f"""
version: 1
{FAST_DEFAULTS.strip()}
regions:
  - {{name: lookup, step: "train:train", setup: "train:setup", timing: off}}
"""


def test_a_closed_over_array_is_a_new_constant_at_its_line_and_fails(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"train.py": PASSED, "policies/p.yaml": POLICY}, "base: the table passed")
    commit(repo, {"train.py": CLOSED_OVER}, "head: the table closed over")
    plain = run_gate(repo, "run", "--json", "plain.json", env=EMBEDDED)
    assert plain.returncode == 0, plain  # said, not failed, without a side to compare
    [region] = json.loads((repo / "plain.json").read_text())["suites"][0]["regions"]
    used = line_of(repo / "train.py", "# closes over TABLE")
    [constant] = region["cost"]["constants"]
    assert (constant["path"], constant["line"], constant["size_bytes"]) == (
        "train.py",
        used,
        2 * 1024 * 1024,
    ), constant
    assert constant["function"] == "jit(step)", constant

    run = run_gate(repo, "run", "--base", "HEAD~1", "--json", "r.json", env=EMBEDDED)
    assert run.returncode == 1, run
    testcase = run.testcase("lookup: cost")
    assert (testcase.get("file"), testcase.get("line")) == ("train.py", str(used)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    assert failure.get("message", "").startswith(
        f"new constant f32[1024,512] (2 MiB) compiled into jit(step) at train.py:{used}, "
        "not in the base: pass the array to the jitted function as an argument"
    ), run
    # The base's step ran the same table as an argument: no constant of it there.
    [region] = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    assert [c["line"] for c in region["base"]["cost"]["new_constants"]] == [used]


def test_a_constant_the_base_embeds_too_passes(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"train.py": CLOSED_OVER, "policies/p.yaml": POLICY}, "base: closed over")
    # Code above it, not a comment: a comment alone leaves the code the base's, run once.
    commit(repo, {"train.py": "SHIFT = 0\n" + CLOSED_OVER}, "head: a line moved")
    run = run_gate(repo, "run", "--base", "HEAD~1", "--json", "r.json", env=EMBEDDED)
    assert run.returncode == 0, run
    [region] = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    assert region["base"]["cost"]["new_constants"] == []
    assert len(region["cost"]["constants"]) == 1


def test_a_jax_that_passes_closed_over_arrays_as_arguments_compiles_none_in(
    tmp_path: Path,
) -> None:
    """0.12's default: the array is the program's argument, put on the device once (jax 0.10
    under the flag counts that upload, on the first call, as an implicit transfer: the
    transfers' verdict, not the constants'); no constant to report."""
    repo = init(tmp_path / "repo")
    commit(repo, {"train.py": PASSED, "policies/p.yaml": POLICY}, "base: the table passed")
    commit(repo, {"train.py": CLOSED_OVER}, "head: the table closed over")
    run = run_gate(repo, "run", "--base", "HEAD~1", "--json", "r.json", env=AS_ARGUMENTS)
    assert "new constant" not in run.stdout, run
    [region] = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    assert region["cost"]["constants"] == [], region["cost"]
    assert region["base"]["cost"]["new_constants"] == [], region["base"]["cost"]
