"""The cost run's reading of a program's text, with and without XLA's backend configs.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/program_text_options.py [--steps 10]
    (on a TPU: `bash benchmarks/tpu_check.sh textopts`)

The cost run reads each program the step ran as HLO text (`gate.jaxhooks.executables.
program_texts`: each module's ``to_string()``) and parses it (`gate.witness.hlo_text`). On
the TPU v5e the text alone cost ~2 ms a region and its parse ~1.2 ms (docs/performance.md),
where the CPU's took a fraction of that. XLA prints each instruction's ``backend_config``
too, which no reading of the gate's uses. For ``--steps`` distinct small steps of
gate_vs_floor.py and a larger one (a two-layer attention block and its gradient), after
their first call, in one process, alternating the two ways each time:

- the text as the gate reads it (XLA's default print options), and with
  ``print_backend_config`` off: characters, ms to print (``hlo_modules()`` included, which
  is also timed alone), ms to parse;
- whether the gate's readings of the two texts agree: its ops by line (`program_ops_of`),
  the collectives and the unused donations (`read_programs`).

Prints the medians in milliseconds and the readings that differ (none expected).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

BLOCK = """
import jax
import jax.numpy as jnp


def attention_block(params, x):
    def layer(h, w):
        q, k, v = h @ w["q"], h @ w["k"], h @ w["v"]
        weights = jax.nn.softmax(q @ k.T / jnp.sqrt(q.shape[-1]), axis=-1)
        h = h + (weights @ v) @ w["o"]
        mean = h.mean(-1, keepdims=True)
        h = (h - mean) / jnp.sqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
        return h + jax.nn.gelu(h @ w["up"]) @ w["down"]

    for w in params:
        x = layer(x, w)
    return jnp.mean(x ** 2)


@jax.jit
def block_step(params, x):
    loss, grads = jax.value_and_grad(attention_block)(params, x)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss


def block_inputs():
    keys = jax.random.split(jax.random.PRNGKey(0), 13)
    width = 128
    params = [
        {name: jax.random.normal(keys[6 * i + j], (width, 4 * width if name == "up" else width)
            if name != "down" else (4 * width, width)) * 0.02
         for j, name in enumerate(("q", "k", "v", "o", "up", "down"))}
        for i in range(2)
    ]
    return params, jax.random.normal(keys[12], (64, width))
"""


def _lean_options(module: Any) -> Any:
    """XLA's print options with the backend configs left out (the options' class lives
    beside the module's own, in whichever jaxlib extension this version has it)."""
    options = sys.modules[type(module).__module__].HloPrintOptions()
    options.print_backend_config = False
    return options


def _one(step: Any, inputs: Any, user: Any, spent: dict[str, list[float]]) -> list[str]:
    """One step's figures into ``spent``; the readings of the two texts that differ."""
    import jax

    from gate.jaxhooks.executables import every_execution_seen
    from gate.witness.hlo_text import parse_module
    from gate.witness.line_work import program_ops_of
    from gate.witness.programs import read_programs

    jax.block_until_ready(step(*inputs))  # the first call
    with every_execution_seen(lambda: None) as log:
        jax.block_until_ready(step(*inputs))
    executed = log.executed()
    ways: dict[str, list[Any]] = {"default": [], "lean": []}
    for _ in range(3):
        started = time.perf_counter()
        for program in executed:
            program.executable.hlo_modules()
        spent.setdefault("hlo_modules()", []).append((time.perf_counter() - started) * 1e3)
        for way in ways:
            texts = []
            started = time.perf_counter()
            for program in executed:
                for module in program.executable.hlo_modules():
                    lean = _lean_options(module) if way == "lean" else None
                    texts.append(
                        (module.to_string() if lean is None else module.to_string(lean), program)
                    )
            spent.setdefault(f"print, {way}", []).append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            modules = [(parse_module(text), program) for text, program in texts]
            spent.setdefault(f"parse, {way}", []).append((time.perf_counter() - started) * 1e3)
            spent.setdefault(f"characters, {way}", []).append(sum(len(t) for t, _ in texts))
            ways[way] = modules
    differ = []
    if program_ops_of(ways["default"], user) != program_ops_of(ways["lean"], user):
        differ.append("ops by line")
    if read_programs(executed, user, (), ways["default"]) != read_programs(
        executed, user, (), ways["lean"]
    ):
        differ.append("collectives and donations")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    steps = parser.parse_args().steps
    from gate_vs_floor import steps_in_a_worker

    folder = steps_in_a_worker(steps, "program-text-options-")
    (folder / "bench_block.py").write_text(BLOCK)
    import bench_block  # type: ignore[import-not-found]
    import bench_steps  # type: ignore[import-not-found]
    import jax

    from gate.user_code import UserCode

    user = UserCode(repo_root=folder)
    rows: dict[str, dict[str, list[float]]] = {"small steps": {}, "attention block": {}}
    differ: list[str] = []
    for index in range(steps):
        step = getattr(bench_steps, f"step_{index}")
        found = _one(step, bench_steps.make_inputs(), user, rows["small steps"])
        differ += [f"step_{index}: {what}" for what in found]
    found = _one(bench_block.block_step, bench_block.block_inputs(), user, rows["attention block"])
    differ += [f"attention block: {what}" for what in found]
    print(f"{jax.default_backend()}, jax {jax.__version__}, medians:\n")
    print("| steps | way | characters | print ms | parse ms |\n|---|---|---|---|---|")
    for name, spent in rows.items():
        for way in ("default", "lean"):
            print(
                f"| {name} | {way} | {statistics.median(spent[f'characters, {way}']):.0f} | "
                f"{statistics.median(spent[f'print, {way}']):.3f} | "
                f"{statistics.median(spent[f'parse, {way}']):.3f} |"
            )
    for name, spent in rows.items():
        print(f"\n{name}: hlo_modules() alone {statistics.median(spent['hlo_modules()']):.3f} ms")
    print("\nreadings that differ:", ", ".join(differ) if differ else "none")


if __name__ == "__main__":
    main()
