"""What a run costs before its first worker starts: the gate's own process, from its start.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/parent_start.py [--regions 2] [--rounds 5]

Builds gate_vs_floor.py's repository of N small regions and runs ``transfer-gate run`` of it
``--rounds`` times, each in a process of its own that marks (seconds since this script started
it): the gate's modules imported, the first worker process started (`WorkerProcess`), its
``Ready`` (JAX imported, the backend up), and the run's end. A hand-written script starts JAX
at once; everything before the gate's first worker starts is the gate's alone, and adds to
every run whatever its regions. Prints the medians, and a bare interpreter's start beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gate_vs_floor import build
from grouped import run_grouped

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMEOUT_S = 600


def _child(started: float, repo: Path) -> None:
    """Run the gate on ``repo`` here, marking when each moment came (since ``started``)."""
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.time() - started)

    from gate.isolation import worker_process, worker_start

    mark("gate's process up")
    spawn = worker_process.WorkerProcess.__init__

    def spawning(self: worker_process.WorkerProcess, *args: object, **kwargs: object) -> None:
        mark("first worker started")
        spawn(self, *args, **kwargs)  # type: ignore[arg-type]

    worker_process.WorkerProcess.__init__ = spawning  # type: ignore[method-assign]
    wait = worker_process.WorkerProcess.wait

    def waiting(self: worker_process.WorkerProcess, *args: object, **kwargs: object) -> object:
        event = wait(self, *args, **kwargs)  # type: ignore[arg-type]
        if isinstance(event, worker_start.Ready):
            mark("first worker ready")
        return event

    worker_process.WorkerProcess.wait = waiting  # type: ignore[method-assign]
    from gate.cli.main import main

    mark("gate's modules imported")
    os.chdir(repo)
    code = main(["run", "--junit", str(repo.parent / "r.xml"), "-q"])
    mark("run done")
    if code != 0:
        raise SystemExit(f"the gate exited {code}")
    print(json.dumps(marks))


def _measured(repo: Path) -> dict[str, float]:
    path = [str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(time.time()), str(repo)]
    done = run_grouped(command, repo, env, TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"the gate's run exited {done.returncode}:\n{(done.stdout + (done.stderr or ''))[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _bare() -> float:
    started = time.time()
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    return time.time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("STARTED", "REPO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(float(args.child[0]), Path(args.child[1]))
        return
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


if __name__ == "__main__":
    main()
