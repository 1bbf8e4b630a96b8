"""Where a `run --base` worker's time goes: the regions' phases, and the paired rounds' turns.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/base_turns.py [--regions 20]

Builds gate_vs_floor.py's repository of N distinct small steps, committed, and runs
``python -m gate run --base HEAD`` on it once, with a ``sitecustomize`` first on the workers'
``PYTHONPATH`` that times, inside the worker, what it does for the comparison:

- each region's phases, in both trees (`gate.region.engine.run_region`);
- each look of the paired rounds (`HeldRegions.time`: one request, a round's four turns), and
  inside it: entering and leaving its tree (`running_from`), each turn (`HeldRegion.sample`),
  the step's timed runs themselves, making their inputs (`StepInputs.for_timing`), and moving
  the worker's threads to the round's core (`gate.region.cores.pin`: how often, how many);
- the worker's life, from its interpreter's start to its last look.

Prints those seconds, the turns and looks per region, and what a turn costs around its timed
runs. The whole-run figures are gate_vs_floor.py's (`--base-at`); this says where inside the
worker the comparison's time goes. A machine's own ``sitecustomize``, if any, still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from gate_vs_floor import build, timed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Loaded by every process of the run (the gate's and its workers'); only a worker runs regions
# and looks, so only a worker writes a file. Written to the folder in BASE_TURNS_OUT.
PROBE = '''
import importlib.util, json, os, sys, time

_STARTED = time.perf_counter()
_OUT = os.environ.get("BASE_TURNS_OUT")


def _chain():
    """The next ``sitecustomize`` on sys.path after this one's folder, as if this were absent."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in sys.path:
        if folder and os.path.abspath(folder) != here:
            path = os.path.join(folder, "sitecustomize.py")
            if os.path.isfile(path):
                spec = importlib.util.spec_from_file_location("_machine_sitecustomize", path)
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
                return


def _install():
    import gate.isolation.held_regions as held_regions
    import gate.isolation.worker as worker_process
    import gate.region.cores as cores
    import gate.region.engine as engine
    import gate.region.held as held
    import gate.region.inputs as inputs
    from region_parts import Parts, timed_block, timed_call, wrap_parts

    parts, worker = Parts(), Parts()  # a region's parts; the worker's regions and looks
    wrap_parts(parts)
    worker.counting = True
    # Parts are counted inside a region's phases only, from the second region on (the first
    # starts what a process starts once): the turns' runs call some of the same functions.
    skip = int(os.environ.get("BASE_TURNS_SKIP", "1"))
    moves = {"moves": 0, "threads": 0}
    in_turn = [False]  # inputs made inside a turn, not the regions' own timed runs

    def dump():
        worker.spent["life"] = time.perf_counter() - _STARTED
        with open(os.path.join(_OUT, f"worker-{os.getpid()}.json"), "w") as f:
            json.dump({"s": worker.spent, "n": {**worker.calls, **moves}, "parts": parts.spent}, f)

    def dumped_after(fn, before=lambda: None):
        def and_dump(*args, **kwargs):
            before()
            try:
                return fn(*args, **kwargs)
            finally:
                parts.counting = False
                dump()
        return and_dump

    def count_parts():
        parts.counting = worker.calls["regions"] >= skip

    regions = timed_call(worker, "regions", engine.run_region)
    engine.run_region = dumped_after(regions, count_parts)
    held.HeldRegion.outputs = timed_call(worker, "held outputs", held.HeldRegion.outputs)
    held_regions.HeldRegions.release = timed_call(
        worker, "release", held_regions.HeldRegions.release
    )
    held_regions.HeldRegions.time = dumped_after(
        timed_call(worker, "looks", held_regions.HeldRegions.time)
    )
    entering = timed_block(worker, "tree", held_regions.running_from)
    held_regions.running_from = worker_process.running_from = entering
    original_sample = held.HeldRegion.sample

    def sample(self, runs, cpu=None):
        start = time.perf_counter()
        in_turn[0] = True
        try:
            samples = original_sample(self, runs, cpu)
        finally:
            in_turn[0] = False
        worker.add("turns", time.perf_counter() - start)
        worker.spent["runs"] += sum(samples.step_s)
        return samples

    held.HeldRegion.sample = sample
    original_for_timing = inputs.StepInputs.for_timing

    def for_timing(self):
        start = time.perf_counter()
        try:
            return original_for_timing(self)
        finally:
            if in_turn[0]:
                worker.add("inputs", time.perf_counter() - start)

    inputs.StepInputs.for_timing = for_timing
    original_pin = cores.pin

    def pin(cpu):
        moved = cpu is not None and cpu != cores._pinning.cpu
        start = time.perf_counter()
        original_pin(cpu)
        worker.add("pin", time.perf_counter() - start)
        if moved:
            moves["moves"] += 1
            moves["threads"] = max(moves["threads"], len(cores._threads()))

    cores.pin = pin
    held.pin = pin


_chain()
if _OUT:
    _install()
'''


def _worker(repo: Path, probe: Path, out: Path, base: bool) -> tuple[float, dict[str, Any]]:
    """The run's seconds and its one worker's figures (``--base HEAD`` or a plain run)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    path = [str(probe), str(ROOT), str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    out.mkdir()
    env["BASE_TURNS_OUT"] = str(out)
    env["BASE_TURNS_SKIP"] = "2" if base else "1"  # the first region, in each tree
    command = [sys.executable, "-m", "gate", "run", "--junit", "r.xml"]
    command += ["--base", "HEAD"] if base else []
    wall, _ = timed(command, repo, env)
    found = [json.loads(p.read_text()) for p in sorted(out.glob("worker-*.json"))]
    if len(found) != 1:
        raise SystemExit(f"{len(found)} workers wrote figures, not one: was the probe loaded?")
    return wall, found[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        repo, probe = folder / "repo", folder / "probe"
        build(repo, args.regions)
        probe.mkdir()
        (probe / "sitecustomize.py").write_text(textwrap.dedent(PROBE))
        plain_wall, plain = _worker(repo, probe, folder / "plain", base=False)
        wall, worker = _worker(repo, probe, folder / "base", base=True)
    n = args.regions
    s, c = Counter(worker["s"]), Counter(worker["n"])  # what never ran is not there
    turns = max(c["turns"], 1)
    around = s["turns"] - s["runs"] - s["inputs"] - s["pin"]
    print(f"`run --base HEAD`, {n} regions: {wall:.1f} s; its worker:\n")
    print("| what | s | a region | count |\n|---|---|---|---|")
    rows = [
        ("worker's life, to its last look", s["life"], ""),
        ("regions' phases, both trees", s["regions"], c["regions"]),
        ("  holding a region: its outputs, setup twice", s["held outputs"], ""),
        ("letting go of held regions", s["release"], ""),
        ("looks (a request each)", s["looks"], c["looks"]),
        ("  entering a tree", s["tree (enter)"], ""),
        ("  leaving a tree", s["tree (leave)"], ""),
        ("  turns", s["turns"], c["turns"]),
        ("    the step's timed runs", s["runs"], ""),
        ("    making their inputs", s["inputs"], ""),
        ("    moving threads to the round's core", s["pin"], f"{c['moves']} moves"),
        ("    the rest of a turn", around, ""),
    ]
    for what, seconds, count in rows:
        print(f"| {what} | {seconds:.2f} | {seconds / n * 1e3:.1f} ms | {count} |")
    print(
        f"\n{c['turns'] / n:.1f} turns and {c['looks'] / n:.1f} looks a region; "
        f"a turn {s['turns'] / turns * 1e3:.2f} ms, of which {around / turns * 1e3:.2f} ms "
        f"around its runs, inputs and pinning; up to {c['threads']} threads moved"
    )
    # A region of one tree under --base against a region of a plain run, part by part.
    each = max(c["regions"] - 2, 1)
    plain_each = max(plain["n"]["regions"] - 1, 1)
    print(
        f"\nms a region's phases, the first region left out: a plain run's ({plain_wall:.1f} s "
        f"in all) against one tree's under --base, by part (parts nest), largest differences "
        "first:\n"
    )
    print("| part | plain | --base, a tree | difference |\n|---|---|---|---|")
    names = set(plain["parts"]) | set(worker["parts"])
    diffs = {
        name: (
            plain["parts"].get(name, 0.0) / plain_each * 1e3,
            worker["parts"].get(name, 0.0) / each * 1e3,
        )
        for name in names
    }
    for name, (a, b) in sorted(diffs.items(), key=lambda item: -abs(item[1][1] - item[1][0])):
        print(f"| {name} | {a:.2f} | {b:.2f} | {b - a:+.2f} |")


if __name__ == "__main__":
    main()
