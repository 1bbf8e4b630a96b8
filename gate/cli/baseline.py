"""``transfer-gate baseline``: run the regions and accept the transfers they have today."""

from __future__ import annotations

import argparse
from pathlib import Path

from gate.cli.errors import UsageError
from gate.cli.execute import baseline_for, execute, shown
from gate.cli.exit_codes import ExitCode
from gate.report.terminal import format_summary
from gate.report.write import check_writable
from gate.results.baseline import load_baseline, rebaselined, write_baseline


def baseline_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the baseline file; refuses (nothing written) when a region errored."""
    path, _ = baseline_for(args, repo_root)
    check_writable(path, "--baseline")
    result = execute(args, repo_root)
    errored = [r for r in result.regions if r.error is not None]
    if errored:
        print(format_summary(result))
        raise UsageError(
            f"{len(errored)} region(s) errored, so their transfers are unknown; "
            "fix them and run `transfer-gate baseline` again (the baseline was not written)"
        )
    entries, kept = rebaselined(result, load_baseline(path) if path.is_file() else [])
    write_baseline([*kept, *entries], path)
    ran = {r.classname for r in result.regions}
    print(
        f"baseline: {shown(path, repo_root)}: {len(entries)} accepted transfer line(s) "
        f"from {len(ran)} region(s)" + (f", {len(kept)} kept for other regions" if kept else "")
    )
    return ExitCode.OK
