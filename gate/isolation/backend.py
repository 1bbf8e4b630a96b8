"""How a worker starts JAX, once, before any region: the settings JAX reads only as its backend
starts, the backend itself, and the gate's jit context.

On the CPU a computation runs inline on the thread that calls it, not handed to a thread of
XLA's (JAX's ``jax_cpu_enable_async_dispatch``, read once, when the CPU backend is made).
Handing it over is most of a small step's time: 16.5 µs against 12.5 µs for one of
`benchmarks.regions`' steps, and with the worker's threads on one core, as `run --base`'s
paired rounds pin them, 50.7 µs against 12.5 µs (docs/performance-log.md). Inline, the runs
time the step rather than the hand-over, and the paired rounds of two workers sharing a core
cost a quarter as much. Computations over several devices are dispatched as before. A
stored timing keeps the setting (`gate.machine.diagnosis.cpu_dispatch`): times taken
the other way are not compared with these.
"""

from __future__ import annotations

from gate.machine.diagnosis import CPU_ASYNC_DISPATCH


def start_backend() -> None:
    """JAX's backend up, as every worker starts it (call it before anything is traced)."""
    import jax

    from gate.jaxhooks.programs import made_at_startup

    jax.config.update(CPU_ASYNC_DISPATCH, False)
    jax.devices()  # backend start-up is paid once per worker, not per region
    made_at_startup()  # before anything is traced: no program is traced twice for it
