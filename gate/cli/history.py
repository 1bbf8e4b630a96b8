"""``transfer-gate history``: each region's figures across commits, as a page and as data.

Reads the JSON reports (files or folders), writes ``DIR/index.html`` and ``DIR/history.json``
(`gate.report.history_series`, `gate.report.history_page`), and with ``--check`` judges the
drift of the newest report's regions over the window their policy's ``drift:`` sets
(`gate.report.history_drift`), loading the policies the reports name from this repository.
The newest report is the last one given: a report's own dates are the word of the code it
measured. A region the run before it held, and its policy still names, must be in it too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gate.cli.exit_codes import ExitCode
from gate.documents import encode
from gate.files import write_text_atomically
from gate.policy.load import load_policy
from gate.policy.model import Policy
from gate.printable import say
from gate.report.history_drift import check_drift
from gate.report.history_page import render_page
from gate.report.history_series import (
    History,
    RegionSeries,
    branch_reports,
    build_history,
    dropped_regions,
    newest_regions,
    read_reports,
    report_files,
)
from gate.report.history_summary import render_markdown
from gate.text import counted


def history_command(args: argparse.Namespace, repo_root: Path) -> ExitCode:
    """Write the page and the data; with ``--check``, exit 1 on drift."""
    reports = read_reports(report_files([Path(p) for p in args.reports]))
    branch = None if args.every_branch else args.branch
    history = build_history(*branch_reports(reports, branch))
    out = Path(args.out)
    write_text_atomically(out / "history.json", encode(history, ordered=False))
    write_text_atomically(out / "index.html", render_page(history))
    regions = len({r.classname for r in history.regions})  # a series per region and branch
    say(
        f"wrote {out / 'index.html'} and {out / 'history.json'}: "
        f"{counted(len(history.runs), 'run')}, {counted(regions, 'region')}, "
        f"{counted(len(history.machines), 'machine')}; {history.branches}"
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
    # The policies the newest report ran, as this checkout has them: their drift bounds.
    policies = {
        p: load_policy(Path(p), repo_root) for p in sorted({r.policy for r in current.regions})
    }
    result = check_drift(current, {path: policy.drift for path, policy in policies.items()})
    missing = [r for r in dropped_regions(history) if _still_named(r, policies, repo_root)]
    for unchecked in result.unchecked:
        say(f"not checked: {unchecked.message()}")
    for drift in result.drifts:
        say(f"drift: {drift.message()}")
    for region in missing:
        say(f"missing: {_missing(region, history)}")
    if result.drifts:
        regions = {d.classname for d in result.drifts}
        say(
            f"drift: {counted(len(result.drifts), 'figure')} of "
            f"{counted(len(regions), 'region')} grew beyond the policy's drift bounds"
        )
    if missing:
        say(f"drift: {counted(len(missing), 'region')} of the run before missing from the newest")
    if result.drifts or missing:
        return ExitCode.REGION_FAILED
    say(f"no drift in {counted(result.regions, 'region')}")
    return ExitCode.OK


def _still_named(region: RegionSeries, policies: dict[str, Policy], repo_root: Path) -> bool:
    """Whether ``region``'s policy, as this checkout has it, still names it: one removed from
    its policy (or whose policy is gone) was left out on purpose."""
    if region.policy not in policies:
        if not (repo_root / region.policy).is_file():
            return False
        policies[region.policy] = load_policy(Path(region.policy), repo_root)
    policy = policies[region.policy]
    return policy.suite == region.suite and any(r.name == region.name for r in policy.regions)


def _missing(region: RegionSeries, history: History) -> str:
    before, newest = history.runs[-2], history.runs[-1]
    return (
        f"{region.classname}: held by the run before the newest ({before.commit[:7]}) and still "
        f"named by {region.policy}, but not by the newest ({newest.commit[:7]}); a run that "
        "leaves out a region cannot pass the drift check: run the gate on every region, or "
        "remove the region from its policy"
    )
