"""What reading a step's collectives and donations costs: ms per region, side by side.

    .venv/bin/python -m benchmarks comm_overhead [--runs N]

On 8 CPU devices (set here, before jax is imported, unless ``JAX_PLATFORMS`` names another
platform: ``JAX_PLATFORMS=tpu`` on a TPU), for a data-parallel, an FSDP, a tensor-parallel and
a shard_map step where there are 8 devices, and the shipped one-device MLP step:

- the cost run as the gate makes it (`measure_step`: the step once through Python's dispatch,
  its programs' cost and memory analysis, and reading their text);
- the same cost run with the programs' text left unread, alternating with the first, so load
  on the machine hits both alike;
- reading the text alone (`read_programs`: HLO text, parse, inventory, donations): what the
  inventory adds to each region, once, after its timed runs.

Each region reads its programs once per run (the cost run is one step), so the figure is per
region, not per step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.processes import ROOT

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import gate.witness.costs
from examples.mlp import make_inputs, train_step
from gate.jaxhooks.executables import every_execution_seen
from gate.results.collectives import Communication
from gate.user_code import UserCode
from gate.witness.costs import measure_step
from gate.witness.programs import read_programs

try:
    from jax import shard_map
except ImportError:  # jax 0.10
    from jax.experimental.shard_map import shard_map  # type: ignore[no-redef]

USER = UserCode(ROOT)
# The cost run's module, whose own name for `read_programs` a scenario replaces for a while.
costs: Any = gate.witness.costs


def put(x: jax.Array, mesh: Any, spec: P) -> jax.Array:
    placed: jax.Array = jax.device_put(x, NamedSharding(mesh, spec))
    return placed


def loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


@jax.jit
def sharded_step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> Any:
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def inputs(mesh: Any, w1: P, w2: P) -> Callable[[], tuple[Any, ...]]:
    def make() -> tuple[Any, ...]:
        params = {
            "w1": put(jnp.ones((512, 1024)), mesh, w1),
            "w2": put(jnp.ones((1024, 64)), mesh, w2),
        }
        return (
            params,
            put(jnp.ones((256, 512)), mesh, P("data")),
            put(jnp.ones((256, 64)), mesh, P("data")),
        )

    return make


def _twice(x: jax.Array) -> jax.Array:
    summed: jax.Array = jax.lax.psum(jax.lax.psum(x.sum(0), "data"), "data")
    return summed


Steps = dict[str, tuple[Callable[[], tuple[Any, ...]], Callable[..., Any]]]


def steps() -> Steps:
    """The steps this machine has the devices for: the sharded ones need 8."""
    found: Steps = {}
    if jax.device_count() >= 8:
        mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
        mesh2 = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        double_psum = jax.jit(shard_map(_twice, mesh=mesh, in_specs=P("data"), out_specs=P()))
        found["data parallel (8 devices)"] = (inputs(mesh, P(), P()), sharded_step)
        found["FSDP (8 devices)"] = (inputs(mesh, P("data"), P("data")), sharded_step)
        found["tensor parallel (4x2)"] = (
            inputs(mesh2, P(None, "model"), P("model", None)),
            sharded_step,
        )
        found["shard_map, two psums"] = (
            lambda: (put(jnp.ones((256, 64)), mesh, P("data")),),
            double_psum,
        )
    found["shipped MLP (1 device)"] = (make_inputs, train_step)
    return found


def median_ms(samples: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"{median * 1e3:7.2f} ms (p25 {q1 * 1e3:.2f}, p75 {q3 * 1e3:.2f})"


def unread(
    executed: Any, user: Any, warned: Any = (), modules: Any = None
) -> tuple[Communication, tuple[()]]:
    return Communication(), ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args(argv).runs
    platform = jax.devices()[0].platform
    print(f"jax {jax.__version__}, {jax.device_count()} {platform} devices, os.getloadavg() "
          f"{os.getloadavg()[0]:.2f} at start")  # fmt: skip
    for name, (setup, step) in steps().items():

        def call(args: tuple[Any, ...], step: Callable[..., Any] = step) -> Any:
            return jax.block_until_ready(step(*args))

        call(setup())  # compiled, warm: as after a region's timed runs
        with_reading: list[float] = []
        without: list[float] = []
        reading: list[float] = []
        for _ in range(runs):
            start = time.perf_counter()
            measure_step(setup, call, user=USER)
            with_reading.append(time.perf_counter() - start)
            costs.read_programs = unread
            try:
                start = time.perf_counter()
                measure_step(setup, call, user=USER)
                without.append(time.perf_counter() - start)
            finally:
                costs.read_programs = read_programs
            args = setup()
            with every_execution_seen() as log:
                call(args)
            executed = log.executed()
            start = time.perf_counter()
            comm, _ = read_programs(executed, USER)
            reading.append(time.perf_counter() - start)
        collectives = len(comm.collectives)
        print(f"\n{name}: {collectives} collectives, {comm.headline() or 'no communication'}")
        print(f"  cost run, as the gate makes it   {median_ms(with_reading)}")
        print(f"  cost run, text left unread       {median_ms(without)}")
        print(f"  reading the text alone           {median_ms(reading)}")
    print(f"\nos.getloadavg() {os.getloadavg()[0]:.2f} at the end")
