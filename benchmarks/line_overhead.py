"""What work by line and op time by line add to a region: ms per region, side by side.

    JAX_PLATFORMS=cpu .venv/bin/python -m benchmarks line_overhead [--runs N]

For the shipped MLP step and the flax CNN and transformer of `benchmarks.regions` (written to
a throwaway folder, so that their lines are a user's), each measured ``--runs`` times,
alternating (A B A B ...) so that load on the machine hits both sides alike:

- the per-line table (`program_ops_of` + `line_table`): every op of the step's optimized
  programs charged to its line, from the text the cost run already parsed; once a region;
- the traced runs as the gate makes them (`op_times`: three runs under JAX's profiler, the
  trace written, read and matched to the lines), against three plain runs of the step, the
  same work without the profiler: what tracing itself adds. Once a region whose time is
  compared, after its timed runs.

Neither is ever inside a timed run; the figures are what a region's wall time grows by.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.processes import ROOT
from benchmarks.regions import MODELS

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

from examples.mlp import make_inputs, train_step
from gate.jaxhooks.executables import every_execution_seen
from gate.user_code import UserCode
from gate.witness.line_work import line_table, program_ops
from gate.witness.op_times import op_times
from gate.witness.programs import parsed_programs

Step = tuple[str, Callable[[], Any], Callable[[Any], Any], UserCode]


def steps(folder: Path) -> list[Step]:
    (folder / "models.py").write_text(MODELS)
    spec = importlib.util.spec_from_file_location("models", folder / "models.py")
    assert spec is not None
    assert spec.loader is not None
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    user = UserCode(folder)
    return [
        ("shipped MLP", make_inputs, lambda a: train_step(*a), UserCode(ROOT)),
        ("flax CNN", models.cnn_inputs, lambda a: models.cnn_step(*a), user),
        ("flax transformer", models.lm_inputs, lambda a: models.lm_step(*a), user),
    ]


def ms(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return f"{statistics.median(samples) * 1e3:.1f} ms (p25-p75 {q[0] * 1e3:.1f}-{q[2] * 1e3:.1f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__}, {jax.default_backend()}, load {os.getloadavg()[0]:.1f}")
    print("| step | ops | lines | line table | traced runs | 3 plain runs | tracing adds |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, call, user in steps(Path(tmp)):
            jax.block_until_ready(call(make()))  # compiled before anything is timed
            inputs = make()  # setup's programs are not the step's, as in the cost run
            with every_execution_seen() as log:
                jax.block_until_ready(call(inputs))
            modules = parsed_programs(log.executed())
            assert not isinstance(modules, str), modules
            table_s, traced_s, plain_s = [], [], []
            ops: tuple[Any, ...] = ()
            for _ in range(args.runs):
                start = time.perf_counter()
                ops = tuple(o for m, p in modules for o in program_ops(m, p.runs, user))
                lines = line_table(ops, user)
                table_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                backend = jax.default_backend()
                times = op_times(make, call, ops, user, platform=backend, name="bench")
                traced_s.append(time.perf_counter() - start)
                if times.note:
                    print(f"{name}: {times.note}")
                start = time.perf_counter()
                for _ in range(times.runs):
                    jax.block_until_ready(call(make()))
                plain_s.append(time.perf_counter() - start)
            adds = [t - p for t, p in zip(traced_s, plain_s, strict=True)]
            print(
                f"| {name} | {len(ops)} | {len(lines)} | {ms(table_s)} | {ms(traced_s)} "
                f"| {ms(plain_s)} | {ms(adds)} |"
            )
    print(f"load at the end {os.getloadavg()[0]:.1f}")
