"""Each region's recent trend in one line of Markdown: a pull request's job summary.

``transfer-gate history --markdown FILE`` writes a table with a row per region of the newest
report and branch: its step time's sparkline over the newest runs of its newest machine
(Unicode block characters, which GitHub renders in any Markdown), the first and newest
median, and a link to the region's charts on the published page when ``--page-url`` names
it. Its title says which branches' runs it holds: main's alone by default, so a feature
branch's runs never bend main's line, and a pull request's own run is a row of its own.
"""

from __future__ import annotations

from gate.report.github import MAX_SUMMARY_BYTES, fit_summary, markdown_text
from gate.report.history_series import (
    History,
    RegionSeries,
    fraction_between,
    newest_machine,
    series_name,
)
from gate.text import counted, duration_text

# The newest runs a sparkline draws: enough for a trend, short enough for one table cell.
SPARK_RUNS = 20
_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """``▁▂▄█``: each value as a block, scaled from the lowest to the highest."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return _BLOCKS[0] * len(values)
    top = len(_BLOCKS) - 1
    return "".join(_BLOCKS[round(fraction_between(v, lo, hi) * top)] for v in values)


def render_markdown(history: History, page_url: str | None, current: set[str]) -> str:
    """The job summary's table for the regions in ``current`` (the newest report's).

    Through the gate's own job summary's text gate (`gate.report.github`): a region's name is
    literal Markdown on one line, no control character or workflow command survives, and the
    table is cut between rows to fit GitHub's limit for one step's summary, saying how many
    rows were left out.
    """
    said = history.branches or "the recent runs given"
    blocks = [
        f"### Step time over {markdown_text(said)}\n\n"
        "| Region | Trend | First | Newest | Runs |\n"
        "| --- | --- | --- | --- | --- |\n"
    ]
    for index, region in enumerate(history.regions):
        if region.classname in current:
            blocks.append(_row(index, region, series_name(region, history), page_url) + "\n")
    footer = f"\nEvery region's charts: {page_url}\n" if page_url else ""
    return fit_summary(blocks, footer, _cut_note, MAX_SUMMARY_BYTES)


def _cut_note(left: int) -> str:
    return (
        f"\n_Trend cut to fit GitHub's limit of {MAX_SUMMARY_BYTES // 1024} KiB per step: the "
        f"page (index.html) and history.json hold {counted(left, 'more region')}._\n"
    )


def _row(index: int, region: RegionSeries, shown: str, page_url: str | None) -> str:
    machine = newest_machine(region.points)
    medians = [
        p.median_s for p in region.points if p.machine == machine and p.median_s is not None
    ][-SPARK_RUNS:]
    name = markdown_text(shown)
    link = f"[{name}]({page_url.rstrip('/')}/#region-{index})" if page_url else name
    if not medians:
        return f"| {link} | not timed | | | 0 |"
    return (
        f"| {link} | `{sparkline(medians)}` | {duration_text(medians[0])} | "
        f"{duration_text(medians[-1])} | {len(medians)} |"
    )
