"""Op time by line on this machine's accelerator: its profiler trace, a slower line named.

What its profiler trace holds, and the gate's verdict naming the line whose time grew.

    python3 -m benchmarks op_times_check [--size 2048]

1. In this process (on the default backend, the TPU on a TPU machine): a jitted step with a
   matmul line and an elementwise line, its ops charged to lines (`measure_step_ops`), three
   traced runs read back (`op_times`): the trace's threads, its op events, each line's time.
2. Through the real CLI on a throwaway git repository: ``run --base HEAD`` of a head whose
   matmul line does four times the work; the timing verdict and the lines it lists.

Exits 1 when the trace has no per-op times, or the verdict does not name the matmul line
first; prints everything it read, for docs/performance.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.processes import ROOT, commit_all, gate_env, run_grouped

STEP = """
import jax
import jax.numpy as jnp

SIZE = {size}


@jax.jit
def step(x, w):
    h = x @ w
    h = jnp.tanh(h) * 2.0 + 1.0
    return h.sum()


def batch():
    return (jnp.ones((SIZE, SIZE), jnp.float32), jnp.ones((SIZE, SIZE), jnp.float32))
"""
POLICY = """
version: 1
regions:
  - {name: step, step: "steps:step", setup: "steps:batch", timing: {max_slowdown: 1.05}}
"""


def in_process(size: int) -> bool:
    import jax

    from gate.user_code import UserCode
    from gate.witness.costs import measure_step_ops
    from gate.witness.op_times import TRACE_NAME, op_times

    folder = Path(tempfile.mkdtemp(prefix="op-times-check-"))
    (folder / "steps.py").write_text(STEP.format(size=size))
    sys.path.insert(0, str(folder))
    import steps  # type: ignore[import-not-found]

    user = UserCode(folder)
    jax.block_until_ready(steps.step(*steps.batch()))
    cost, ops = measure_step_ops(steps.batch, lambda a: steps.step(*a), user=user)
    print(f"jax {jax.__version__} on {jax.default_backend()}: {len(ops)} ops")
    for line in cost.lines or ():
        print(f"  work {line.where}: {line.ops_text()}: flops {line.flops:.3g}")
    times = op_times(
        steps.batch,
        lambda a: steps.step(*a),
        ops,
        user,
        platform=jax.default_backend(),
        name="s",
        kept=folder / "traces",
    )
    print(f"  trace: {times.trace}")
    if times.trace is not None:
        with gzip.open(Path(times.trace) / TRACE_NAME, "rt") as stream:
            events = json.load(stream)["traceEvents"]
        names = {
            (e.get("pid"), e.get("tid")): e["args"]["name"]
            for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"
        }
        print(f"  threads: {sorted(set(names.values()))}")
        ops_events = [e for e in events if e.get("ph") == "X" and "hlo_op" in (e.get("args") or {})]
        print(f"  events with args.hlo_op: {len(ops_events)}; first: {ops_events[:2]}")
    print(f"  note: {times.note!r}")
    for spent in times.lines:
        print(f"  time {spent.where}: {spent.seconds * 1e3:.3f} ms a step ({', '.join(spent.ops)})")
    return not times.note and bool(times.lines)


def through_the_cli(size: int) -> bool:
    repo = Path(tempfile.mkdtemp(prefix="op-times-repo-"))
    (repo / "policies").mkdir()
    (repo / "steps.py").write_text(STEP.format(size=size))
    (repo / "policies" / "p.yaml").write_text(POLICY)
    commit_all(repo)
    head = STEP.format(size=size).replace("    h = x @ w\n", "    h = ((x @ w) @ w) @ w @ w\n")
    (repo / "steps.py").write_text(head)
    argv = [sys.executable, "-m", "gate", "run", "--base", "HEAD", "--json", "r.json"]
    done = run_grouped(argv, repo, gate_env(keep_cache=True), 540)
    print(done.stdout[-4000:])
    if done.returncode not in (0, 1):
        print(done.stderr[-4000:])
        return False
    (region,) = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    times = region["cost"]["times"] or {}
    print(f"head trace kept at {times.get('trace')}; note {times.get('note')!r}")
    matmul = head.splitlines().index("    h = ((x @ w) @ w) @ w @ w") + 1
    grown = [line for line in done.stdout.splitlines() if "slower by line:" in line]
    return bool(grown) and f"steps.py:{matmul}:" in grown[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--in-process", action="store_true", help="part 1 only (internal)")
    args = parser.parse_args(argv)
    if args.in_process:
        raise SystemExit(0 if in_process(args.size) else 1)
    # Part 1 in a process of its own: a TPU chip admits one process, and the gate's worker
    # needs it next.
    part = [sys.executable, "-m", "benchmarks", "op_times_check", "--in-process"]
    done = run_grouped([*part, "--size", str(args.size)], ROOT, gate_env(keep_cache=True), 300)
    print(done.stdout + done.stderr)
    traced = done.returncode == 0
    named = through_the_cli(args.size)
    print(f"per-op times in the trace: {traced}; the verdict names the matmul line: {named}")
    raise SystemExit(0 if traced and named else 1)
