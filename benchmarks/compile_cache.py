"""What a kept JAX compilation cache saves: `transfer-gate run` with an empty and a warm one.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks compile_cache [--rounds 3] [PATH ...]

Runs the gate on PATH (default: the shipped example, ``policies/``) from the repository
root, with ``JAX_COMPILATION_CACHE_DIR`` set to

- an empty folder, made fresh for each run: what a job gets on a fresh runner, a GitHub-hosted
  one whose actions/cache entry was evicted, or an ephemeral self-hosted runner host;
- a warm folder, filled by one untimed run first: what a job gets when the cache was kept
  (actions/cache restored it, or the self-hosted runner's volume survived).

The two kinds alternate, round by round, so that load drifts hit both alike. Prints the wall
time of each run and the medians, with the command that reproduces them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.processes import ROOT, gate_env, timed

# The console script beside this interpreter: what the workflows run.
GATE = Path(sys.executable).with_name("transfer-gate")
TIMEOUT_S = 900


def gate_run(paths: list[str], cache: Path, reports: Path) -> float:
    """Seconds of one `transfer-gate run` with ``cache`` as JAX's persistent cache."""
    argv = [str(GATE), "run", "--junit", str(reports / "r.xml"), *paths]
    return timed(argv, ROOT, gate_env(cache=cache), timeout_s=TIMEOUT_S)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("paths", nargs="*", default=["policies/"])
    args = parser.parse_args(argv)
    empty: list[float] = []
    warm: list[float] = []
    with tempfile.TemporaryDirectory(prefix="compile-cache-bench-") as scratch:
        root = Path(scratch)
        warm_cache = root / "warm"
        gate_run(args.paths, warm_cache, root)  # fills it; not timed
        entries = sum(1 for p in warm_cache.rglob("*") if p.is_file())
        print(f"warm cache: {entries} files after one run of {' '.join(args.paths)}")
        for n in range(args.rounds):
            cold_cache = root / f"empty-{n}"
            empty.append(gate_run(args.paths, cold_cache, root))
            shutil.rmtree(cold_cache, ignore_errors=True)
            warm.append(gate_run(args.paths, warm_cache, root))
            print(f"round {n + 1}: empty {empty[-1]:.2f} s, warm {warm[-1]:.2f} s")
    cold_median, warm_median = statistics.median(empty), statistics.median(warm)
    print()
    print("| JAX_COMPILATION_CACHE_DIR | runs (s) | median |")
    print("|---|---|---|")
    print(f"| empty | {', '.join(f'{s:.2f}' for s in empty)} | {cold_median:.2f} s |")
    print(f"| warm | {', '.join(f'{s:.2f}' for s in warm)} | {warm_median:.2f} s |")
    print(
        f"\nsaved: {cold_median - warm_median:.2f} s a run "
        f"({100 * (1 - warm_median / cold_median):.0f}%)"
    )
    return 0
