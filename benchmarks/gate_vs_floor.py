"""The gate's own cost: `transfer-gate run` against a hand-written script doing the same.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks gate_vs_floor \
        [--regions 20 100] [--base-at 20] [--growth 100 500] [--rounds 1]

Builds the scenarios' repository of N regions of distinct small jitted steps
(`benchmarks.regions`) and times, in subprocesses, alternating so that load drifts hit both
alike:

- the gate: ``python -m gate run`` of its policy (first call, 2 warm-ups, 3 guarded
  runs, 20 timed runs, a finite check per region);
- the floor (`benchmarks.floor`): one script doing the same phases by hand in one process.

- the gate against a base: ``python -m gate run --base HEAD`` of the same regions, the
  repository committed so that base and head are the same tree (each tree's worker runs
  each region, then the two time it in paired rounds until the timing verdict is decided,
  `gate.compare.timing`; on a TPU chip, which admits one process, each tree's worker in
  turn, compared unpaired);
- the floor for two trees (`benchmarks.floor`): the same by hand for a copy of the tree
  beside the repository, then 16 paired rounds; and again with each region's rounds as the
  gate's last ``--base`` run took them (its JSON report), the row ``, the floor at its
  rounds``: the gate's own cost, apart from how many rounds its verdicts needed;
- the same at the gate's rounds with each tree in a process of its own, the turn handed over
  through a pipe (``FLOOR_PROCESSES``): the least a process per tree (issue 53) can cost, and
  how much of the gate's cost is that design's, not the gate's; and once more with each
  round's turns pinned to one core as the gate pins them (``FLOOR_PINNED``).

Prints one row per N (and one per N of ``--base-at`` with ``, --base HEAD``): the gate's
seconds, the floor's seconds, their ratio (the medians over ``--rounds``), and the same for
CPU seconds (user + system, the process and every process it waited for: less sensitive to
what else the machine runs than wall time); the ``--base`` rows are against the two-tree
floor (``--no-base`` leaves them out). The load average before and after is printed too.

Then, for each N of ``--growth``, what a region costs as the run goes on (issue 40): one
plain run of N regions, each region's seconds by its JUnit time, the mean of regions 2-21
against that of the last 20 (the first region starts everything); the floor's own seconds
per region the same way; and the worker's resident memory at a quarter, half, three
quarters and the end of its life (read from /proc every 0.2 s). Last, the issues' targets,
met or missed: plain ``run`` at most 1.10x the floor at 20 and 100 regions, ``--base`` at
most 2.0x the one-tree floor at 20 (what a repository without the gate pays), the last 20
regions at most 1.10x the first 20 (issue 40); ``--base`` at most 1.15x the two-tree floor
at 20 (issue 53).
All run with JAX_COMPILATION_CACHE_DIR unset (each gets a cold start), the gate's package
byte-compiled first, as ``pip install`` leaves it (an editable checkout under
PYTHONDONTWRITEBYTECODE, as on the development machine, would compile its ~190 modules from
source in every process: ~0.15 s in the gate's and again in its worker's, which JAX's own
installed modules never pay).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.floor import GATE_ROUNDS, paired, processes_command, region_seconds
from benchmarks.processes import ROOT, gate_env, load_average, medians, timed
from benchmarks.regions import build

# The targets (#40): the gate's own cost against the floor, and per region as the
# run goes on. Printed, met or missed, under the tables.
PLAIN_TARGET = 1.10  # plain `run` against the floor, at 20 regions and at 100
BASE_TARGET = 2.0  # `run --base HEAD` against the one-tree floor, at 20 regions
BOTH_TREES_TARGET = 1.15  # `run --base HEAD` against the two-tree floor, at 20 (issue 53)
SAME_ROUNDS = "floor, two trees, the gate's rounds"
# The same work with each tree in a process of its own, turns handed over by a pipe: what any
# design with a process per tree (issue 53) pays at the least.
PROCESSES = "floor, two trees, two processes, the gate's rounds"
# The same with each round's turns on one core, rotating, as the gate pins them (issue 20's
# busy neighbour): how much of what lies between the two is that pinning.
PINNED = "floor, two trees, two processes pinned as the gate pins, the gate's rounds"
# Issue 55's case: one region of N compared (`compare: always`), the rest unchanged, run once;
# the gate against its plain run, and the floor with a process per tree doing the same (the
# base's process runs that region alone, at the gate's rounds) against the one-tree floor.
ONE = "--base HEAD, one region compared"
ONE_FLOOR = "floor, a process per tree, one region compared"
ONE_TARGET = 1.25  # against the plain run (issue 55)
GROWTH_TARGET = 1.10  # the last 20 regions against the first 20 (regions 2-21), by JUnit times
FIRST = 20  # regions in each end of the growth rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, nargs="*", default=[20, 100])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--base-at", type=int, nargs="*", default=[20], help="N with a --base HEAD row too"
    )
    parser.add_argument("--no-base", action="store_true", help="leave out the --base HEAD rows")
    parser.add_argument(
        "--growth",
        type=int,
        nargs="*",
        default=[100, 500],
        help="N for the growth rows: first 20 regions against the last 20, worker memory",
    )
    args = parser.parse_args(argv)
    compileall.compile_dir(ROOT / "gate", quiet=1)
    env = gate_env()
    base_at = set() if args.no_base else set(args.base_at)
    rows = []
    load_before = load_average()
    with tempfile.TemporaryDirectory() as scratch:
        for n in args.regions:
            rows += _ratio_rows(Path(scratch), n, n in base_at, args.rounds, env)
        growth = [_growth_row(Path(scratch), n, env) for n in args.growth]
    print("| N regions | gate s | floor s | ratio | gate CPU s | floor CPU s | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    for case, g, f in rows:
        print(
            f"| {case} | {g[0]:.1f} | {f[0]:.1f} | {g[0] / f[0]:.2f}x "
            f"| {g[1]:.1f} | {f[1]:.1f} | {g[1] / f[1]:.2f}x |"
        )
    if growth:
        print(
            f"\n| N regions | gate: first {FIRST} | last {FIRST} | growth | floor: first {FIRST} "
            f"| last {FIRST} | growth | worker RSS at 1/4, 1/2, 3/4, end of its life |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for row in growth:
            print(row.markdown())
    print(f"\nload average: {load_before} before, {load_average()} after")
    print("\ntargets (issues 40, 53 and 55):")
    one_tree = {case: f for case, _, f in rows if "--base" not in case}
    same_rounds = {case.split(",")[0]: f for case, _, f in rows if "its rounds" in case}
    for case, g, f in rows:
        n = case.split(",")[0]
        if ONE_FLOOR in case and n == "20":
            # The least a process per tree adds for the one region, by hand.
            ratio = g[0] / f[0]
            print(f"    (the floor with a process per tree, the same: {ratio:.2f}x its floor)")
        elif ONE in case and n == "20":
            label = f"run --base at {n} regions, one compared, against the plain run"
            print(_target(label, g[0] / f[0], ONE_TARGET))
        elif PINNED in case and n == "20":
            label = "the floor with a process per tree, pinned as the gate pins"
            print(f"    (run --base at {n} regions, against {label}: {g[0] / f[0]:.2f}x)")
        elif PROCESSES in case and n == "20":
            # What a process per tree costs by itself, apart from the gate's own work.
            floors = f[0] / same_rounds[n][0]
            print(
                f"    (the floor with a process per tree: {floors:.2f}x the one-process "
                "two-tree floor at the gate's rounds)"
            )
            label = "the floor with a process per tree at the gate's rounds"
            print(
                _target(
                    f"run --base at {n} regions, against {label}", g[0] / f[0], BOTH_TREES_TARGET
                )
            )
        elif "its rounds" in case and n == "20":
            # The same target, what the gate adds to the work its verdicts took.
            label = "the two-tree floor at the gate's rounds"
            print(
                _target(
                    f"run --base at {n} regions, against {label}", g[0] / f[0], BOTH_TREES_TARGET
                )
            )
        elif "--base" in case and n == "20":
            ratio = g[0] / one_tree[n][0]
            print(
                _target(
                    f"run --base at {n} regions, against the one-tree floor", ratio, BASE_TARGET
                )
            )
            # What bounds it: the same runs and rounds for two trees, by hand, against one.
            floors = f[0] / one_tree[n][0]
            print(f"    (the two-tree floor itself: {floors:.2f}x the one-tree floor)")
            label = "the two-tree floor"
            print(
                _target(
                    f"run --base at {n} regions, against {label}", g[0] / f[0], BOTH_TREES_TARGET
                )
            )
        elif "--base" not in case and n in ("20", "100"):
            print(_target(f"plain run at {n} regions", g[0] / f[0], PLAIN_TARGET))
    for row in growth:
        print(_target(f"last {FIRST} / first {FIRST} at {row.n} regions", row.gate, GROWTH_TARGET))


def _target(what: str, ratio: float, most: float) -> str:
    return f"  {what}: {ratio:.2f}x (target <= {most:.2f}x): {'met' if ratio <= most else 'MISSED'}"


def _ratio_rows(
    scratch: Path, n: int, with_base: bool, rounds: int, env: dict[str, str]
) -> list[tuple[str, tuple[float, float], tuple[float, float]]]:
    """The rows of the first table for N regions: the gate (and --base) against its floor."""
    repo = scratch / f"repo{n}"
    build(repo, n)
    # Reports outside the repository: the head is the working tree, kept as committed.
    gate = [sys.executable, "-m", "gate", "run", "--junit", str(scratch / "r.xml")]
    # Each case: its command, where it runs, and the file its run's rounds are kept in.
    cases: dict[str, tuple[list[str], Path, Path | None]] = {f"{n}": (gate, repo, None)}
    # The base tree of the two-tree floors: a copy beside the repository, as the
    # gate's base is a worktree beside it (its module file under its own folder).
    base_copy = scratch / f"base{n}"
    shutil.copytree(repo, base_copy, ignore=shutil.ignore_patterns(".git"))
    base_steps = base_copy / "bench_steps.py"
    floors: dict[str, tuple[list[str], Path]] = {"floor": ([sys.executable, "floor.py"], repo)}
    if with_base:
        kept = scratch / GATE_ROUNDS
        based = [*gate, "--base", "HEAD", "--json", str(scratch / "r.json")]
        cases[f"{n}, --base HEAD"] = (based, repo, kept)
        both = [sys.executable, "floor_both.py", str(base_steps)]
        floors["floor, two trees"] = (both, repo)
        # The same, with the rounds the gate's last run took (region by region): the work of
        # the gate's verdicts, so that the ratio is the gate's own cost, not the rounds'.
        floors[SAME_ROUNDS] = ([*both, str(kept)], repo)
        floors[PROCESSES] = (processes_command(base_steps, kept, env), repo)
        if paired(env):  # where the trees run apart, neither pins
            floors[PINNED] = (processes_command(base_steps, kept, env, pinned=True), repo)
        # Issue 55's case: the change reaches one region of N, the rest run once.
        one = scratch / f"repo{n}-one"
        build(one, n, compared=1)
        kept_one = scratch / f"one-{GATE_ROUNDS}"
        cases[f"{n}, {ONE}"] = (based, one, kept_one)
        floors[ONE_FLOOR] = (processes_command(base_steps, kept_one, env), one)
    seconds: dict[str, list[tuple[float, float]]] = {c: [] for c in [*cases, *floors]}
    for _ in range(rounds):
        for case, (command, where, keep) in cases.items():
            # Exit 1 against the base: noise called the unchanged step slower (a false
            # alarm, counted by base_load.py); the run's time is still the run's time.
            ok = (0, 1) if keep is not None else (0,)
            seconds[case].append(timed(command, where, env, ok))
            if keep is not None:
                _keep_rounds(scratch / "r.json", keep)
        for name, (command, where) in floors.items():
            seconds[name].append(timed(command, where, env))
    rows = []
    for case, (_, _, keep) in cases.items():
        g = medians(seconds[case])
        if keep is None:
            f = medians(seconds["floor"])
            rows.append((case, g, f))
        elif ONE in case:
            # Against the plain run, as issue 55 states it; then the floors' own ratio.
            f = medians(seconds[f"{n}"])
            rows.append((case, g, f))
            one_floor = medians(seconds[ONE_FLOOR])
            rows.append((f"{n}, {ONE_FLOOR} / the floor", one_floor, medians(seconds["floor"])))
        else:
            f = medians(seconds["floor, two trees"])
            rows.append((case, g, f))
            rows.append((f"{case}, the floor at its rounds", g, medians(seconds[SAME_ROUNDS])))
            rows.append((f"{case}, {PROCESSES}", g, medians(seconds[PROCESSES])))
            if PINNED in seconds:
                rows.append((f"{case}, {PINNED}", g, medians(seconds[PINNED])))
        print(
            f"N={case}: gate {g[0]:.1f} s ({g[1]:.1f} s CPU), "
            f"floor {f[0]:.1f} s ({f[1]:.1f} s CPU)",
            file=sys.stderr,
            flush=True,
        )
    return rows


def _keep_rounds(report: Path, to: Path) -> None:
    """The paired rounds each region of a ``run --base`` took (its JSON ``report``), in order,
    written to ``to`` for the floors: 0 for a region the base did not run (unchanged), at
    least 1 for one it did, paired rounds or not (a TPU's trees apart take none)."""
    regions = json.loads(report.read_text())["suites"][0]["regions"]
    taken = [
        max(1, (base.get("timing") or {}).get("rounds") or 0)
        if (base := r.get("base") or {}).get("status") == "compared"
        else 0
        for r in regions
    ]
    to.write_text(json.dumps(taken))


@dataclass(frozen=True)
class Growth:
    """What a region costs at the start of a run and at its end, and the worker's memory."""

    n: int
    gate_first_s: float
    gate_last_s: float
    floor_first_s: float
    floor_last_s: float
    rss_mb: tuple[float, ...]  # the worker's, at 1/4, 1/2, 3/4 and the end of its life

    @property
    def gate(self) -> float:
        return self.gate_last_s / self.gate_first_s

    @property
    def floor(self) -> float:
        return self.floor_last_s / self.floor_first_s

    def markdown(self) -> str:
        rss = ", ".join(f"{mb:.0f}" for mb in self.rss_mb)
        return (
            f"| {self.n} | {self.gate_first_s * 1e3:.0f} ms | {self.gate_last_s * 1e3:.0f} ms "
            f"| {self.gate:.2f}x | {self.floor_first_s * 1e3:.0f} ms "
            f"| {self.floor_last_s * 1e3:.0f} ms | {self.floor:.2f}x | {rss} MB |"
        )


def _growth_row(scratch: Path, n: int, env: dict[str, str]) -> Growth:
    """One plain run of N regions, and the floor's: each region's seconds (the gate's by its
    JUnit times, the floor's as it measured them), first 20 (after the first, which starts
    everything) against the last 20; the worker's resident memory as it went."""
    repo = scratch / f"growth{n}"
    build(repo, n)
    junit = scratch / f"growth{n}.xml"
    with _worker_memory(repo) as memory:
        timed([sys.executable, "-m", "gate", "run", "--junit", str(junit)], repo, env)
    per_region: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "")
        per_region[name] = max(per_region.get(name, 0.0), float(case.get("time", "0")))
    gate = [per_region[f"bench.step_{i}"] for i in range(n)]
    floor_times = scratch / f"floor{n}.json"
    timed([sys.executable, "floor.py", str(floor_times)], repo, env)
    floor = region_seconds(json.loads(floor_times.read_text()))
    life = memory or [0.0]
    quarters = [life[min(len(life) - 1, len(life) * k // 4)] for k in (1, 2, 3, 4)]
    growth = Growth(n, *_ends(gate), *_ends(floor), rss_mb=tuple(kb / 1024 for kb in quarters))
    print(
        f"N={n} growth: gate {growth.gate:.2f}x, floor {growth.floor:.2f}x",
        file=sys.stderr,
        flush=True,
    )
    return growth


def _ends(seconds: list[float]) -> tuple[float, float]:
    """The mean of regions 2-21 and of the last 20."""
    if len(seconds) < 2 * FIRST + 1:
        raise SystemExit(f"--growth needs at least {2 * FIRST + 1} regions")
    return statistics.mean(seconds[1 : FIRST + 1]), statistics.mean(seconds[-FIRST:])


@contextlib.contextmanager
def _worker_memory(repo: Path) -> Iterator[list[float]]:
    """The resident memory (kB) of the gate's worker running in ``repo``, sampled every 0.2 s
    while the block runs (a thread reading /proc)."""
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            for pid in _workers_in(repo):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmRSS:"):
                        samples.append(float(line.split()[1]))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(5)


def _workers_in(repo: Path) -> list[int]:
    """The gate's worker processes whose working directory is ``repo``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            if b"gate.isolation.worker" in command and (entry / "cwd").resolve() == repo.resolve():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
