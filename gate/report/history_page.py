"""``index.html`` of ``transfer-gate history``: one self-contained page of each region's charts.

The charts are SVG written here, inline in the page: nothing comes from the network, the page
works from ``file://`` and from GitHub Pages alike, and a test reads its points back as
numbers (docs/dependencies.md says why no plotting library). Every figure's text is formatted
here too, by the gate's own `gate.text`; the page's small script only shows a point's text
on hover and on keyboard focus (arrow keys move along a chart), and fills a region's table
when it is opened. Each chart is an image with a text alternative: its caption says what it
shows and how it went, and the table beside it holds every figure.

A run of another machine starts a new stretch: the line breaks and a dashed rule marks the
change, so a step time is never drawn as one line across two machines. A failed run's point
is a red cross.
"""

from __future__ import annotations

import html
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gate.package import __version__
from gate.printable import visible
from gate.report.history_series import (
    History,
    Point,
    RegionSeries,
    fraction_between,
    newest_machine,
    series_name,
)
from gate.text import counted, duration_text, number_text, si_text, size_text

# The plot area inside each chart's SVG, in its own units (the SVG scales to the page).
WIDTH, HEIGHT = 720, 170
LEFT, RIGHT, TOP, BOTTOM = 76, 12, 12, 26
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@dataclass(frozen=True)
class Series:
    """One line of a chart: its figure per point, and how a value reads."""

    key: str
    label: str
    value: Callable[[Point], float | None]


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    text: Callable[[float], str]
    series: tuple[Series, ...]
    # A band from the first to the second figure around the line (the step time's spread).
    band: tuple[Callable[[Point], float | None], Callable[[Point], float | None]] | None = None
    whole: bool = False  # counts: the axis ends at a whole number


def _count(value: float) -> str:
    return number_text(value)


CHARTS = (
    Chart(
        "time",
        "Step time: median, and the middle half of the timed runs (25th to 75th percentile)",
        duration_text,
        (Series("median_s", "median", lambda p: p.median_s),),
        band=(lambda p: p.p25_s, lambda p: p.p75_s),
    ),
    Chart(
        "flops",
        "FLOPs per step (XLA's count)",
        lambda v: si_text(v, "FLOP"),
        (Series("flops", "flops", lambda p: p.flops),),
    ),
    Chart(
        "bytes",
        "Bytes accessed per step (XLA's count)",
        size_text,
        (Series("bytes_accessed", "bytes accessed", lambda p: p.bytes_accessed),),
    ),
    Chart(
        "memory",
        "Peak device memory during the step",
        size_text,
        (
            Series(
                "peak_bytes",
                "peak memory",
                lambda p: float(p.peak_bytes) if p.peak_bytes is not None else None,
            ),
        ),
    ),
    Chart(
        "moves",
        "Lines with an implicit transfer (solid), and collectives per step (dashed)",
        _count,
        (
            Series("implicit_lines", "implicit transfer lines", lambda p: float(p.implicit_lines)),
            Series(
                "collectives",
                "collectives per step",
                lambda p: float(p.collectives) if p.collectives is not None else None,
            ),
        ),
        whole=True,
    ),
)


# Data in a <script> element stays data: "</script>" would end the element, and "<!--<script>"
# would keep the next "</script>" from ending it (HTML's "script data double escaped" state), so
# the page's own script would be read as part of the data. JSON writes each as an escape; with
# ensure_ascii, U+2028, U+2029 and every other character past ASCII are escapes already.
_IN_SCRIPT = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def render_page(history: History) -> str:
    """The whole page: summary table, each region's charts, every run, the data for the script."""
    runs = history.runs
    labels: dict[str, Labels] = {}
    sections = [
        _region_section(i, region, history, labels) for i, region in enumerate(history.regions)
    ]
    title = f"transfer-gate history{': ' + history.repository if history.repository else ''}"
    data = {
        "runs": [
            [
                visible(_short(r.commit)),
                _commit_url(history, r.commit),
                visible(r.commit_date or r.run_at),
                r.passed,
            ]
            for r in runs
        ],
        "machines": [visible(m.describe()) for m in history.machines],
        # Each region's points once, for all its charts: their runs, statuses and machines.
        "regions": [
            {
                "runs": [p.run for p in region.points],
                "statuses": [p.status for p in region.points],
                "machines": [-1 if p.machine is None else p.machine for p in region.points],
            }
            for region in history.regions
        ],
        "labels": labels,
    }
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=True).translate(_IN_SCRIPT)
    first, last = runs[0], runs[-1]
    return "".join(
        [
            '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
            f"<title>{_e(title)}</title>\n<style>{_asset('history_page.css')}</style>\n</head>\n<body>\n",
            f"<header><h1>{_e(title)}</h1>\n<p>",
            f"{counted(len(runs), 'run')} from {_commit_link(history, first.commit)} "
            f"({_e(_day(first.commit_date or first.run_at))}) to "
            f"{_commit_link(history, last.commit)} ({_e(_day(last.commit_date or last.run_at))}), "
            f"{counted(len({r.classname for r in history.regions}), 'region')}, "
            f"{counted(len(history.machines), 'machine')}; "
            f"{_e(history.branches or 'the runs given')}. Written by transfer-gate "
            f"{_e(__version__)}. Hover a chart, or focus it with Tab and move with the arrow "
            "keys, to read each commit's figures.</p></header>\n<main>\n",
            _summary(history),
            *sections,
            _runs_table(history),
            "</main>\n",
            '<div id="tip" role="status" aria-live="polite" hidden></div>\n',
            f'<script type="application/json" id="history-data">{payload}</script>\n',
            f"<script>{_asset('history_page.js')}</script>\n</body>\n</html>\n",
        ]
    )


# --- the summary ---------------------------------------------------------------------------------


def _summary(history: History) -> str:
    rows = []
    for i, region in enumerate(history.regions):
        latest = region.points[-1]
        run = history.runs[latest.run]
        cells = [
            f'<th scope="row"><a href="#region-{i}">{_breakable(series_name(region, history))}'
            "</a></th>",
            f'<td class="{latest.status}">{_status(latest.status)} at '
            f"{_commit_link(history, run.commit)}</td>",
            f"<td>{_figure(latest.median_s, duration_text)}</td>",
            f"<td>{_e(_window_change(region))}</td>",
            f"<td>{_figure(latest.flops, lambda v: si_text(v, 'FLOP'))}</td>",
            f"<td>{_figure(latest.bytes_accessed, size_text)}</td>",
            f"<td>{_figure(latest.peak_bytes, size_text)}</td>",
            f"<td>{latest.implicit_lines}</td>",
            f"<td>{_figure(latest.collectives, _count)}</td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>\n")
    return (
        '<section aria-labelledby="summary-title"><h2 id="summary-title">Summary</h2>\n'
        "<p>Each region's newest figures; the step time's change is its newest median over "
        "its first on the same machine in this window.</p>\n"
        '<div class="scroll"><table class="summary"><thead><tr><th scope="col">Region</th>'
        '<th scope="col">Newest run</th><th scope="col">Step time</th>'
        '<th scope="col">Change over the window</th><th scope="col">FLOPs</th>'
        '<th scope="col">Bytes accessed</th><th scope="col">Peak memory</th>'
        '<th scope="col">Implicit transfer lines</th><th scope="col">Collectives per step</th>'
        f"</tr></thead>\n<tbody>\n{''.join(rows)}</tbody></table></div></section>\n"
    )


def _window_change(region: RegionSeries) -> str:
    """``x1.23 over 12 runs``: the newest median over the first of the newest machine's."""
    latest = region.points[-1]
    machine = newest_machine(region.points)
    same = [p for p in region.points if p.machine == machine and p.median_s is not None]
    if latest.median_s is None or len(same) < 2:
        return "not measured" if latest.median_s is None else "one run on this machine"
    first = same[0].median_s
    assert first is not None
    over = f"over {counted(len(same), 'run')}"
    ratio = latest.median_s / first if first > 0 else math.inf
    if not math.isfinite(ratio):  # from zero, or past the largest float: said as figures
        return f"from {duration_text(first)} to {duration_text(latest.median_s)} {over}"
    return f"x{ratio:.2f} {over}"


# --- a region's charts ---------------------------------------------------------------------------


def _region_section(
    index: int, region: RegionSeries, history: History, labels: dict[str, Labels]
) -> str:
    charts = []
    for chart in CHARTS:
        if not any(s.value(p) is not None for s in chart.series for p in region.points):
            continue  # peak memory where no backend measures it, say
        chart_id = f"c{index}-{chart.key}"
        charts.append(_chart(chart_id, index, chart, region, history, labels))
    machines = sorted({p.machine for p in region.points if p.machine is not None})
    machine_text = "; ".join(f"machine {m + 1}: {history.machines[m].describe()}" for m in machines)
    return (
        f'<section class="region" id="region-{index}" aria-labelledby="region-{index}-title">\n'
        f'<h2 id="region-{index}-title">{_e(series_name(region, history))}</h2>\n'
        f"<p>{_e(region.policy)}; {counted(len(region.points), 'run')}"
        f"{'; ' + _e(machine_text) if machine_text else ''}.</p>\n"
        f'<div class="charts">{"".join(charts)}</div>\n'
        f'<details data-region="{index}"><summary>Every figure of {_e(region.classname)} '
        'as a table</summary><div class="scroll"></div></details>\n</section>\n'
    )


def _chart(  # noqa: PLR0917  # a chart's parts, each named at the one call
    chart_id: str,
    region_index: int,
    chart: Chart,
    region: RegionSeries,
    history: History,
    labels: dict[str, Labels],
) -> str:
    n = len(history.runs)
    values = [v for s in chart.series for p in region.points if (v := s.value(p)) is not None]
    if chart.band is not None:
        values += [v for f in chart.band for p in region.points if (v := f(p)) is not None]
    lo, hi = _axis(values, whole=chart.whole)

    def x(run: int) -> float:
        return LEFT + (PLOT_W / 2 if n == 1 else PLOT_W * run / (n - 1))

    def y(value: float) -> float:
        return TOP + PLOT_H * (1 - fraction_between(value, lo, hi))

    parts = [
        f'<line class="axis" x1="{LEFT}" y1="{TOP + PLOT_H}" x2="{LEFT + PLOT_W}" '
        f'y2="{TOP + PLOT_H}"/>',
        f'<text class="tick" x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">'
        f"{_e(chart.text(hi))}</text>",
        f'<text class="tick" x="{LEFT - 6}" y="{TOP + PLOT_H}" text-anchor="end">'
        f"{_e(chart.text(lo))}</text>",
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 6}">'
        f"{_e(_short(history.runs[0].commit))}</text>",
        f'<text class="tick" x="{LEFT + PLOT_W}" y="{HEIGHT - 6}" text-anchor="end">'
        f"{_e(_short(history.runs[-1].commit))}</text>",
    ]
    stretches = _stretches(region.points)
    for stretch in stretches[1:]:
        at = x(stretch[0].run)
        parts.append(
            f'<line class="machine" x1="{at:.1f}" y1="{TOP}" x2="{at:.1f}" y2="{TOP + PLOT_H}">'
            f"<title>another machine from {_e(_short(history.runs[stretch[0].run].commit))}"
            "</title></line>"
        )
    if chart.band is not None:
        low_of, high_of = chart.band
        for stretch in stretches:
            for run in _runs_of_values(stretch, low_of, high_of):
                upper = " L".join(f"{x(p.run):.1f},{y(high_of(p) or 0):.1f}" for p in run)
                lower = " L".join(f"{x(p.run):.1f},{y(low_of(p) or 0):.1f}" for p in reversed(run))
                parts.append(f'<path class="band" d="M{upper} L{lower} Z"/>')
    for number, series in enumerate(chart.series):
        labels[f"{chart_id}-{number}"] = _labels(
            [None if (v := series.value(p)) is None else chart.text(v) for p in region.points]
        )
        for stretch in stretches:
            for run in _runs_of_values(stretch, series.value):
                # A flat stretch is drawn by its ends: the points between are on that line.
                drawn = _corners(run, series.value)
                path = " L".join(f"{x(p.run):.1f},{y(series.value(p) or 0):.1f}" for p in drawn)
                parts.append(
                    f'<path class="line s{number}" data-series="{series.key}" '
                    f'data-label="{_e(series.label)}" data-runs="'
                    f'{_ranges([p.run for p in drawn])}" d="M{path}"/>'
                )
    for point in region.points:
        if point.status != "passed":
            value = chart.series[0].value(point)
            at_y = y(value) if value is not None else TOP
            px = x(point.run)
            parts.append(
                f'<path class="failed" d="M{px - 4:.1f},{at_y - 4:.1f} l8,8 m0,-8 l-8,8">'
                f"<title>{_status(point.status)} at {_e(_short(history.runs[point.run].commit))}"
                "</title></path>"
            )
    parts.append('<circle class="cursor" r="5" cx="-10" cy="-10"/>')
    caption = _caption(chart, region, history)
    return (
        f'<figure><figcaption id="{chart_id}-caption"><strong>{_e(chart.title)}</strong>. '
        f"{_e(caption)}</figcaption>\n"
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'tabindex="0" aria-labelledby="{chart_id}-caption" data-lo="{lo!r}" data-hi="{hi!r}" '
        f'data-runs="{n}" data-series="{len(chart.series)}" data-region="{region_index}" '
        f'data-left="{LEFT}" data-top="{TOP}" data-width="{PLOT_W}" data-height="{PLOT_H}">'
        f"{''.join(parts)}</svg></figure>\n"
    )


def _caption(chart: Chart, region: RegionSeries, history: History) -> str:
    """The chart in words: each line's first and newest figure, its highest and where."""
    said = []
    for series in chart.series:
        measured = [(p, v) for p in region.points if (v := series.value(p)) is not None]
        if not measured:
            said.append(f"{series.label}: not measured")
            continue
        (first, a), (_, b) = measured[0], measured[-1]
        top, peak = max(measured, key=lambda item: item[1])
        said.append(
            f"{series.label} {chart.text(a)} at {_short(history.runs[first.run].commit)}, "
            f"now {chart.text(b)}, highest {chart.text(peak)} at "
            f"{_short(history.runs[top.run].commit)}"
        )
    failed = sum(1 for p in region.points if p.status != "passed")
    changes = len(_stretches(region.points)) - 1
    tail = [counted(failed, "failed run")] if failed else []
    if changes:
        tail.append(f"the machine changed {counted(changes, 'time')}")
    return "; ".join(said + tail) + "."


# A series' texts, each distinct one once: [the texts, each point's index into them or -1].
Labels = tuple[list[str], list[int]]


def _labels(texts: Sequence[str | None]) -> Labels:
    distinct: dict[str, int] = {}
    at = [-1 if t is None else distinct.setdefault(t, len(distinct)) for t in texts]
    return list(distinct), at


def _corners(points: Sequence[Point], value: Callable[[Point], float | None]) -> list[Point]:
    """The points a line must pass through: each but those between two of the same figure."""
    return [
        p
        for i, p in enumerate(points)
        if i in {0, len(points) - 1} or not value(points[i - 1]) == value(p) == value(points[i + 1])
    ]


def _ranges(runs: Sequence[int]) -> str:
    """``0-41,57,60-99``: consecutive runs as a range, for the page's script to expand."""
    spans: list[list[int]] = []
    for run in runs:
        if spans and run == spans[-1][1] + 1:
            spans[-1][1] = run
        else:
            spans.append([run, run])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _stretches(points: Sequence[Point]) -> list[list[Point]]:
    """The points cut where the machine changes: each stretch is drawn on its own."""
    stretches: list[list[Point]] = []
    machine: int | None = None
    for point in points:
        # A run that names no machine (it errored before a worker said) measured nothing to
        # draw: it stays in the stretch it falls in, and the first machine named is its.
        if stretches and (point.machine is None or machine is None or point.machine == machine):
            stretches[-1].append(point)
            machine = point.machine if machine is None else machine
        else:
            stretches.append([point])
            machine = point.machine
    return stretches


def _runs_of_values(
    points: Sequence[Point], *figures: Callable[[Point], float | None]
) -> list[list[Point]]:
    """The points cut where a figure is missing: no line is drawn through an unmeasured run."""
    runs: list[list[Point]] = [[]]
    for point in points:
        if all(f(point) is not None for f in figures):
            runs[-1].append(point)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _axis(values: Sequence[float], *, whole: bool) -> tuple[float, float]:
    """The y axis: from zero (a change reads at its true size) to a little above the highest;
    for counts, to the next whole number above it. Zero is on it, whatever the sign of the
    figures, and its ends are finite however near the float limit they lie."""
    if not values:
        return 0.0, 1.0
    lo, top = min(0.0, *values), max(0.0, *values)
    if whole:
        return lo, float(math.floor(top) + 1)
    if top == 0:
        return lo, 0.0 if lo < 0 else 1.0
    return lo, min(top * 1.05, sys.float_info.max)


# --- every run -----------------------------------------------------------------------------------


def _runs_table(history: History) -> str:
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>{_commit_link(history, r.commit)}</td>"
        f"<td>{_e(r.commit_date or '')}</td><td>{_e(r.run_at)}</td><td>{_e(r.ref or '')}</td>"
        f'<td class="{"passed" if r.passed else "failed"}">'
        f"{'passed' if r.passed else 'failed'}</td><td>{_e(r.file)}</td></tr>\n"
        for i, r in enumerate(history.runs)
    )
    return (
        '<section aria-labelledby="runs-title"><h2 id="runs-title">Every run</h2>\n'
        '<div class="scroll"><table id="runs"><thead><tr><th scope="col">#</th>'
        '<th scope="col">Commit</th><th scope="col">Commit date</th><th scope="col">Run at</th>'
        '<th scope="col">Branch</th><th scope="col">Result</th><th scope="col">Report</th>'
        f"</tr></thead>\n<tbody>\n{rows}</tbody></table></div></section>\n"
    )


# --- words ---------------------------------------------------------------------------------------


def _e(text: str) -> str:
    """Text from a report as the page shows it: markup escaped, control characters (bidi
    overrides, line breaks) spelled out by `visible`."""
    return html.escape(visible(text), quote=True)


def _breakable(name: str) -> str:
    """A region's name escaped, free to wrap after each ``.`` and ``_`` (``train_<wbr>step``),
    so that the summary fits a narrow window without a scrollbar."""
    return _e(name).replace(".", ".<wbr>").replace("_", "_<wbr>")


def _short(commit: str) -> str:
    return commit[:7]


def _day(stamp: str) -> str:
    return stamp[:10]


def _status(status: str) -> str:
    return {"passed": "passed", "failed": "failed", "error": "error"}[status]


def _figure(value: float | None, text: Callable[[float], str]) -> str:
    return "not measured" if value is None else _e(text(value))


def commit_url(repository: str | None, commit: str) -> str | None:
    """The commit's page, for a repository on a forge with GitHub's ``/commit/SHA`` layout."""
    return f"{repository}/commit/{commit}" if repository else None


def _commit_url(history: History, commit: str) -> str | None:
    return commit_url(history.repository, commit)


def _commit_link(history: History, commit: str) -> str:
    url = _commit_url(history, commit)
    short = _e(_short(commit))
    return f'<a href="{_e(url)}"><code>{short}</code></a>' if url else f"<code>{short}</code>"


# --- what the page carries -----------------------------------------------------------------------


@cache
def _asset(name: str) -> str:
    """The page's style or script, shipped beside this module and inlined into every page."""
    return resources.files("gate.report").joinpath(name).read_text(encoding="utf-8")
