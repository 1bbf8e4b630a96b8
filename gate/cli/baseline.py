"""``transfer-gate baseline``: accept the transfers regions have today; store their step times."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gate.cli.errors import UsageError
from gate.cli.execute import Selection, baseline_for, execute, shown
from gate.cli.exit_codes import ExitCode
from gate.cli.run import colour
from gate.compare.stored_baseline import planned_regions
from gate.plan import Plan
from gate.report.live import LiveOutput
from gate.report.terminal import format_summary
from gate.report.write import check_writable
from gate.results.baseline import load_baseline_file, rebaselined, write_baseline
from gate.results.timing_baseline import retimed
from gate.text import counted


def baseline_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the baseline file; refuses (nothing written) when a region errored."""
    path, _ = baseline_for(args.baseline, args.paths, repo_root)
    check_writable(path, "--baseline")
    # `run`'s live output but the rows: the running region in place, a GitHub group per region.
    live = LiveOutput.for_stream(
        sys.stderr, os.environ, color=colour("auto", sys.stderr), rows=False
    )

    def planned(plan: Plan) -> None:
        live.total = len(planned_regions(plan))

    with live:
        result = execute(
            Selection.from_args(args),
            repo_root,
            planned=planned,
            watcher=live,
            finished=live.finished,
        )
    errored = [r for r in result.regions if r.error is not None]
    if errored:
        print(format_summary(result))
        raise UsageError(
            f"{counted(len(errored), 'region')} errored, so their transfers are unknown; "
            "fix them and run `transfer-gate baseline` again (the baseline was not written)"
        )
    existing, stored = load_baseline_file(path) if path.is_file() else ([], None)
    entries, kept = rebaselined(result, existing)
    timing = retimed(result, stored)
    write_baseline([*kept, *entries], path, timing)
    ran = {r.classname for r in result.regions}
    timed = sum(1 for r in result.regions if r.classname in timing and r.timing_samples)
    print(
        f"baseline: {shown(path, repo_root)}: {counted(len(entries), 'accepted transfer line')} "
        f"in {len({e.region for e in entries})} of {counted(len(ran), 'region')} run"
        + (f", {len(kept)} kept for other regions" if kept else "")
        + f", step times of {counted(timed, 'region')}"
    )
    return ExitCode.OK
