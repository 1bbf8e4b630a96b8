"""``transfer-gate validate``: check the policies and their callables without running a step."""

from __future__ import annotations

import argparse
from pathlib import Path

from gate.cli.execute import load_policies
from gate.cli.exit_codes import ExitCode
from gate.text import counted


def validate_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """One line per valid policy and a total; an invalid one raises PolicyError."""
    policies = load_policies(args.paths, repo_root)
    regions = sum(len(p.regions) for p in policies)
    for policy in policies:
        print(f"{policy.path.as_posix()}: ok ({counted(len(policy.regions), 'region')})")
    print(f"{counted(len(policies), 'policy', 'policies')}, {counted(regions, 'region')}: valid")
    return ExitCode.OK
