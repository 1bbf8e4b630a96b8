"""``transfer-gate validate``: check the policies and their callables without running a step."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gate.cli.execute import load_policies
from gate.cli.exit_codes import ExitCode
from gate.isolation.scheduler import Scheduler, WorkerUnavailable
from gate.printable import say
from gate.text import counted


def validate_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """One line per valid policy and a total; an invalid one raises PolicyError.

    The callables are imported in a worker, as a run imports them: a module may pick its
    device by kind at import (``jax.devices("tpu")``), which only a worker has.
    """
    try:
        with Scheduler(repo_root) as scheduler:
            policies = load_policies(args.paths, repo_root, scheduler)
    except WorkerUnavailable as exc:
        say(f"error: the policies' callables could not be checked: {exc}", sys.stderr)
        return ExitCode.REGION_FAILED
    regions = sum(len(p.regions) for p in policies)
    for policy in policies:
        say(f"{policy.path.as_posix()}: ok ({counted(len(policy.regions), 'region')})")
    say(f"{counted(len(policies), 'policy', 'policies')}, {counted(regions, 'region')}: valid")
    return ExitCode.OK
