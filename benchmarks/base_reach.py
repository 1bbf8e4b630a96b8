"""``run --base HEAD`` against a plain ``run`` when the change reaches few regions (issue 55).

A repository of 20 regions, one module each (a 64x128 by 128x128 matmul), committed; then two
pull requests on top of it: one that changes README.md only (no region's files), one that
changes one region's module. Each is timed as ``transfer-gate run --base HEAD`` and as a plain
``transfer-gate run``, alternately, and the medians' ratio printed (targets: 1.10x, 1.25x).

    python benchmarks/base_reach.py [--regions 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = """
import jax
import jax.numpy as jnp


def make():
    return (jnp.ones((64, 128), jnp.float32), jnp.ones((128, 128), jnp.float32))


@jax.jit
def step(x, w):
    return x @ w
"""
GATE = [sys.executable, "-m", "gate"]
TARGETS = {"README.md only": 1.10, "one region's module": 1.25}


def build(repo: Path, regions: int) -> None:
    (repo / "policies").mkdir(parents=True)
    rows = []
    for i in range(regions):
        (repo / f"r{i}.py").write_text(MODULE)
        rows.append(f'  - {{name: r{i}, step: "r{i}:step", setup: "r{i}:make"}}\n')
    (repo / "policies" / "p.yaml").write_text("version: 1\nregions:\n" + "".join(rows))
    (repo / "README.md").write_text("a repository\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)


def timed(repo: Path, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [*GATE, "run", *args], cwd=repo, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(
            f"transfer-gate run {' '.join(args)}: exit {done.returncode}\n{done.stdout}"
        )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        build(repo, options.regions)
        changes = {
            "README.md only": ("README.md", "a repository, changed\n"),
            "one region's module": ("r0.py", MODULE + "# changed, computing the same\n"),
        }
        print(f"| change ({options.regions} regions) | run | run --base HEAD | ratio | target |")
        print("|---|---|---|---|---|")
        for what, (name, text) in changes.items():
            subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
            (repo / name).write_text(text)
            timed(repo)  # a warm start for both: caches, the base's worktree folder
            plain, based = [], []
            for _ in range(options.rounds):
                plain.append(timed(repo))
                based.append(timed(repo, "--base", "HEAD"))
            p, b = statistics.median(plain), statistics.median(based)
            target = TARGETS[what]
            mark = "met" if b / p <= target else "missed"
            print(f"| {what} | {p:.2f} s | {b:.2f} s | {b / p:.2f}x | {target:.2f}x ({mark}) |")


if __name__ == "__main__":
    main()
