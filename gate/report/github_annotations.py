"""What a run's reader must act on, as GitHub Actions error annotations.

Workflow commands (``::error file=F,line=N,title=T::message``) on stdout,
escaped as GitHub's toolkit does; at most 10 error annotations per step,
the most important first. `gate.report.github` writes them, and lists the
same findings in the job summary.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gate.report.communication_text import acted_on
from gate.report.comparison_text import failing_comparisons
from gate.report.memory_text import LABEL, leak_place, leak_text
from gate.report.terminal import one_line, recompile_fix
from gate.results.errors import ErrorKind
from gate.results.findings import Finding, group
from gate.results.hints import hint_for, hint_for_error
from gate.results.leaks import LEAK_FIX
from gate.results.records import RegionResult, RunResult
from gate.text import counted

MAX_ERROR_ANNOTATIONS = 10  # GitHub shows no more error annotations per step
TITLE = "transfer-gate"


# --- workflow commands ---------------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message's escapes, plus ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **properties: str | int | None) -> str:
    """``::command key=value,...::message``; properties that are None are left out."""
    props = ",".join(
        f"{key}={escape_property(str(value))}"
        for key, value in properties.items()
        if value is not None
    )
    head = f"::{command} {props}" if props else f"::{command}"
    return f"{head}::{escape_data(message)}"


def in_github_actions(environ: Mapping[str, str]) -> bool:
    """True when running as a GitHub Actions step (the runner sets ``GITHUB_ACTIONS=true``)."""
    return environ.get("GITHUB_ACTIONS") == "true"


# --- findings ------------------------------------------------------------------------------------


class AnnotationKind(enum.IntEnum):
    """What an annotation is about; the order is the order of importance."""

    TRANSFER = 0
    ERROR = 1
    CHECK = 2
    RECOMPILE = 3
    COMPARISON = 4  # slower than the base or the baseline, a changed result, a broken base
    COMMUNICATION = 5  # a new collective (at its line), communicated bytes, an unused donation
    MEMORY = 6  # device memory the step keeps every run, at what holds it


@dataclass(frozen=True)
class Annotation:
    """One thing a reader must act on, at one place: an annotation and a summary entry."""

    kind: AnnotationKind
    region: str  # the region's classname, ``suite.region``
    path: str  # file to annotate; "" when there is none (a gate bug)
    line: int  # 0 when there is none
    label: str  # short: what kind of problem, e.g. "implicit host-to-device transfer"
    message: str  # what happened, one line
    fix: str = ""  # the usual fix, one line
    source: str = ""  # the offending line's text, when known
    details: str = ""  # full text (a traceback); folded in the summary

    @property
    def title(self) -> str:
        return f"{self.region}: {self.label}"

    @property
    def where(self) -> str:
        if not self.path:
            return ""
        return f"{self.path}:{self.line}" if self.line > 0 else self.path


def region_annotations(region: RegionResult) -> list[Annotation]:
    """What failed in `region`: transfers, its error, checks, recompiles, the comparison."""
    found = [
        _transfer_annotation(region, finding)
        for finding in group(region.transfers)
        if finding.failing
    ]
    if region.error is not None and region.error.kind is not ErrorKind.CANCELLED:
        error = region.error
        where = error.location
        found.append(
            Annotation(
                AnnotationKind.ERROR,
                region.classname,
                where.path if where is not None else region.policy_path,
                where.line if where is not None else region.policy_line,
                error.kind.value,
                one_line(error.message),
                fix=hint_for_error(error) or "",
                details=error.details,
            )
        )
    found.extend(
        Annotation(
            AnnotationKind.CHECK,
            region.classname,
            region.policy_path,
            region.policy_line,
            f"result check failed: {check.name.value}",
            one_line(check.detail),
        )
        for check in region.checks
        if not check.passed
    )
    found.extend(
        Annotation(
            AnnotationKind.RECOMPILE,
            region.classname,
            r.location.path if r.location is not None else region.policy_path,
            r.location.line if r.location is not None else region.policy_line,
            "more programs in the first call" if r.startup else "compiled again after warm-up",
            # Whether its line is part of this change, as a transfer's annotation says.
            r.headline().replace(f" at {r.location}", "") + r.line_note(),
            fix=recompile_fix([r]),
            source=r.source or "",
        )
        for r in region.recompiles
        if r.failing
    )
    # At the region's policy line: a slower step or a changed result is no one line's fault.
    found.extend(
        Annotation(
            AnnotationKind.COMPARISON,
            region.classname,
            region.policy_path,
            region.policy_line,
            label,
            text,
            details=_base_error_details(region) if label == "vs base" else "",
        )
        for label, text in failing_comparisons(region)
    )
    found.extend(_communication_annotations(region))
    leak = region.memory.leak if region.memory is not None else None
    if leak is not None and leak.failing:
        path, line = leak_place(region, leak)
        found.append(
            Annotation(
                AnnotationKind.MEMORY,
                region.classname,
                path,
                line,
                LABEL,
                leak_text(leak),
                fix=LEAK_FIX,
            )
        )
    return found


def _communication_annotations(region: RegionResult) -> list[Annotation]:
    """Each failing new collective at its own line; the rest at the region's policy line."""
    return [
        Annotation(
            AnnotationKind.COMMUNICATION,
            region.classname,
            f.location.path if f.location is not None else region.policy_path,
            f.location.line if f.location is not None else region.policy_line,
            f.what,
            f.text,
            fix=f.fix,
            source=f.source or "",
        )
        for f in acted_on(region)
        if f.failing
    ]


def _base_error_details(region: RegionResult) -> str:
    error = region.base.base_error if region.base is not None else None
    return error.details if error is not None else ""


def _transfer_annotation(region: RegionResult, finding: Finding) -> Annotation:
    where = finding.location
    scope = f" {finding.scope()}" if finding.scope() else ""
    return Annotation(
        AnnotationKind.TRANSFER,
        region.classname,
        where.path if where is not None else region.policy_path,
        where.line if where is not None else region.policy_line,
        f"{finding.kind} {finding.direction.label} transfer",
        # A PR's reviewer sees the annotation beside the diff: say whether its line is part of
        # this change, and which change made an unchanged line move data where the gate can tell.
        f"{finding.kind} {finding.what()}{scope}, {finding.counts()}{finding.line_change()}",
        fix=hint_for(finding.sample),
        source=finding.source or "",
    )


def run_annotations(run: RunResult) -> list[Annotation]:
    """Every annotation of `run`, most important kind first, in region order within a kind."""
    found = [entry for region in run.regions for entry in region_annotations(region)]
    return sorted(found, key=lambda a: a.kind)  # stable: keeps the region order


# --- annotations ---------------------------------------------------------------------------------


def annotation_lines(run: RunResult, report: str, limit: int = MAX_ERROR_ANNOTATIONS) -> list[str]:
    """The workflow-command lines for `run`: at most `limit` errors, then a count of the rest."""
    found = run_annotations(run)
    lines = [
        workflow_command(
            "error",
            entry.message + (f"\nfix: {entry.fix}" if entry.fix else ""),
            file=entry.path or None,
            line=entry.line if entry.path and entry.line > 0 else None,
            title=f"{TITLE}: {entry.title}",
        )
        for entry in found[:limit]
    ]
    cancelled = [
        r.classname for r in run.regions if r.error and r.error.kind is ErrorKind.CANCELLED
    ]
    if cancelled:
        # Not a fault of any line: one warning for the run, not an error per region.
        shown = ", ".join(cancelled[:5]) + (
            f" and {len(cancelled) - 5} more" if len(cancelled) > 5 else ""
        )
        lines.append(
            workflow_command(
                "warning",
                f"the run was stopped before {counted(len(cancelled), 'region')} finished "
                f"({shown}); they were not judged",
                title=f"{TITLE}: run cancelled",
            )
        )
    left = len(found) - limit
    if left > 0:
        noun = "finding" if left == 1 else "findings"
        lines.append(
            workflow_command(
                "warning",
                f"{left} more {noun} not annotated (GitHub shows at most {limit} error "
                f"annotations per step); all are in the report {report} and the job summary",
                title=TITLE,
            )
        )
    return lines
