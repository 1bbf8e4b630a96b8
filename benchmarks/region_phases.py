"""Where a region's time goes: the gate's stages against the floor's phases, region by region.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks region_phases [--regions 20] [--rounds 2] \
        [--profile] [--settrace] [--parts]

Builds the scenarios' repository (`benchmarks.regions`) of N distinct small steps and runs,
each in a process of its own (alternating, ``--rounds`` times each):

- the gate: `gate.region.engine.run_region` on every region, as a worker runs them (the
  environment prepared before JAX starts, what regions leave released between them, no traced
  runs: a plain run), each stage timed from the engine's own announcements
  (`gate.region.stages`), and what is left of the region after its last stage;
- the floor (`benchmarks.floor`): the hand-written phases for the same steps (first call, 2
  warm-ups, 3 guarded runs, 20 timed runs, the finite check), each timed;
- with ``--parts``, the gate once more with each part of a region timed (`region_parts`:
  what the engine calls and enters, the mapped runs' parts by phase), ms a region by part;
- with ``--settrace`` (Python 3.12+), the gate again with its transfer map hearing the code
  through ``sys.settrace``, as on Python 3.11, instead of ``sys.monitoring``
  (`gate.witness.code_events`).

Prints milliseconds per region for each (the medians over the rounds of the mean over regions
2..N: the first starts everything, JAX's and the gate's once-per-process costs), and the
difference of the totals: the gate's own cost per region, by stage. The whole-run figures,
start-up included, are gate_vs_floor.py's; this says where inside a region the difference is.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from benchmarks.floor import phase_means
from benchmarks.processes import gate_env, run_grouped
from benchmarks.region_parts import Parts, wrap_parts
from benchmarks.regions import build
from benchmarks.worker import as_a_worker

TIMEOUT_S = 900
SETTRACE = "gate, map on sys.settrace"
PARTS = "gate, by part"


def _at_once(release: Callable[[], None]) -> None:
    """What a region lets go of, let go of inside its own time: a worker does it after the
    reply, while the parent reads it (`gate.isolation.worker`), which no figure here has."""
    release()


def _gate(
    repo: Path, profile: bool = False, parts: Parts | None = None
) -> tuple[dict[str, float], int]:
    """Each stage's seconds over regions 2..N, run as a worker runs them, and N - 1; with
    ``profile``, regions 2..N under cProfile, its top functions printed; with ``parts``, every
    part of a region timed into it (`region_parts.wrap_parts`)."""
    as_a_worker()
    from gate.isolation.leftovers import Leftovers
    from gate.policy.load import load_policy
    from gate.region.engine import run_region
    from gate.region.stages import Stage, listening

    policy = load_policy(repo / "policies" / "bench.yaml", repo)
    if parts is not None:
        wrap_parts(parts)
    leftovers = Leftovers()
    leftovers.after_startup()
    spent: dict[str, float] = defaultdict(float)
    profiler = cProfile.Profile() if profile else None
    for index, region in enumerate(policy.regions):
        if index == 1 and profiler is not None:
            profiler.enable()
        if parts is not None:
            parts.counting = index > 0
        if index:
            leftovers.between_regions()
        marks: list[tuple[str, float]] = [("starting", time.perf_counter())]

        def entered(stage: Stage, marks: list[tuple[str, float]] = marks) -> None:
            marks.append((stage.value, time.perf_counter()))

        with listening(entered):
            run_region(policy, region, repo_root=repo, traced=False, let_go=_at_once)  # as a worker
        marks.append(("", time.perf_counter()))
        if index:  # the first region starts JAX's and the gate's machinery
            for (stage, start), (_, end) in itertools.pairwise(marks):
                spent[stage] += end - start
    if profiler is not None:
        profiler.disable()
        for order in ("tottime", "cumulative"):
            pstats.Stats(profiler, stream=sys.stdout).sort_stats(order).print_stats(40)
    return spent, len(policy.regions) - 1


def _child(which: str, repo: Path) -> None:
    os.chdir(repo)
    if which == SETTRACE:
        # The transfer map as on Python 3.11, on a Python that has sys.monitoring.
        from gate.witness import code_events

        code_events._monitoring_tool = lambda: None
    if which == "gate-profiled":
        spent, regions = _gate(repo, profile=True)
    elif which == PARTS:
        parts = Parts()
        _, regions = _gate(repo, parts=parts)
        spent = parts.spent
    else:
        spent, regions = _gate(repo)
    print(json.dumps({stage: seconds / regions for stage, seconds in spent.items()}))


def _measured(which: str, repo: Path) -> dict[str, float]:
    env = gate_env()
    if which == "floor":  # the floor's script, its phases written beside it
        times = repo.parent / "floor-phases.json"
        done = run_grouped([sys.executable, "floor.py", str(times)], repo, env, TIMEOUT_S)
        if done.returncode != 0:
            raise SystemExit(f"the floor exited {done.returncode}:\n{done.stderr[-3000:]}")
        return phase_means(json.loads(times.read_text()))
    command = [sys.executable, "-m", "benchmarks", "region_phases", "--child", which, str(repo)]
    done = run_grouped(command, repo, env, TIMEOUT_S)
    if done.returncode != 0:
        said = done.stdout + (done.stderr or "")
        raise SystemExit(f"{which} exited {done.returncode}:\n{said[-3000:]}")
    if which == "gate-profiled":
        print(done.stdout)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then one more gate run, regions 2..N under cProfile: its top functions",
    )
    parser.add_argument(
        "--settrace",
        action="store_true",
        help="also the gate with the transfer map on sys.settrace, as on Python 3.11 (3.12+)",
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="then one more gate run with every part of a region timed (region_parts.py)",
    )
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "REPO"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], Path(args.child[1]))
        return
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        build(repo, args.regions)
        rounds: dict[str, list[dict[str, float]]] = {"gate": [], "floor": []}
        if args.settrace:
            rounds[SETTRACE] = []
        for _ in range(args.rounds):
            for which, measured in rounds.items():
                measured.append(_measured(which, repo))
        if args.profile:
            _measured("gate-profiled", repo)
        by_part = _measured(PARTS, repo) if args.parts else {}
    print(f"ms per region, regions 2-{args.regions}, medians of {args.rounds} rounds:\n")
    totals = {}
    for which, measured in rounds.items():
        print(f"| {which} | ms |\n|---|---|")
        stages = dict.fromkeys(stage for one in measured for stage in one)
        for stage in stages:
            ms = statistics.median(one.get(stage, 0.0) for one in measured) * 1e3
            print(f"| {stage or '(after the last stage)'} | {ms:.1f} |")
        totals[which] = statistics.median(sum(one.values()) for one in measured) * 1e3
        print(f"| total | {totals[which]:.1f} |\n")
    gate, floor = totals["gate"], totals["floor"]
    print(f"gate {gate:.1f} ms, floor {floor:.1f} ms a region: {gate / floor:.2f}x")
    if SETTRACE in totals:
        traced = totals[SETTRACE]
        print(f"{SETTRACE} {traced:.1f} ms a region: {traced / floor:.2f}x the floor")
    if by_part:
        print("\nthe gate by part, one more run (parts nest; each timed while wrapped):\n")
        print("| part | ms |\n|---|---|")
        for part, seconds in sorted(by_part.items(), key=lambda item: -item[1]):
            print(f"| {part} | {seconds * 1e3:.2f} |")
