"""Every report of a run, written in one place: JUnit, the JSON map, GitHub Actions' annotations.

Beside them, the profiler's traces of the regions' traced runs (`TRACES`): the workers
write them there (`gate.witness.op_times`), the reports name them.

A run that refused to start (an invalid policy, an unusable baseline, a bug
in the gate) is reported the same way as one that ran, because a missing
report reads as "0 tests, all passed".
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from gate.files import OUTSIDE_AS_WRITTEN, way_out
from gate.report.github import report_to_github
from gate.report.json_report import Fingerprints, write_json
from gate.report.junit import ReportWriteError, write_junit
from gate.results.provenance import Provenance
from gate.results.records import RunResult


@dataclass(frozen=True)
class Reports:
    """Where a run's reports go: the JUnit file always, the JSON map when asked for."""

    junit: Path
    json: Path | None = None

    def check_writable(self, repo_root: Path) -> None:
        """Raise ReportWriteError before anything runs if a report could not be written, or
        would be written outside ``repo_root`` through a symlink in it (`check_writable`); or
        if the traces' folder beside them is a symlink (`check_traces`)."""
        check_writable(self.junit, "--junit", repo_root)
        if self.json is not None:
            check_writable(self.json, "--json", repo_root)
        check_traces(self)

    def remove(self) -> None:
        """Delete the reports a run before this one left; raise ReportWriteError if one stays."""
        for report in (self.junit, self.json):
            if report is None:
                continue
            try:
                report.unlink(missing_ok=True)
            except OSError as exc:
                raise ReportWriteError(
                    f"{report}: cannot replace the last run's report ({exc.strerror}); "
                    "remove it, or choose another path"
                ) from exc

    def describe(self) -> str:
        """``report: reports/transfer-gate.xml, reports/map.json``."""
        return f"report: {self.junit}" + (f", {self.json}" if self.json else "")


TRACES = "-traces"  # after the JUnit report's name: reports/transfer-gate-traces/


def traces_folder(reports: Reports) -> Path:
    """Where a run keeps the profiler's traces of its regions: a folder beside the JUnit
    report, named after it (two runs with their own reports in one folder, say two shards on
    one host, keep theirs apart), one folder per traced region and side in it.

    The folder's own name is never resolved: a symlink there is refused (`check_traces`),
    not followed."""
    junit = reports.junit
    return junit.parent.resolve() / (junit.stem + TRACES)


def check_traces(reports: Reports) -> None:
    """Raise ReportWriteError if the traces' folder is a symlink, wherever it points.

    The gate clears the folder at the start of each run and its workers write into it: a
    symlink a pull request commits there would have the gate delete and write what it
    points to, outside the repository or inside (issue 54). The reports' folders are
    `check_writable`'s; the traces are the gate's alone, so no symlink is theirs to follow.
    """
    folder = reports.junit.with_name(reports.junit.stem + TRACES)
    if folder.is_symlink():
        raise ReportWriteError(
            f"{folder}: is a symlink (-> {os.readlink(folder)}); the gate clears this folder "
            f"and keeps the profiler's traces in it (beside --junit {reports.junit}), and never "
            "through a symlink: remove the symlink"
        )


def clear_traces(reports: Reports) -> None:
    """Remove an earlier run's traces, so that the folder holds this run's only; never
    through a symlink (`check_traces` refuses one before anything is deleted)."""
    folder = traces_folder(reports)
    if not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def write_reports(
    run: RunResult,
    reports: Reports,
    fingerprints: Fingerprints,
    provenance: Provenance | None = None,
) -> None:
    """Write every report of ``run``; ``fingerprints`` are its findings' baseline fingerprints,
    ``provenance`` what it measured (the JSON report's ``run``)."""
    write_junit(run, reports.junit)
    if reports.json is not None:
        write_json(run, reports.json, fingerprints, provenance)
    report_to_github(run, reports.junit)


def check_writable(report: Path, option: str, repo_root: Path) -> None:
    """Fail before running anything if the file could not be written; ``option`` names it.

    A path inside the repository as written must stay there: a symlink the repository holds
    (which a pull request can add) never carries a report out of it. An outside path named on
    the command line itself (``--junit /tmp/x.xml``, ``../x.xml``) is the user's to choose.
    """
    out = way_out(report, repo_root)
    if out is not None and out != OUTSIDE_AS_WRITTEN:
        raise ReportWriteError(
            f"{option} {report} {out}; remove the symlink, or name the outside path itself "
            f"on the command line ({option} /elsewhere/{report.name})"
        )
    folder = report.parent
    if report.is_dir():
        raise ReportWriteError(f"{report}: is a folder; pass a file path to {option}")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ReportWriteError(
            f"{report}: cannot create folder {folder} ({existing} is a file); "
            f"choose another {option}"
        )
    probe = existing / f".transfer-gate-probe-{time.monotonic_ns()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ReportWriteError(
            f"{report}: cannot write there ({exc.strerror}); choose another {option}"
        ) from exc
