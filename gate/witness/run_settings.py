"""A run's settings for the gate inside its workers: where it keeps traces, which regions it
traces.

`gate.cli.run` works them out from its arguments and the stored baseline; each job carries them
to its worker (`gate.isolation.protocol.Job.settings`), which sets them where
`gate.witness.op_times` reads them. They are never part of a worker's environment, so that the
first worker can start before the run has worked them out (`gate.isolation.spawn`), and a
value exported in the shell does not make the gate's workers differ from the one it started.
"""

from __future__ import annotations

from collections.abc import Mapping

# The folder a run keeps its traces in, beside its reports (`gate.cli.run` sets it for its
# workers); unset (the pytest fixture, ``check_region``, ``baseline``): none is kept.
TRACES_ENV = "TRANSFER_GATE_TRACES"
# Which regions' step times a run compares, so which are traced (`gate.cli.run` sets it): the
# regions' ``suite.region`` keys, comma-separated, or `ALL_REGIONS`. A plain run with no
# stored step times compares none and traces none: on a TPU a trace costs ~0.7 s to stop.
# Unset (``baseline``, which records the op times with the step times): every region.
OP_TIMES_ENV = "TRANSFER_GATE_OP_TIMES"
ALL_REGIONS = "*"
RUN_SETTINGS = (TRACES_ENV, OP_TIMES_ENV)


def split_run_settings(
    environ: Mapping[str, str],
) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """The run's settings in ``environ`` (for `Job.settings`), and the rest: what a worker's
    environment is made from, the first worker's (`gate.isolation.spawn`) and every other."""
    settings = tuple((name, environ[name]) for name in RUN_SETTINGS if name in environ)
    rest = {name: value for name, value in environ.items() if name not in RUN_SETTINGS}
    return settings, rest
