"""What tracing a step costs under a region's own jit context (`gate.jaxhooks.programs`).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/trace_context.py [--rounds 8]

In one process, as a worker runs it (the environment prepared before JAX starts), times
``jit(step).trace(*inputs)`` of three steps, each time a function JAX has not seen, as each
region's is: gate_vs_floor.py's small MLP step and realistic_steps.py's flax CNN and
transformer (their models and optimisers made once at import, as a suite makes them). Three
ways, alternating so that load drifts hit all alike:

- no context: what a script without the gate pays (JAX's own functions traced before);
- a region's context, as shipped: JAX's own nested functions traced once per worker, and
  JAX's transforms of their traces (linearizing, transposing, output shapes) too;
- a region's context without the second: the transforms made again in every region, as
  before 2026-12-06.

Prints the medians over ``--rounds`` (after one unmeasured round), in ms.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

WAYS = ("no context", "a region's context", "without shared transforms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    rounds = parser.parse_args().rounds
    from gate.isolation.environment import prepare_environment

    prepare_environment(os.environ)
    import jax
    from gate_vs_floor import STEPS
    from realistic_steps import MODELS

    from gate.jaxhooks import programs
    from gate.jaxhooks.programs import RegionPrograms

    folder = Path(tempfile.mkdtemp())
    (folder / "bench_steps.py").write_text(STEPS.replace("N_REGIONS", "0"))
    (folder / "models.py").write_text(MODELS)
    sys.path.insert(0, str(folder))
    import bench_steps
    import models

    made = iter(range(10**6))

    def small() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return bench_steps._make_step(next(made)), bench_steps.make_inputs()

    steps: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
        "gate_vs_floor.py's small step": small,
        "flax CNN": lambda: (_new(models.cnn_step), models.cnn_inputs()),
        "flax transformer": lambda: (_new(models.lm_step), models.lm_inputs()),
    }
    shared = programs._transforms_shared.active

    @contextlib.contextmanager
    def way(name: str) -> Iterator[None]:
        if name == WAYS[0]:
            yield
            return
        if name == WAYS[2]:
            programs._transforms_shared.active = lambda _: contextlib.nullcontext()
        try:
            with RegionPrograms().entered():
                yield
        finally:
            programs._transforms_shared.active = shared

    spent: dict[tuple[str, str], list[float]] = {}
    for turn in range(rounds + 1):
        for label, make in steps.items():
            order = WAYS if turn % 2 else WAYS[::-1]
            for name in order:
                step, inputs = make()
                jax.block_until_ready(inputs)
                with way(name):
                    started = time.perf_counter()
                    step.trace(*inputs)
                    took = time.perf_counter() - started
                if turn:
                    spent.setdefault((label, name), []).append(took * 1e3)
    print(f"jax {jax.__version__}, Python {sys.version.split()[0]}, medians of {rounds}, ms:\n")
    print("| step | " + " | ".join(WAYS) + " |\n|---|---|---|---|")
    for label in steps:
        row = [f"{statistics.median(spent[(label, name)]):.1f}" for name in WAYS]
        print(f"| {label} | " + " | ".join(row) + " |")


def _new(step: Any) -> Any:
    """``step`` as a function JAX has never seen (a region's module is imported anew)."""
    import jax

    function = step.__wrapped__

    def fresh(*args: Any) -> Any:
        return function(*args)

    return jax.jit(fresh)


if __name__ == "__main__":
    main()
