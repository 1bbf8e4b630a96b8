"""What a run costs before its first worker starts: the gate's own process, from its start.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks parent_start [--regions 2] [--rounds 5]

Builds the scenarios' repository (`benchmarks.regions`) of N small regions and runs ``transfer-
gate run`` of it ``--rounds`` times, each in a process of its own that marks (seconds since
this script started it): what the CLI imports before it starts a worker loaded, the first
worker process started (`gate.isolation.spawn`), its ``Ready`` (JAX imported, the backend up),
and the run's end. A hand-written script starts JAX at once; everything before the gate's first
worker starts is the gate's alone, and adds to every run whatever its regions. Prints the
medians, and a bare interpreter's start beside them.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The child that marks the moments imports only this module and the gate: the regions'
# set-up is imported where the repository is built.
from benchmarks.processes import ROOT, gate_env, run_grouped

TIMEOUT_S = 600


def _child(started: float, repo: Path) -> None:
    """Run the gate on ``repo`` here, marking when each moment came (since ``started``)."""
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.time() - started)

    from gate.isolation import spawn  # what the CLI imports before it starts a worker

    mark("gate's process up")
    start = spawn.spawn

    def spawning(*args: Any, **kwargs: Any) -> spawn.Spawned:
        mark("first worker started")
        return start(*args, **kwargs)

    spawn.spawn = spawning
    sys.meta_path.insert(0, _ReadyWatch(lambda: mark("first worker ready")))
    from gate.cli.main import main

    os.chdir(repo)
    code = main(["run", "--junit", str(repo.parent / "r.xml"), "-q"])
    mark("run done")
    if code != 0:
        raise SystemExit(f"the gate exited {code}")
    print(json.dumps(marks))


class _ReadyWatch(importlib.abc.MetaPathFinder):
    """Calls ``ready`` when a worker's ``Ready`` reaches the gate: `WorkerProcess.wait` wrapped
    as its module loads, which the CLI imports only after it started the first worker."""

    def __init__(self, ready: Callable[[], None]) -> None:
        self.ready = ready

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "gate.isolation.worker_process":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        assert spec is not None
        assert spec.loader is not None
        load, ready = spec.loader.exec_module, self.ready

        def exec_module(module: Any) -> None:
            load(module)
            wait = module.WorkerProcess.wait

            def waiting(self: Any, *args: Any, **kwargs: Any) -> object:
                event = wait(self, *args, **kwargs)
                if type(event).__name__ == "Ready":
                    ready()
                return event

            module.WorkerProcess.wait = waiting

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _measured(repo: Path) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks", "parent_start", "--child"]
    command += [str(time.time()), str(repo)]
    done = run_grouped(command, repo, gate_env(keep_cache=True), TIMEOUT_S)
    if done.returncode != 0:
        said = done.stdout + (done.stderr or "")
        raise SystemExit(f"the gate's run exited {done.returncode}:\n{said[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _bare() -> float:
    started = time.time()
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    return time.time() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("STARTED", "REPO"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(float(args.child[0]), Path(args.child[1]))
        return
    from benchmarks.regions import build

    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        build(repo, args.regions)
        # Byte-compiled first, as an installed gate is: a checkout under
        # PYTHONDONTWRITEBYTECODE would otherwise compile ~190 modules in every process.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "gate")], check=True)
        rounds = [_measured(repo) for _ in range(args.rounds)]
        bare = statistics.median(_bare() for _ in range(args.rounds))
    print(f"seconds since the gate's process was started, medians of {args.rounds} runs:\n")
    print("| moment | s |\n|---|---|")
    print(f"| (a bare interpreter, started and gone) | {bare:.3f} |")
    for moment in rounds[0]:
        print(f"| {moment} | {statistics.median(r[moment] for r in rounds):.3f} |")
