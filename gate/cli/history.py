"""``transfer-gate history``: each region's figures across commits, as a page and as data.

Reads the JSON reports (files or folders), writes ``DIR/index.html`` and ``DIR/history.json``
(`gate.report.history_series`, `gate.report.history_page`), and with ``--check`` judges the
drift of the newest report's regions over the window their policy's ``drift:`` sets
(`gate.report.history_drift`), loading the policies the reports name from this repository.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gate.cli.exit_codes import ExitCode
from gate.documents import encode
from gate.files import write_text_atomically
from gate.policy.load import load_policy
from gate.policy.model import DriftRule
from gate.printable import say
from gate.report.history_drift import check_drift
from gate.report.history_page import render_page
from gate.report.history_series import (
    History,
    build_history,
    newest_regions,
    read_reports,
    report_files,
)
from gate.report.history_summary import render_markdown
from gate.text import counted


def history_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the page and the data; with ``--check``, exit 1 on drift."""
    reports = read_reports(report_files([Path(p) for p in args.reports]))
    history = build_history(reports)
    out = Path(args.out)
    write_text_atomically(out / "history.json", encode(history, ordered=False))
    write_text_atomically(out / "index.html", render_page(history))
    say(
        f"wrote {out / 'index.html'} and {out / 'history.json'}: "
        f"{counted(len(history.runs), 'run')}, {counted(len(history.regions), 'region')}, "
        f"{counted(len(history.machines), 'machine')}"
    )
    newest = newest_regions(history)
    if args.markdown:
        write_text_atomically(Path(args.markdown), render_markdown(history, args.page_url, newest))
        say(f"wrote the trend of {counted(len(newest), 'region')} to {args.markdown}")
    if not args.check:
        return ExitCode.OK
    return _check(history, newest, repo_root)


def _check(history: History, newest: set[str], repo_root: Path) -> ExitCode:
    current = History(
        repository=history.repository,
        runs=history.runs,
        machines=history.machines,
        regions=tuple(r for r in history.regions if r.classname in newest),
    )
    # The bounds of the policies the newest report ran, as this checkout has them.
    rules: dict[str, DriftRule] = {
        policy: load_policy(Path(policy), repo_root).drift
        for policy in sorted({r.policy for r in current.regions})
    }
    result = check_drift(current, rules)
    for unchecked in result.unchecked:
        say(f"not checked: {unchecked.message()}")
    for drift in result.drifts:
        say(f"drift: {drift.message()}")
    if result.drifts:
        regions = {d.classname for d in result.drifts}
        say(
            f"drift: {counted(len(result.drifts), 'figure')} of "
            f"{counted(len(regions), 'region')} grew beyond the policy's drift bounds"
        )
        return ExitCode.REGION_FAILED
    say(f"no drift in {counted(result.regions, 'region')}")
    return ExitCode.OK
