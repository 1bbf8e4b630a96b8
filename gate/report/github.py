"""The run as GitHub Actions shows it: error annotations and a Markdown job summary.

Only when ``GITHUB_ACTIONS=true``. Both follow GitHub's documented rules: workflow
commands and job summaries in
https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-commands,
the limit of 10 error annotations per step in https://github.com/actions/toolkit/pull/734.

- Workflow commands ``::error file=F,line=N,title=T::message`` on stdout.
  In the message ``%``, CR and LF are escaped (``%25``, ``%0D``, ``%0A``);
  in property values ``:`` and ``,`` too (``%3A``, ``%2C``). GitHub shows
  at most 10 error annotations per step, so at most 10 are written, the most
  important first (failing transfers, errors, failed checks, recompiles, then
  comparisons with the base), and
  one warning line says how many more are in the report.
- A Markdown summary appended to ``$GITHUB_STEP_SUMMARY``, which GitHub
  caps at 1 MiB per step: the summary is cut between entries, with a line
  saying how much was left out, rather than rejected.

The annotations are built in `gate.report.github_annotations`; this module
writes them and the summary. The wording comes from `gate.report.terminal` and
`gate.results.hints`, so the log, the JUnit report and GitHub say the same thing.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from gate.printable import printable, say_command
from gate.report.communication_text import (
    comm_comparisons,
    cost_columns,
    donation_comparisons,
    failure_reasons,
    shown,
)
from gate.report.comparison_text import (
    base_status_line,
    failing_comparisons,
    own_definition_line,
)
from gate.report.github_annotations import (
    TITLE,
    Annotation,
    AnnotationKind,
    annotation_lines,
    in_github_actions,
    region_annotations,
    workflow_command,
)
from gate.report.terminal import format_boundary, one_line
from gate.results.comparison import BaseStatus, TimingComparison, TimingVerdict
from gate.results.costs import CostComparison
from gate.results.findings import group
from gate.results.records import CoverageJudge, RegionResult, RunResult
from gate.text import duration_text

# What other modules import from here; `gate.machine.doctor` takes the workflow commands from
# here too, and mypy's strict no-implicit-reexport accepts re-exported names only when listed.
__all__ = [
    "MAX_DETAILS_CHARS",
    "MAX_SUMMARY_BYTES",
    "append_summary",
    "fit_summary",
    "markdown_text",
    "render_summary",
    "report_to_github",
    "summary_blocks",
]

MAX_SUMMARY_BYTES = 1024 * 1024  # GitHub's limit for one step's summary
# A traceback longer than this is cut in the summary; the report keeps all of it.
MAX_DETAILS_CHARS = 20_000


# --- job summary ---------------------------------------------------------------------------------

# Characters that mean something in Markdown inside a line (or a table cell);
# a leading `#`, `-` or digit cannot occur, since user text never starts a line.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")


def markdown_text(text: str) -> str:
    """User text (an exception message, a suite's name) as literal Markdown on one line: what
    every job summary the gate writes puts through `fit_summary`'s `printable` too."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", one_line(text))


def _code(text: str, *, in_table: bool = False) -> str:
    """`text` as an inline code span; in a table cell, `|` is escaped (elsewhere it would show)."""
    text = one_line(text)
    if in_table:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fenced(text: str) -> str:
    """`text` in a fenced block, cut to MAX_DETAILS_CHARS; the fence outlasts any run inside."""
    if len(text) > MAX_DETAILS_CHARS:
        cut = len(text) - MAX_DETAILS_CHARS
        text = text[:MAX_DETAILS_CHARS] + f"\n… {cut} more characters in the report"
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _status(region: RegionResult) -> str:
    if region.error is not None:
        return f"**ERROR**: {markdown_text(region.error.kind.value)}"
    if region.passed:
        return "pass"
    why = []
    if region.transfers_failed:
        why.append("transfers")
    failed_checks = [c.name.value for c in region.checks if not c.passed]
    if failed_checks:
        why.append("checks: " + ", ".join(failed_checks))
    if region.recompiles_failed:
        why.append("recompiles")
    why.extend(label for label, _ in failing_comparisons(region))
    why.extend(failure_reasons(region))
    if region.memory_failed:
        why.append("device memory")
    return f"**FAIL**: {'; '.join(why)}"


def _failing_by_direction(region: RegionResult) -> str:
    """``host-to-device: 2 lines``: the failing lines of code, counted per direction."""
    # One line moving three arrays is three findings but one line to fix.
    lines = dict.fromkeys(
        (f.direction.label, f.location) for f in group(region.transfers) if f.failing
    )
    counts = Counter(direction for direction, _ in lines)
    if not counts:
        return "none" if region.error is None else "—"
    return ", ".join(
        f"{direction}: {n} line" + ("" if n == 1 else "s") for direction, n in counts.items()
    )


def _table_row(region: RegionResult) -> str:
    median = duration_text(region.timing.median_s) if region.timing is not None else "—"
    boundaries = (
        "<br>".join(markdown_text(format_boundary(b)) for b in region.boundaries)
        if region.boundaries
        else "—"
    )
    # XLA's count, as the terminal shows it; "" when not measured or without flops.
    cost = ", ".join(cost_columns(region))
    cells = [
        _code(region.classname, in_table=True),
        _status(region),
        _failing_by_direction(region),
        median,
        markdown_text(cost) if cost else "—",
        boundaries,
    ]
    return "| " + " | ".join(cells) + " |\n"


def comparison_blocks(run: RunResult) -> list[str]:
    """``region | base | head | ratio | verdict``: only when a region was compared.

    One row per timing comparison (the step against the base, each gated boundary,
    the step against the stored baseline), one per cost comparison that found a
    change, and one for a region the base did not have or could not run, so every
    compared region is in the table.
    """
    rows = [row for region in run.regions for row in _comparison_rows(region)]
    if not rows:
        return []
    refs = sorted({r.base.base for r in run.regions if r.base is not None})
    against = f"Base: {', '.join(_code(ref) for ref in refs)}. " if refs else ""
    head = (
        f"\n### Against the base\n\n{against}Base and head: median step time (samples): "
        "against the base, of paired rounds on one core, so not the timed runs' median above; "
        "ratio: head/base (the interval the verdict rests on).\n\n"
        "| Region | Base | Head | Ratio | Verdict |\n|---|---|---|---|---|\n"
    )
    return [head, *rows]


def _comparison_rows(region: RegionResult) -> list[str]:
    name = _code(region.classname, in_table=True)
    rows = []
    base = region.base
    if base is not None:
        if base.status is not BaseStatus.COMPARED:
            verdict = markdown_text(base_status_line(base))
            if base.status is BaseStatus.BASE_FAILED:
                verdict = f"**ERROR**: {verdict}"
            rows.append(f"| {name} | — | — | — | {verdict} |\n")
        if own_definition_line(base):  # what the rows below were measured against
            rows.append(f"| {name} | — | — | — | {markdown_text(own_definition_line(base))} |\n")
        for timing in (base.timing, *base.boundary_timing):
            if timing is not None:
                rows.append(_timing_row(name, timing))
        # Listed when the terminal lists it: a figure changed, or a side was not measured.
        if base.cost is not None and (base.cost.changed or not base.cost.compared):
            rows.append(_cost_row(name, base.cost))
    if region.timing_vs_baseline is not None:
        rows.append(_timing_row(name, region.timing_vs_baseline))
    if region.cost_vs_baseline is not None and region.cost_vs_baseline.changed:
        rows.append(_cost_row(name, region.cost_vs_baseline))
    for comm in comm_comparisons(region):
        if shown(comm):
            verdict = markdown_text(comm.headline())
            verdict = f"**FAIL**: {verdict}" if comm.collectives_failing else verdict
            against = "" if comm.against == "base" else f" (vs {markdown_text(comm.against)})"
            rows.append(f"| {name} collectives{against} | — | — | — | {verdict} |\n")
    for donations in donation_comparisons(region):
        if donations.shown:
            verdict = markdown_text(donations.headline())
            verdict = f"**FAIL**: {verdict}" if donations.failing else verdict
            against = (
                "" if donations.against == "base" else f" (vs {markdown_text(donations.against)})"
            )
            rows.append(f"| {name} donations{against} | — | — | — | {verdict} |\n")
    return rows


def _cost_row(name: str, cost: CostComparison) -> str:
    """XLA's figures are exact: no medians, ratio interval or p; the verdict names the changes."""
    name += " cost"
    if cost.against != "base":
        name += f" (vs {markdown_text(cost.against)})"
    verdict = markdown_text(cost.headline())
    if cost.failing:
        verdict = f"**FAIL**: {verdict}"
    return f"| {name} | — | — | — | {verdict} |\n"


def _timing_row(name: str, timing: TimingComparison) -> str:
    if timing.what != "step":
        name += f" boundary {_code(timing.what, in_table=True)}"
    if timing.against != "base":
        name += f" (vs {markdown_text(timing.against)})"
    verdict = timing.verdict.value
    if timing.failing:
        verdict = f"**FAIL**: {verdict}"
    elif timing.verdict is TimingVerdict.SLOWER:
        verdict += " (warn)"
    elif timing.verdict is TimingVerdict.INCONCLUSIVE:
        verdict = f"**{verdict}** (not a pass)"
    cells = [
        name,
        f"{duration_text(timing.base_median_s)} ({len(timing.base_samples)})",
        f"{duration_text(timing.head_median_s)} ({len(timing.head_samples)})",
        f"{timing.ratio:.2f}x ({_interval_cell(timing)})",
        verdict,
    ]
    return "| " + " | ".join(cells) + " |\n"


def _interval_cell(timing: TimingComparison) -> str:
    if not (math.isfinite(timing.ratio_low) and math.isfinite(timing.ratio_high)):
        return "no interval: too few samples"
    return f"{timing.ratio_low:.2f}-{timing.ratio_high:.2f}"


def _summary_entry(entry: Annotation) -> str:
    where = f"{_code(entry.where)}: " if entry.where else ""
    # A transfer's message already says what moved; an error or a check needs its label.
    label = "" if entry.kind is AnnotationKind.TRANSFER else f"{markdown_text(entry.label)}: "
    text = f"- {where}{label}{markdown_text(entry.message)}\n"
    if entry.source:
        text += f"  {_code(entry.source)}\n"
    if entry.fix:
        # The hints are the gate's own text and use `code` spans on purpose.
        text += f"  fix: {one_line(entry.fix)}\n"
    if entry.details.strip():
        block = _fenced(entry.details).replace("\n", "\n  ")
        text += f"\n  <details><summary>details</summary>\n\n  {block}\n\n  </details>\n"
    return text


def _heading(run: RunResult) -> str:
    regions = run.regions
    if not regions:
        return f"## {TITLE}: no regions ran\n\nThe report has no tests.\n"
    passed = sum(1 for r in regions if r.passed)
    heading = f"## {TITLE}: {passed} passed, {len(regions) - passed} failed\n"
    platforms = sorted({r.platform for r in regions if r.platform})
    if platforms:
        heading += f"\nPlatform: {markdown_text('; '.join(platforms))}\n"
    # Said up front, as in the terminal: a direction nothing checked.
    unchecked = sorted(
        {d for r in regions for d, judge in r.coverage if judge is CoverageJudge.NOT_CHECKED}
    )
    if unchecked:
        heading += f"\n**Not checked on this platform: {markdown_text(', '.join(unchecked))}**\n"
    return heading


def summary_blocks(run: RunResult) -> list[str]:
    """The summary as blocks, each whole Markdown: where it may be cut."""
    blocks = [_heading(run)]
    if run.regions:
        blocks.append(
            "\n| Region | Status | Failing transfers | Median step | Cost | Boundary costs |\n"
            "|---|---|---|---|---|---|\n"
        )
        blocks.extend(_table_row(region) for region in run.regions)
    blocks.extend(comparison_blocks(run))
    # As in the terminal summary: regions that failed, and those with notes.
    shown = [r for r in run.regions if not r.passed or r.notes]
    if shown:
        blocks.append("\n### Findings\n")
        for region in shown:
            blocks.append(f"\n#### {_code(region.classname)}\n\n")
            blocks.extend(_summary_entry(entry) for entry in region_annotations(region))
            blocks.extend(f"- note: {markdown_text(note)}\n" for note in region.notes)
    return blocks


def render_summary(run: RunResult, report: str, limit_bytes: int = MAX_SUMMARY_BYTES) -> str:
    """The Markdown job summary for `run`, at most `limit_bytes` of UTF-8 (`fit_summary`)."""
    return fit_summary(
        summary_blocks(run),
        f"\nFull report: {_code(report)}\n",
        lambda left: _cut_note(left, report),
        limit_bytes,
    )


def fit_summary(
    blocks: Sequence[str], footer: str, cut_note: Callable[[int], str], limit_bytes: int
) -> str:
    """``blocks``, then ``footer``, as a job summary of at most ``limit_bytes`` of UTF-8.

    Each block is whole Markdown, where the summary may be cut. Blocks that do not fit are left
    out from the first one that does not, and ``cut_note(blocks left out)`` says so; "" when
    not even the first block fits.
    """
    # Markdown a person reads: no control character, no line a runner would act on; made so
    # before it is measured, since a shown escape is longer than the character.
    footer = printable(footer)
    shown = [printable(block) for block in blocks]
    used = _size(footer)
    kept: list[str] = []
    for index, block in enumerate(shown):
        remaining = len(shown) - index - 1
        note = printable(cut_note(len(shown) - index))
        # Room for this block, and for the note should a later one not fit.
        reserve = _size(note) if remaining else 0
        if used + _size(block) + reserve > limit_bytes:
            if used + _size(note) > limit_bytes or not kept:
                return ""
            return "".join(kept) + note + footer
        kept.append(block)
        used += _size(block)
    return "".join(kept) + footer


def _cut_note(left: int, report: str) -> str:
    return (
        f"\n_Summary cut to fit GitHub's limit of {MAX_SUMMARY_BYTES // 1024} KiB per step: "
        f"{left} more entries are in the report {_code(report)}._\n"
    )


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


# --- wiring --------------------------------------------------------------------------------------


def report_to_github(
    run: RunResult,
    report: Path | str,
    environ: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
) -> None:
    """Annotate and summarise `run` for GitHub Actions; nothing outside GitHub Actions.

    A summary that cannot be written costs a warning line, never the verdict:
    the report and the exit code are what the gate promises.
    """
    environ = os.environ if environ is None else environ
    out = sys.stdout if stdout is None else stdout
    if not in_github_actions(environ):
        return
    report_name = Path(report).as_posix()
    for line in annotation_lines(run, report_name):
        say_command(line, out)
    summary_path = environ.get("GITHUB_STEP_SUMMARY", "")
    if summary_path:
        problem = append_summary(Path(summary_path), run, report_name)
        if problem:
            say_command(workflow_command("warning", problem, title=TITLE), out)
    out.flush()


def append_summary(path: Path, run: RunResult, report: str) -> str:
    """Append the summary to `path` within the step's budget; a one-line problem or ""."""
    try:
        existing = path.stat().st_size if path.exists() else 0
    except OSError:
        existing = 0
    # A blank line keeps what the step wrote before from running into the heading.
    separator = "\n" if existing else ""
    text = render_summary(run, report, MAX_SUMMARY_BYTES - existing - len(separator))
    if not text:
        return (
            f"no room left in the job summary ({existing} bytes already written this step); "
            f"see the report {report}"
        )
    try:
        with path.open("a", encoding="utf-8") as stream:
            stream.write(separator + text)
    except OSError as exc:
        return f"cannot write the job summary {path}: {exc.strerror or exc}"
    return ""
