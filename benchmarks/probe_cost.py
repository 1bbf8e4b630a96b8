"""What the transfer map's capture probe costs, part by part (`transfer_map.capture_works`).

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/probe_cost.py [--runs 200]
    (on a TPU: `bash benchmarks/tpu_check.sh probe`)

In one process, as a worker runs it (the environment prepared before JAX starts), each part
timed alone, medians over ``--runs`` (after 5 unmeasured): the whole probe; the map's block
with nothing in it; the guard's logging level entered and left; the probe's transfer
(``jnp.asarray`` of a NumPy scalar) alone, under the guard, and waited for; what a new log
file for a block costs (made, opened, unlinked, closed: each block did that before it kept
one, `transfer_map._LogFiles`), and ``jax.device_count()``; a zero-size
transfer; and the probe's transfer to the CPU device (where the default device is not one).
On the TPU v5e the probe cost ~5 ms a region (docs/performance.md): this says which part.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _median_ms(part: Callable[[], object], runs: int) -> float:
    for _ in range(5):
        part()
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        part()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    from gate.isolation.environment import prepare_environment

    prepare_environment(os.environ)
    import jax
    import numpy as np

    from gate.jaxhooks.guard import guarded
    from gate.jaxhooks.programs import made_at_startup
    from gate.levels import GuardLevel, GuardSpec
    from gate.package import PACKAGE_DIR
    from gate.user_code import UserCode
    from gate.witness.transfer_map import capture_works, mapped

    made_at_startup()  # as a worker does, before anything is traced
    log = GuardSpec.uniform(GuardLevel.LOG)
    probe = UserCode(repo_root=Path(PACKAGE_DIR).resolve())
    scalar = np.float32(1)
    empty = np.zeros((0,), np.float32)

    def under(
        block: Callable[[], AbstractContextManager[object]], body: Callable[[], object]
    ) -> Callable[[], None]:
        def part() -> None:
            with block():
                body()

        return part

    def nothing() -> None:
        return None

    def transfer() -> object:
        return jax.numpy.asarray(scalar)

    def logged(body: Callable[[], object]) -> Callable[[], None]:
        """``body`` under the guard's `log` level, in the map's block (its lines read there)."""
        return under(lambda: mapped(probe), under(lambda: guarded(log), body))

    parts: dict[str, Callable[[], object]] = {
        "capture_works()": capture_works,
        "the map's block, empty": under(lambda: mapped(probe), nothing),
        "the guard at `log`, entered and left": under(lambda: guarded(log), nothing),
        "a new log file made, opened and let go (each block did, before it kept one)": _new_file,
        "jax.device_count()": jax.device_count,
        "jnp.asarray(np.float32(1)), unguarded": transfer,
        "the same, waited for": lambda: jax.block_until_ready(transfer()),
        "the same under `log`, in the map's block": logged(transfer),
        "a zero-size transfer, likewise": logged(lambda: jax.numpy.asarray(empty)),
    }
    if jax.default_backend() != "cpu":
        cpu = jax.devices("cpu")[0]
        parts["the probe's transfer to the CPU device, likewise"] = logged(
            lambda: _on(cpu, transfer)
        )
    print(f"{jax.default_backend()}, jax {jax.__version__}, medians of {runs} runs:\n")
    print("| part | ms |\n|---|---|")
    for name, part in parts.items():
        print(f"| {name} | {_median_ms(part, runs):.3f} |", flush=True)


def _new_file() -> None:
    import tempfile

    handle, path = tempfile.mkstemp(prefix="transfer-gate-", suffix=".log")
    os.close(handle)
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    reader = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    os.unlink(path)
    os.close(writer)
    reader.close()


def _on(device: object, body: Callable[[], object]) -> object:
    import jax

    with jax.default_device(device):
        return body()


if __name__ == "__main__":
    main()
