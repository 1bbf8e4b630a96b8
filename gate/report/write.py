"""Every report of a run, written in one place: JUnit, the JSON map, GitHub Actions' annotations.

Beside them, the profiler's traces of the regions' traced runs (`TRACES`): the workers
write them there (`gate.witness.op_times`), the reports name them.

A run that refused to start (an invalid policy, an unusable baseline, a bug
in the gate) is reported the same way as one that ran, because a missing
report reads as "0 tests, all passed".
"""

from __future__ import annotations

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
        would be written outside ``repo_root`` through a symlink in it (`check_writable`)."""
        check_writable(self.junit, "--junit", repo_root)
        if self.json is not None:
            check_writable(self.json, "--json", repo_root)

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
    one host, keep theirs apart), one folder per traced region and side in it."""
    junit = reports.junit
    return junit.with_name(junit.stem + TRACES).resolve()


def clear_traces(reports: Reports) -> None:
    """Remove an earlier run's traces, so that the folder holds this run's only."""
    shutil.rmtree(traces_folder(reports), ignore_errors=True)


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
