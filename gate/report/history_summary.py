"""Each region's recent trend in one line of Markdown: a pull request's job summary.

``transfer-gate history --markdown FILE`` writes a table with a row per region of the newest
report: its step time's sparkline over the newest runs of its newest machine (Unicode block
characters, which GitHub renders in any Markdown), the first and newest median, and a link
to the region's charts on the published page when ``--page-url`` names it.
"""

from __future__ import annotations

from gate.report.history_series import History, RegionSeries, fraction_between, newest_machine
from gate.text import duration_text

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
    """The job summary's table for the regions in ``current`` (the newest report's)."""
    rows = [
        "### Step time over main's recent runs",
        "",
        "| Region | Trend | First | Newest | Runs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for index, region in enumerate(history.regions):
        if region.classname not in current:
            continue
        rows.append(_row(index, region, page_url))
    if page_url:
        rows += ["", f"Every region's charts: {page_url}"]
    return "\n".join(rows) + "\n"


def _row(index: int, region: RegionSeries, page_url: str | None) -> str:
    machine = newest_machine(region.points)
    medians = [
        p.median_s for p in region.points if p.machine == machine and p.median_s is not None
    ][-SPARK_RUNS:]
    name = region.classname.replace("|", "\\|")
    link = f"[{name}]({page_url.rstrip('/')}/#region-{index})" if page_url else name
    if not medians:
        return f"| {link} | not timed | | | 0 |"
    return (
        f"| {link} | `{sparkline(medians)}` | {duration_text(medians[0])} | "
        f"{duration_text(medians[-1])} | {len(medians)} |"
    )
