"""``timeout_s`` bounds a region in all under ``run --base`` (issue 57), through the real CLI.

Under ``--base`` a region is many requests to two workers: each tree's run, then the paired
rounds' timed turns, then traced runs. Each request used to get the whole ``timeout_s`` (the
turns ``timeout_s`` times their number), so a region could run far past it: a setup that
compiled a new ``pmap`` on every call ran 17 minutes. Here a step that sleeps fits its run in
the timeout, while its 16 rounds of 4 turns of 4 runs (64 s of sleep) would not.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cli_helpers import make_repo, run_gate
from git_helpers import commit, init

STEP = """
import json
import time

import jax.numpy as jnp


def make():
    return (jnp.ones(4),)


def step(x):
    time.sleep(0.25{edit})  # a slow step
    return x
"""

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2}
regions:
  - name: slow
    step: steps:step
    setup: steps:make
    timeout_s: 15
    timing: {rounds: 16, max_rounds: 16, round_runs: 4}
"""


def test_timeout_s_bounds_the_whole_region_under_base(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": STEP.format(edit=""), "policies/p.yaml": POLICY}, "base")
    # Code, not a comment: a comment alone leaves the code the base's, and it runs once.
    make_repo(repo, {"steps.py": STEP.format(edit=" + 0.0")})
    began = time.monotonic()
    run = run_gate(repo, "run", "--base", "HEAD", timeout=300)
    took = time.monotonic() - began
    assert run.returncode == 1, run
    # The budget runs out in whichever request is under way when it does (the head's run, the
    # base's, or a round's turns: it depends on the machine's load), so the error is the
    # region's own testcase's or the base comparison's; either says why, in these words.
    said = [
        outcome.get("message", "")
        for case in run.junit().iter("testcase")
        if case.get("name", "").startswith("slow: ")
        for outcome in (*case.findall("error"), *case.findall("failure"))
    ]
    spent = "still running after 15 s in all (timeout_s, over its runs, timed turns"
    assert any(spent in message for message in said), (said, run)
    # Two workers' start-up and the report on top of the 15 s, never the rounds' 64 s of sleep.
    assert took < 60, (took, run)


HANGS_IN_THE_BASE = """
import json
import time

import jax.numpy as jnp


def make():
    return (jnp.ones(4),)


def step(x):
    {body}
    return x
"""


def test_a_base_that_hangs_beside_the_heads_run_is_the_bases_timeout_not_the_heads(
    tmp_path: Path,
) -> None:
    """On the CPU a region always compared runs in both trees at once, and the head's timed
    runs wait for the base's run to end: that wait is not the head's time. The head is judged;
    the comparison says the base could not run it."""
    policy = POLICY.replace("timeout_s: 15", "timeout_s: 8\n    compare: always")
    repo = init(tmp_path / "repo")
    hangs = HANGS_IN_THE_BASE.format(body="time.sleep(60)")
    commit(repo, {"steps.py": hangs, "policies/p.yaml": policy}, "base")
    make_repo(repo, {"steps.py": HANGS_IN_THE_BASE.format(body="pass  # fixed")})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "out/r.json", timeout=120)
    [region] = json.loads((repo / "out/r.json").read_text())["suites"][0]["regions"]
    assert region["error"] is None, region["error"]
    assert region["base"]["status"] == "base_failed", region["base"]
    assert region["base"]["error"]["kind"] == "timeout", region["base"]
    assert region["base"]["error"]["line"] == 12  # the base's sleep
    assert run.returncode == 1, run  # the comparison's error fails the run, the head passes
