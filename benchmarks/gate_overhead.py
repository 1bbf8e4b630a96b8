"""What watching a step costs: the shipped MLP step, plain and under the gate's map.

    .venv/bin/python -m benchmarks gate_overhead [--runs N] [--live-rounds N]

Prints medians (and the interquartile range) of:
- the plain step (what the timed runs measure);
- the step under the transfer map (guard at log_explicit, fd 2 captured, the
  user's code traced, the device-to-host detector on): what each mapped run costs;
- entering and leaving the guard alone;
- a whole `transfer-gate run` of the shipped policies, wall time, in a subprocess;
- what the live output costs (`gate/report/live.py`): whole runs with stderr on a
  pseudo-terminal (the running line redrawn, every row, colour) against ``-q`` with stderr
  to a pipe, alternating, ``--live-rounds`` each; and one stage message a worker sends
  (encode and write to a pipe), of which each region sends about eight.

The map is paid on 1 + guarded_runs runs per region, never on the timed runs.
Runs on whatever backend JAX picks (JAX_PLATFORMS=cpu for CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from benchmarks.processes import ROOT
from benchmarks.worker import as_a_worker

as_a_worker()  # the environment before JAX starts, the backend, the jit context: a worker's

import jax  # noqa: E402

from examples.mlp import make_inputs, train_step  # noqa: E402
from gate.isolation.protocol import Entered, write_frame  # noqa: E402
from gate.jaxhooks.guard import guarded  # noqa: E402
from gate.levels import GuardLevel, GuardSpec  # noqa: E402
from gate.user_code import UserCode  # noqa: E402
from gate.witness.detector import detect_fetches  # noqa: E402
from gate.witness.transfer_map import mapped  # noqa: E402


def quartiles(samples: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"median {median * 1e3:8.3f} ms  (p25 {q1 * 1e3:.3f}, p75 {q3 * 1e3:.3f})"


def spread(samples: list[float]) -> str:
    """``5.36 s (p25 5.20, p75 5.51)``: whole runs, in seconds."""
    if len(samples) < 2:
        return f"{samples[0]:.2f} s"
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"{median:.2f} s (p25 {q1:.2f}, p75 {q3:.2f})"


def timed(runs: int, body: Callable[[], None]) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        body()
        samples.append(time.perf_counter() - start)
    return samples


def timed_run(argv: list[str], timeout_s: float, *, terminal: bool) -> float:
    """Wall seconds of ``argv`` with its stderr on a pseudo-terminal (``terminal``) or a pipe,
    drained the same way either side, stdout discarded; its process group is killed after."""
    reader, writer = pty.openpty() if terminal else os.pipe()
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=writer,
        start_new_session=True,
    )
    os.close(writer)
    try:
        end = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < end:
            if select.select([reader], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):  # a terminal's other side closed (EIO)
                    os.read(reader, 1 << 16)
        if proc.poll() is None:
            raise SystemExit(f"{' '.join(argv)}: no result in {timeout_s:g} s")
        return time.perf_counter() - start
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        os.close(reader)


def stage_message_cost(runs: int) -> list[float]:
    """One `Entered` frame, encoded and written to a pipe that nothing else fills."""
    read_end, write_end = os.pipe()
    try:
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            write_frame(write_end, Entered(1, "compiling"))
            samples.append(time.perf_counter() - start)
            os.read(read_end, 1 << 16)
        return samples
    finally:
        os.close(read_end)
        os.close(write_end)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--live-rounds", type=int, default=5, choices=range(1, 101), metavar="N")
    args = parser.parse_args(argv)
    code = UserCode(ROOT)
    log_all = GuardSpec.uniform(GuardLevel.LOG_EXPLICIT)

    def plain() -> None:
        inputs = make_inputs()
        start = time.perf_counter()
        jax.block_until_ready(train_step(*inputs))
        plain_samples.append(time.perf_counter() - start)

    def watched() -> None:
        inputs = make_inputs()
        start = time.perf_counter()
        with detect_fetches(code, lambda: None), mapped(code), guarded(log_all):
            jax.block_until_ready(train_step(*inputs))
        watched_samples.append(time.perf_counter() - start)

    def guard_only() -> None:
        with guarded(log_all):
            pass

    plain_samples: list[float] = []
    watched_samples: list[float] = []
    timed(5, plain)  # compile
    plain_samples.clear()
    timed(args.runs, plain)
    timed(args.runs, watched)
    guard = timed(args.runs, guard_only)

    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gate", "run", "--junit", f"{scratch}/report.xml"],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
        whole = time.perf_counter() - start

    live: list[float] = []
    quiet: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        gate = [sys.executable, "-m", "gate", "run", "--junit", f"{scratch}/report.xml"]
        for round_ in range(args.live_rounds):
            # Alternating, each first in turn, so that load drifts hit both alike.
            pair = [(live, [*gate, "--color", "always"], True), (quiet, [*gate, "-q"], False)]
            for samples, command, terminal in pair if round_ % 2 == 0 else pair[::-1]:
                samples.append(timed_run(command, 600, terminal=terminal))
    frames = stage_message_cost(args.runs)

    device = jax.devices()[0]
    print(f"backend: {jax.default_backend()} ({device.device_kind}), jax {jax.__version__}")
    print(f"plain step          {quartiles(plain_samples)}")
    print(f"step under the map  {quartiles(watched_samples)}")
    print(f"guard enter + exit  {quartiles(guard)}")
    print(f"transfer-gate run of policies/ (2 regions): {whole:.2f} s wall")
    on_tty, off = statistics.median(live), statistics.median(quiet)
    print(
        f"live output, {args.live_rounds} runs each: on a terminal {spread(live)}, -q to a pipe "
        f"{spread(quiet)}: ratio {on_tty / off:.3f} (medians)"
    )
    print(f"one stage message   {quartiles(frames)}")
