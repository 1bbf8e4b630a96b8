"""The worker set-up: a scenario that runs regions inside its own process runs them as the
gate's worker does (`gate.isolation.worker`).

`as_a_worker` prepares the environment before JAX starts, then starts it as a worker does
(`gate.isolation.backend`); `steps_in_a_worker` does that and writes the regions' steps
(`benchmarks.regions`) where ``import bench_steps`` finds them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from benchmarks.regions import STEPS_MODULE, steps_text


def as_a_worker() -> None:
    """This process set up as a worker is, before anything is traced. Call it before JAX is
    imported: the environment is read when it starts."""
    from gate.isolation.environment import prepare_environment

    prepare_environment(os.environ)
    from gate.isolation.backend import start_backend

    start_backend()


def steps_in_a_worker(count: int, prefix: str) -> Path:
    """This process set up as a worker (`as_a_worker`), and ``count`` of the regions' steps
    written to a new folder on ``sys.path`` as ``bench_steps.py``; the folder. Import
    ``bench_steps`` after."""
    as_a_worker()
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    (folder / f"{STEPS_MODULE}.py").write_text(steps_text(count))
    sys.path.insert(0, str(folder))
    return folder
