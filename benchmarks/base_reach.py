"""``run --base HEAD`` against a plain ``run`` when the change reaches few regions (issue 55).

A repository of 20 regions, one module each (a 64x128 by 128x128 matmul, scaled by a constant
from a helper module every region imports), committed; then four pull requests on top of it:
one that changes README.md only (no region's files), one that adds a comment to one region's
module (the same code: its footprint is unchanged), one that changes that module's code,
computing the same (``jnp.matmul`` for ``@``: compared in full, paired rounds and all), and
one that changes the helper's code, computing the same (every region compared: on the CPU
each base's run starts once the head's code is imported, `gate.compare.session._Pair`). Each
is timed as ``transfer-gate run --base HEAD`` and as a plain ``transfer-gate run``, each
writing a JSON report too, alternately, and the medians' ratio printed (targets: 1.10x,
1.25x; none for the helper, the case of issue 53's two-tree floor), with the regions the base
ran and their paired rounds (from the JSON report).

    python -m benchmarks base_reach [--regions 20] [--rounds 3] \
        [--changes readme comment code helper]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.processes import commit_all, gate_env, git, timed

MODULE = """
import jax
import jax.numpy as jnp

from helper import SCALE


def make():
    return (jnp.ones((64, 128), jnp.float32), jnp.ones((128, 128), jnp.float32))


@jax.jit
def step(x, w):
    return x @ w * SCALE
"""
HELPER = "SCALE = 1.0\n"
GATE = [sys.executable, "-m", "gate"]
TARGETS: dict[str, float | None] = {
    "README.md only": 1.10,
    "a comment in one region's module": 1.25,
    "one region's code": 1.25,
    "a helper every region imports": None,
}
# ``--changes``: each case by a word (the helper's case compares every region: on a TPU chip,
# where each tree's worker opens it in turn, it alone may outlast a device call).
CHANGES = dict(zip(("readme", "comment", "code", "helper"), TARGETS, strict=True))


def build(repo: Path, regions: int) -> None:
    (repo / "policies").mkdir(parents=True)
    rows = []
    for i in range(regions):
        (repo / f"r{i}.py").write_text(MODULE)
        rows.append(f'  - {{name: r{i}, step: "r{i}:step", setup: "r{i}:make"}}\n')
    (repo / "policies" / "p.yaml").write_text("version: 1\nregions:\n" + "".join(rows))
    (repo / "helper.py").write_text(HELPER)
    (repo / "README.md").write_text("a repository\n")
    commit_all(repo)


def run(repo: Path, *args: str) -> float:
    """Wall seconds of ``transfer-gate run ARGS`` in ``repo`` (a compilation cache as set here)."""
    return timed([*GATE, "run", *args], repo, gate_env(keep_cache=True))[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--changes", nargs="+", choices=list(CHANGES), default=list(CHANGES))
    options = parser.parse_args(argv)
    chosen = {CHANGES[word] for word in options.changes}
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        build(repo, options.regions)
        changes = {
            "README.md only": ("README.md", "a repository, changed\n"),
            "a comment in one region's module": ("r0.py", MODULE + "# a comment\n"),
            "one region's code": ("r0.py", MODULE.replace("x @ w", "jnp.matmul(x, w)")),
            "a helper every region imports": ("helper.py", "SCALE = 2.0 / 2\n"),
        }
        report = Path(scratch) / "r.json"
        print(
            f"| change ({options.regions} regions) | run | run --base HEAD | ratio | target "
            "| the base ran: verdict, paired rounds |"
        )
        print("|---|---|---|---|---|---|")
        for what, (name, text) in changes.items():
            if what not in chosen:
                continue
            git(repo, "checkout", "-q", "--", ".")
            (repo / name).write_text(text)
            run(repo)  # a warm start for both: caches, the base's worktree folder
            plain: list[float] = []
            based: list[float] = []
            compared: list[list[str]] = []
            for _ in range(options.rounds):
                # Both write the same reports: what --base costs, not what a JSON report does.
                plain.append(run(repo, "--json", str(report)))
                based.append(run(repo, "--base", "HEAD", "--json", str(report)))
                compared.append(_compared(report))
            p, b = statistics.median(plain), statistics.median(based)
            target = TARGETS[what]
            if target is None:
                goal = "none (every region compared)"
            else:
                goal = f"{target:.2f}x ({'met' if b / p <= target else 'missed'})"
            ran = "; ".join(dict.fromkeys(", ".join(c) for c in compared if c)) or "none"
            if len(compared[-1]) > 2:  # many: how many, not each
                ran = f"{len(compared[-1])} regions in the last run"
            print(f"| {what} | {p:.2f} s | {b:.2f} s | {b / p:.2f}x | {goal} | {ran} |")


def _compared(report: Path) -> list[str]:
    """The regions the base ran in a run's JSON report, each with its paired rounds."""
    regions = json.loads(report.read_text())["suites"][0]["regions"]
    found = []
    for region in regions:
        if region["base"]["status"] == "compared":
            timing = region["base"].get("timing") or {}
            found.append(
                f"{region['name']}: {timing.get('verdict', '-')}, {timing.get('rounds', '-')} "
                f"rounds, ratio {timing.get('ratio') or 0:.3f}"
            )
    return found
