"""The history job's step: main's reports kept in line, the page, the drift check, the trend.

On a push to the default branch, the gate job's report joins the history as the next in line
(``0000000042-<run>-<attempt>.json``, the order `transfer-gate history` takes), the newest
``KEEP`` stay, and ``--check`` fails the step on drift. On a pull request: main's history and
this run's report, each region's trend in the job summary, and nothing kept. Either way the
history folder holds nothing but the reports this step stored: whatever else is there (a file of
another name, a folder, a link) goes.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gate.ci.step import add_summary, env, error, set_outputs

# A report this step stored: its place in line, then the run and its attempt.
_STORED = re.compile(r"[0-9]{10}-[0-9]+-[0-9]+\.json")
# Every folder the step reads or writes, in RUNNER_TEMP: outside the checkout, so that no file
# the repository commits can stand in for the report, the history or the page.
HISTORY = "transfer-gate-history"
REPORT = "transfer-gate-report/transfer-gate.json"
SITE = "transfer-gate-site"
TREND = "transfer-gate-trend.md"


def stored(kept: Path) -> list[str]:
    """The reports this step stored in ``kept``, oldest first: regular files (no link) named
    by their place in line."""
    return sorted(
        entry.name
        for entry in kept.iterdir()
        if _STORED.fullmatch(entry.name) and entry.is_file() and not entry.is_symlink()
    )


def add_report(kept: Path, report: Path, run_id: str, attempt: str) -> str:
    """Store ``report`` in ``kept`` as the next in line; its name."""
    names = stored(kept)
    place = int(names[-1].split("-", 1)[0]) + 1 if names else 1
    name = f"{place:010d}-{run_id}-{attempt}.json"
    shutil.copyfile(report, kept / name)
    return name


def prune(kept: Path, keep: int) -> list[str]:
    """Remove from ``kept`` every entry but the newest ``keep`` stored reports; those kept."""
    kept_names = stored(kept)[-keep:] if keep > 0 else []
    for entry in kept.iterdir():
        if entry.name in kept_names:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return kept_names


def history_step(
    environ: Mapping[str, str], history: Callable[[Sequence[str]], int] | None = None
) -> int:
    """The step "Chart the history" (its ``env:``: EVENT, REF, DEFAULT_BRANCH, PAGE_URL,
    RUN_ID, RUN_ATTEMPT, KEEP); ``history``: ``transfer-gate history`` with these arguments."""
    temp = Path(env("RUNNER_TEMP", environ))
    kept, report, site, trend = temp / HISTORY, temp / REPORT, temp / SITE, temp / TREND
    kept.mkdir(parents=True, exist_ok=True)
    if not report.is_file():
        error(
            "transfer-gate history",
            "the gate job wrote no JSON report (transfer-gate.json in its artifact); the gate's "
            "action writes one unless its 'json' input is emptied",
        )
        return 1
    branch = env("DEFAULT_BRANCH", environ)
    main = env("EVENT", environ) == "push" and env("REF", environ) == f"refs/heads/{branch}"
    if main:
        add_report(kept, report, env("RUN_ID", environ), env("RUN_ATTEMPT", environ))
        set_outputs(environ, added="true")
    reports = [str(kept)] if prune(kept, int(env("KEEP", environ))) else []
    if not main:  # a pull request's report is the newest point, never one of main's
        reports.append(str(report))
    page_url = env("PAGE_URL", environ)
    argv = [
        "history",
        *reports,
        "--out",
        str(site),
        # Main's line alone (a pull request's own report a line of its own).
        "--branch",
        branch,
        "--markdown",
        str(trend),
        *(["--page-url", page_url] if page_url else []),
        *(["--check"] if main else []),
    ]
    code = (history or _transfer_gate)(argv)
    if trend.is_file():
        add_summary(environ, trend.read_text(encoding="utf-8"))
        set_outputs(environ, written="true")
    if code == 1:
        error(
            "transfer-gate history",
            "a region drifted beyond its policy's drift: bounds over main's runs, or the newest "
            "report left out a region; the lines above name it, its figure and the commits where "
            "it rose most",
        )
    return code


def _transfer_gate(argv: Sequence[str]) -> int:
    # Late: the steps of the jobs without the gate's dependencies never import the CLI.
    from gate.cli.main import main

    return main(list(argv))


__all__ = ["HISTORY", "REPORT", "SITE", "TREND", "history_step"]
