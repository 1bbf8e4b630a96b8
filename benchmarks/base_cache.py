"""What a kept compilation cache saves `run --base`: this checkout against another, warm cache.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/base_cache.py --before DIR \
        [--regions 20] [--rounds 2]

Builds gate_vs_floor.py's repository of N distinct small steps, committed, and gives every
run one ``JAX_COMPILATION_CACHE_DIR`` (what a CI job with its cache restored has). Each of the
two gates (this checkout, and ``--before``: another checkout of the gate, a `git worktree` of
an earlier commit, say) first runs ``python -m gate run --base HEAD`` once, untimed, to fill the
cache with what it writes; then the two alternate, ``--rounds`` times each, so that load drifts
hit both alike. Prints each run's wall seconds, the medians, and how many entries the cache
gained during the timed runs (a gate whose base is checked out in a new folder each run adds
the base's programs again every time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from gate_vs_floor import build, timed

ROOT = Path(__file__).resolve().parent.parent


def _entries(cache: Path) -> int:
    return sum(1 for p in cache.rglob("*") if p.is_file())


def _run(gate: Path, repo: Path, cache: Path) -> float:
    """Seconds of one ``run --base HEAD`` by the gate in ``gate``, with ``cache``."""
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(gate), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "gate", "run", "--base", "HEAD", "--junit", "r.xml"]
    return timed(command, repo, env)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other gate checkout")
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    gates = {"before": args.before.resolve(), "this checkout": ROOT}
    with tempfile.TemporaryDirectory() as scratch:
        repo, cache = Path(scratch) / "repo", Path(scratch) / "cache"
        build(repo, args.regions)
        for gate in gates.values():
            _run(gate, repo, cache)  # fills the cache with what this gate writes: not timed
        seconds: dict[str, list[float]] = {name: [] for name in gates}
        added: dict[str, int] = dict.fromkeys(gates, 0)
        for round_ in range(args.rounds):
            for name, gate in gates.items():
                before = _entries(cache)
                seconds[name].append(_run(gate, repo, cache))
                added[name] += _entries(cache) - before
                print(f"round {round_ + 1}: {name} {seconds[name][-1]:.1f} s", file=sys.stderr)
    print(f"`run --base HEAD`, {args.regions} regions, warm cache, {args.rounds} rounds:\n")
    print("| gate | median s | runs | cache entries added in the timed runs |")
    print("|---|---|---|---|")
    for name in gates:
        runs = ", ".join(f"{s:.1f}" for s in seconds[name])
        print(f"| {name} | {statistics.median(seconds[name]):.1f} | {runs} | {added[name]} |")


if __name__ == "__main__":
    main()
