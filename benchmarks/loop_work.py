"""A loop's work counted by its trip count: the same loop rolled and unrolled read the same (57).

XLA's cost analysis counts a while loop's body once, whatever its trip count; the gate adds the
other runs from its own count of each op (`gate.witness.costs`). That is right only where the
platform's cost analysis leaves them out: on the CPU it does; on a TPU or a GPU, if XLA already
counted the trip count, the gate would count the loop's work twice. This checks the platform:
one module with the step written twice, ``lax.fori_loop`` of ``--trips`` matmuls rolled and
unrolled, run as two regions by a plain ``run --json``, against XLA's own figures for the two
programs (read in a process of their own first: on a TPU one process holds the chip at a time)
and the count by hand.

    python -m benchmarks loop_work [--size 512] [--trips 8]

Exits 1 when the gate's rolled and unrolled flops differ by more than 5%.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.processes import gate_env, gate_regions, run_grouped

MODULE = """import jax
import jax.numpy as jnp
from jax import lax

TRIPS = {trips}


def body(i, h):
    return jnp.tanh(h @ h)


@jax.jit
def rolled(x):
    return lax.fori_loop(0, TRIPS, body, x)


@jax.jit
def unrolled(x):
    return lax.fori_loop(0, TRIPS, body, x, unroll=True)


def make():
    return (jnp.full(({n}, {n}), 1e-3, jnp.float32),)
"""
POLICY = """version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 2, timing: off}
regions:
  - {name: rolled, step: "loops:rolled", setup: "loops:make"}
  - {name: unrolled, step: "loops:unrolled", setup: "loops:make"}
"""
XLA = """import json, loops
out = {}
for name in ("rolled", "unrolled"):
    compiled = getattr(loops, name).lower(*loops.make()).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    out[name] = float(cost.get("flops", 0.0))
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--trips", type=int, default=8)
    options = parser.parse_args(argv)
    n, trips = options.size, options.trips
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch)
        (repo / "policies").mkdir()
        (repo / "policies" / "p.yaml").write_text(POLICY)
        (repo / "loops.py").write_text(MODULE.format(n=n, trips=trips))
        env = gate_env()
        env["PYTHONPATH"] = f"{repo}:{env['PYTHONPATH']}"
        raw = run_grouped([sys.executable, "-c", XLA], repo, env, 600)
        if raw.returncode != 0:
            raise SystemExit(f"reading XLA's figures failed:\n{raw.stderr[-3000:]}")
        xla = json.loads(raw.stdout.strip().splitlines()[-1])
        regions = gate_regions(repo)
    gate = {r["name"]: r["cost"]["totals"]["flops"] for r in regions}
    notes = {r["name"]: r["cost"]["note"] for r in regions}
    machine = regions[0].get("machine") or {}
    print(f"platform: {machine.get('accelerator')}, jax {machine.get('jax')}")
    print(f"by hand: {trips} x 2*{n}^3 = {trips * 2 * n**3:.4g} flops (+ the tanh)")
    print("| program | XLA's cost analysis | the gate | note |")
    print("|---|---|---|---|")
    for name in ("rolled", "unrolled"):
        print(f"| {name} | {xla[name]:.4g} | {gate[name]:.4g} | {notes[name] or '-'} |")
    ratio = gate["rolled"] / gate["unrolled"]
    print(f"the gate's rolled / unrolled flops: {ratio:.3f}")
    print(f"XLA's rolled / unrolled flops: {xla['rolled'] / xla['unrolled']:.3f}")
    if abs(ratio - 1) > 0.05:
        print("MISSED: the rolled loop's work is not its unrolled work")
        raise SystemExit(1)
    print("ok: rolled and unrolled read the same work")


if __name__ == "__main__":
    main()
