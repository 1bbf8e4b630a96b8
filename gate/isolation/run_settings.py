"""A run's settings for the gate inside its workers: where it keeps traces, which regions it
traces.

`gate.cli.run` works them out from its arguments and the stored baseline; each job carries them
to its worker (`gate.isolation.protocol.Job.settings`), which hands them to the region's call
(`gate.region.engine.run_region`) as arguments. They are never part of a worker's environment,
so that the first worker can start before the run has worked them out (`gate.isolation.spawn`),
and nothing exported in the shell makes the gate's workers differ from the one it started.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class RunSettings:
    """What one run decided for its workers. The default is a run with no such decisions
    (``baseline``, which records every region's op times with its step times): every region
    traced, no trace kept."""

    # The folder the run keeps its traces in, beside its reports; None: each trace is read,
    # then removed.
    traces: Path | None = None
    # The regions (``suite.region``) whose step times the run compares, so which are traced:
    # on a TPU a trace costs ~0.7 s to stop, and only a "slower" verdict reads one. None:
    # every region; empty: none (a plain run with no stored step times).
    compared: frozenset[str] | None = None

    def traces_region(self, key: str) -> bool:
        """Whether the region ``key`` (``suite.region``) gets traced runs in this run."""
        return self.compared is None or key in self.compared

    def untraced(self) -> RunSettings:
        """These settings for a job whose step times nothing compares: no region traced."""
        return replace(self, compared=frozenset())


# A run that decided nothing for its workers: the gate's commands but ``run``, and tests.
DEFAULT_SETTINGS = RunSettings()
