"""What the cost run adds to a run of the step, part by part (`witness.costs.measure_step_ops`).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/cost_run_parts.py [--steps 30]
    (on a TPU: `bash benchmarks/tpu_check.sh costrun`)

The first of a region's warm-up runs is its cost run (`gate.region.cost_phase`): it sees
every program the step runs and reads what they cost. On the TPU v5e that warm-up stage cost
~7 ms a region more than the floor's (docs/performance.md); this says which part. In one
process, as a worker runs it (the environment prepared before JAX starts, the gate's jit
context made), for each of ``--steps`` distinct small steps of gate_vs_floor.py, after their
first call and one warm-up run, setup's inputs made and waited for before each clock starts:

- the step's run, plain;
- the same run as the cost run (`measure_step_ops`, all of it; even steps only);
- on odd steps, before either, that run with every execution seen and nothing read (Python's
  dispatch path) and, on the programs it saw, each part of the reading alone, while nothing
  has read them yet (jaxlib keeps some answers): the devices' memory marks (read twice a
  cost run), naming the user's line (each execution does), the programs' text, parsing it,
  XLA's cost and memory analyses, the cost by function (the analyses again), the collectives
  and donations, the ops by line and their table.

Prints the medians in milliseconds. What the parts leave of the whole is the rest of
`measure_step_ops`: naming the user's line of each execution, and the cost's own records.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def _ms(part: Callable[..., object], *args: Any) -> float:
    started = time.perf_counter()
    part(*args)
    return (time.perf_counter() - started) * 1e3


def _parts_of_one(
    step: Any, make_inputs: Callable[[], Any], user: Any, odd: bool
) -> dict[str, float]:
    """One step's milliseconds: its run plain and as the cost run; on ``odd`` steps, first,
    each part of the cost run's reading alone, while nothing has read the programs yet
    (jaxlib keeps some answers), and the whole cost run then left out of the medians."""
    import jax

    from gate.region.outputs import call_step
    from gate.witness.costs import measure_step_ops

    def settled() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return jax.block_until_ready(make_inputs()), {}

    def run(inputs: Any) -> object:
        return call_step(step, inputs)

    for _ in range(2):  # the first call, and one warm-up run
        run(settled())
    spent: dict[str, float] = {}
    if odd:
        spent.update(_reading(run, settled(), user))
    spent["the step's run, plain"] = _ms(run, settled())
    inputs = settled()  # made before the clock starts, as for the plain run
    whole = _ms(measure_step_ops, lambda: inputs, run)
    if not odd:
        spent["the same run as the cost run (all of it)"] = whole
    return spent


def _reading(run: Callable[[Any], object], inputs: Any, user: Any) -> dict[str, float]:
    """Each part of the cost run's reading, timed alone on the programs one seen run ran."""
    import jax

    from gate.jaxhooks.executables import (
        cost_analysis,
        every_execution_seen,
        memory_analysis,
        program_texts,
    )
    from gate.witness.costs import _caller, function_costs, memory_marks
    from gate.witness.hlo_text import parse_module
    from gate.witness.line_work import line_table, program_ops_of
    from gate.witness.programs import parsed_programs, read_programs

    spent: dict[str, float] = {}
    started = time.perf_counter()
    with every_execution_seen(lambda: None) as log:
        run(inputs)
    spent["the run with every execution seen, nothing read"] = (time.perf_counter() - started) * 1e3
    executed = log.executed()
    spent["naming the user's line, once (each execution does)"] = _ms(_caller, user)
    spent["memory marks of the devices, once"] = _ms(memory_marks, jax.local_devices())
    started = time.perf_counter()
    texts = [program_texts(one.executable) for one in executed]
    spent["the programs' text"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    for each in texts:
        for text in each if not isinstance(each, str) else ():
            parse_module(text)
    spent["parsing it"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    for one in executed:
        cost_analysis(one.executable)
    spent["XLA's cost analysis"] = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    for one in executed:
        memory_analysis(one.executable)
    spent["XLA's memory analysis"] = (time.perf_counter() - started) * 1e3
    spent["the cost by function (both analyses again)"] = _ms(function_costs, executed)
    modules = parsed_programs(executed)
    spent["collectives and donations"] = _ms(read_programs, executed, user, (), modules)
    if not isinstance(modules, str):
        started = time.perf_counter()
        line_table(program_ops_of(modules, user), user)
        spent["ops by line, and their table"] = (time.perf_counter() - started) * 1e3
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    steps = parser.parse_args().steps
    from gate_vs_floor import steps_in_a_worker

    folder = steps_in_a_worker(steps, "cost-run-parts-")
    import bench_steps  # type: ignore[import-not-found]
    import jax

    from gate.user_code import UserCode

    user = UserCode(repo_root=folder)
    spent: dict[str, list[float]] = {}
    for index in range(steps):
        step = getattr(bench_steps, f"step_{index}")
        one = _parts_of_one(step, bench_steps.make_inputs, user, odd=index % 2 == 1)
        for name, ms in one.items():
            spent.setdefault(name, []).append(ms)
    print(f"{jax.default_backend()}, jax {jax.__version__}, medians over {steps} steps:\n")
    print("| part | ms |\n|---|---|")
    for name, values in spent.items():
        print(f"| {name} | {statistics.median(values):.3f} |")


if __name__ == "__main__":
    main()
