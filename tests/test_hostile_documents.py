"""Every reader survives every document a pull request controls (issue 54): the stored baseline
`run` reads, the shards' reports `merge` reads, the reports `history` reads.

Through the real CLI. ``hostile-inputs/baselines/<case>.json`` and
``hostile-inputs/json-reports/<case>.json`` are edits, each to one real document: a lone surrogate
(the JSON escape ``"\\ud800"``, what ``json.dumps`` writes), numbers at and past the float
limit, and text that means something to a web page or a job summary. Each edit names its key
as the gate names keys in its errors, so the refusal can be checked to name it. A document is
either refused in one line (exit 2, naming the file and the key, and `run` still writes its
report) or read, and then the history page draws only finite points, keeps its embedded data
data (checked in Chromium), and the job summary's trend shows the text as text, within
GitHub's limit for a step's summary.
"""

from __future__ import annotations

import copy
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from browser_helpers import probed, rendered
from cli_helpers import TESTS, make_repo, run_gate
from git_helpers import commit, init
from history_reports import stepped, write_reports
from hostile_text import RAW_CONTROL, safe_for_a_log
from test_hostile_inputs import POLICY  # the same small leaky region

from gate.report.github import MAX_SUMMARY_BYTES

CORPUS = TESTS / "hostile-inputs"
STEPS = (TESTS / "baseline-files" / "history" / "steps.py").read_text(encoding="utf-8")
BASELINE = "policies/transfer-gate-baseline.json"
KEY = "correct that key, or "
SURROGATE = "half of a UTF-16 pair, which no UTF-8 text can hold"
# msgspec's bound, and the number as an error shows it: its first 57 characters.
TOO_LARGE = f"expected a whole number <= 9223372036854775807, got 1{'0' * 56}..."


def _case(kind: str, name: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((CORPUS / kind / f"{name}.json").read_text(encoding="utf-8"))
    return case


# A key as the gate's errors name it: ``suites[0].regions[0].machine["p.leaky"]``.
_STEP = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def _set(document: Any, key: str, value: object) -> None:
    steps: list[str | int] = []
    at = 0
    while at < len(key):
        found = _STEP.match(key, at)
        assert found is not None, f"not a key: {key[at:]!r}"
        name, index, quoted = found.groups()
        steps.append(int(index) if index is not None else name or json.loads(quoted))
        at = found.end()
    for step in steps[:-1]:
        document = document[step]
    document[steps[-1]] = copy.deepcopy(value)


# --- the stored baseline, read by `run` ----------------------------------------------------------

BASELINES = {
    # case: the key refused, and why
    "lone-surrogate": 'timing["p.leaky"].machine.processor: the lone surrogate \\ud800 '
    f"({SURROGATE})",
    "lone-surrogate-key": 'timing["p.\\udc00"]: the key holds the lone surrogate \\udc00 '
    f"({SURROGATE})",
    "huge-count": f'timing["p.leaky"].cost.functions[0].runs: {TOO_LARGE}',
}


def test_every_case_is_in_a_table() -> None:
    assert sorted(p.stem for p in (CORPUS / "baselines").iterdir()) == sorted(BASELINES)
    assert sorted(p.stem for p in (CORPUS / "json-reports").iterdir()) == sorted(REPORTS)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_a_hostile_baseline_is_one_error_line_and_a_report(tmp_path: Path, name: str) -> None:
    repo = make_repo(tmp_path / "repo", {"steps.py": STEPS, "policies/p.yaml": POLICY})
    baseline = json.loads(
        (TESTS / "baseline-files" / "history" / "v4-machine.json").read_text(encoding="utf-8")
    )
    for key, value in _case("baselines", name)["edits"].items():
        _set(baseline, key, value)
    (repo / BASELINE).write_text(json.dumps(baseline), encoding="utf-8")
    done = run_gate(repo, "run", "--json", "reports/map.json")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: {BASELINE}: {BASELINES[name]}; {KEY}regenerate it with `transfer-gate baseline`"
    ]
    error = done.testcase("baseline").find("error")
    assert error is not None
    assert BASELINES[name] in (error.get("message") or ""), done
    assert json.loads((repo / "reports" / "map.json").read_text(encoding="utf-8"))


# --- reports, read by `merge` and `history` ------------------------------------------------------

R = "suites[0].regions[0]"
REPORTS: dict[str, str | None] = {
    # case: the key refused, and why; None where the report is read
    "lone-surrogate": f"{R}.machine.processor: the lone surrogate \\ud800 ({SURROGATE})",
    "lone-surrogate-key": f'{R}.machine["\\udc00"]: the key holds the lone surrogate \\udc00 '
    f"({SURROGATE})",
    "surrogate-pair": None,
    "hostile-text": None,
    "first-median-zero": None,
    "medians-at-the-float-limit": None,
    "figures-near-the-float-limit": None,
    "huge-runs-per-step": f"{R}.cost.communication.by_kind[0].runs_per_step: {TOO_LARGE}",
    "huge-peak-bytes": f"{R}.cost.peak_memory[0].peak_bytes: {TOO_LARGE}",
}
MERGE_FIX = (
    "run that shard again: merge takes the reports `transfer-gate run --json` wrote, of one gate "
    "version"
)
HISTORY_FIX = "give the JSON reports `transfer-gate run --json` wrote, of one repository and suite"
RUNS = 3  # the history's runs: medians of 1, 1.8 and 3 ms
# The middle run's median: 2 ms would sit on the sparkline's half-step between two blocks,
# where the template's real timings (scaled to it) decide by a rounding error.
MEDIANS_MS = (1.0, 1.8, 3.0)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real JSON report of one commit: region ``p.leaky``, passing."""
    repo = init(tmp_path_factory.mktemp("report"))
    commit(repo, {"steps.py": STEPS, "policies/p.yaml": POLICY}, "one")
    done = run_gate(repo, "run", "--json", "reports/map.json")
    assert done.returncode == 1, done  # leaky's transfer
    report: dict[str, Any] = json.loads((repo / "reports/map.json").read_text(encoding="utf-8"))
    report["passed"] = True
    report["suites"][0]["regions"][0]["status"] = "passed"
    return report


def _reports(template: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The history's runs, each with the case's edits for it (``*``: for every run)."""
    edits = _case("json-reports", name)["edits"]
    reports = []
    for index in range(RUNS):
        report = stepped(template, index, median=1e-3 * MEDIANS_MS[index])
        for key, value in {**edits.get("*", {}), **edits.get(str(index), {})}.items():
            _set(report, key, value)
        reports.append(report)
    return reports


def _history_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"steps.py": STEPS, "policies/p.yaml": POLICY})


# `merge` reads a shard's figures only to copy them: only what it refuses is its to test.
@pytest.mark.parametrize("name", sorted(n for n, refused in REPORTS.items() if refused))
def test_merge_refuses_a_hostile_shard_in_one_line(
    template: dict[str, Any], tmp_path: Path, name: str
) -> None:
    # The first run as two shards, every edit for it in each.
    shard = json.dumps(_reports(template, name)[0])
    (tmp_path / "a.json").write_text(shard, encoding="utf-8")
    (tmp_path / "b.json").write_text(shard, encoding="utf-8")
    done = run_gate(tmp_path, "merge", "out.json", "a.json", "b.json", process=True)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"error: a.json: {REPORTS[name]}; {KEY}{MERGE_FIX}"]
    assert not (tmp_path / "out.json").exists()


# A number in an SVG attribute, or a word where one should be (nan, inf).
_NUMBER = re.compile(r"[-+]?(?:[0-9.]+(?:e[-+]?[0-9]+)?|[A-Za-z]{2,})")


class _Page(HTMLParser):
    """The page's chart coordinates and axis ends, and the text of its embedded data."""

    def __init__(self) -> None:
        super().__init__()
        self.coordinates: list[str] = []
        self.axes: list[str] = []
        self.data = ""
        self.in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        for key in ("d", "x1", "x2", "y1", "y2", "cx", "cy"):
            self.coordinates += _NUMBER.findall(found.get(key, ""))
        for key in ("data-lo", "data-hi"):
            self.axes += _NUMBER.findall(found.get(key, ""))
        self.in_data = tag == "script" and found.get("id") == "history-data"

    def handle_data(self, data: str) -> None:
        if self.in_data:
            self.data += data


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_history_reads_a_hostile_report_or_refuses_it_in_one_line(
    template: dict[str, Any], tmp_path: Path, name: str
) -> None:
    repo = _history_repo(tmp_path)
    write_reports(repo / "main", _reports(template, name))
    done = run_gate(
        repo, "history", "main", "--every-branch", "--out", "site", "--check", "--markdown",
        "trend.md", "--page-url", "https://octo.github.io/proj/", process=True,
    )  # fmt: skip
    refused = REPORTS[name]
    if refused is not None:
        assert done.returncode == 2, done
        assert done.stderr.splitlines() == [
            f"error: main/run-000.json: {refused}; {KEY}{HISTORY_FIX}"
        ]
        assert not (repo / "site").exists()
        return
    assert done.returncode == 0, done
    page = (repo / "site" / "index.html").read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(page), "a raw control or bidi character in the page"
    parsed = _Page()
    parsed.feed(page)
    # Every coordinate a number within the chart, every axis end a finite one: no nan, no inf.
    assert parsed.coordinates
    assert parsed.axes
    for number in parsed.coordinates:
        assert -20 <= float(number) <= 800, number
    for number in parsed.axes:
        assert math.isfinite(float(number)), number
    data = json.loads(parsed.data)
    assert len(data["runs"]) == RUNS
    trend = (repo / "trend.md").read_text(encoding="utf-8")
    safe_for_a_log("trend.md", trend)


def test_a_first_median_of_zero_is_a_change_from_zero(
    template: dict[str, Any], tmp_path: Path
) -> None:
    repo = _history_repo(tmp_path)
    write_reports(repo / "main", _reports(template, "first-median-zero"))
    done = run_gate(repo, "history", "main", "--every-branch", "--out", "site")
    assert done.returncode == 0, done
    assert "<td>from 0 s to 3.00 ms over 3 runs</td>" in (repo / "site/index.html").read_text()


def test_medians_at_the_float_limit_are_drawn_to_scale(
    template: dict[str, Any], tmp_path: Path
) -> None:
    repo = _history_repo(tmp_path)
    write_reports(repo / "main", _reports(template, "medians-at-the-float-limit"))
    done = run_gate(
        repo, "history", "main", "--every-branch", "--out", "site", "--markdown", "trend.md"
    )
    assert done.returncode == 0, done
    # The highest, the lowest, and 3 ms halfway between them.
    row = (repo / "trend.md").read_text().splitlines()[-1]
    assert row == "| p.leaky | `█▁▅` | 1.70e308 s | 3.00 ms | 3 |"
    page = (repo / "site/index.html").read_text()
    [line] = re.findall(r'<path class="line s0" data-series="median_s"[^>]* d="([^"]+)"', page)
    # The axis from -1.7e308 to 1.05 x 1.7e308 over the plot's 132 units from y=12 down: the
    # highest near the top, the lowest at the bottom, 3 ms 0.49 of the way up.
    assert line == "M76.0,15.2 L392.0,144.0 L708.0,79.6"


# --- text that means something to the page or the job summary ------------------------------------

# Put last in the page: what a keyboard user reads on the first chart, and a region's table.
PROBE = """<pre id="probe"></pre><script>
window.addEventListener("load",function(){
var out={},tip=document.getElementById("tip"),svg=document.querySelector("svg.chart");
svg.focus();out.tip=tip.hidden?null:tip.textContent;
var details=document.querySelector("details[data-region]");
details.addEventListener("toggle",function(){
out.rows=details.querySelectorAll("tbody tr").length;out.table=details.textContent;
out.errors=window.__errors;document.getElementById("probe").textContent=JSON.stringify(out);});
details.open=true;
});</script>"""


class _Probe(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self.inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.inside = tag == "pre" and ("id", "probe") in attrs

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.text += data


def test_hostile_text_stays_data_in_the_page_in_chromium(
    template: dict[str, Any], tmp_path: Path
) -> None:
    repo = _history_repo(tmp_path)
    write_reports(repo / "main", _reports(template, "hostile-text"))
    done = run_gate(repo, "history", "main", "--every-branch", "--out", "site")
    assert done.returncode == 0, done
    opened = tmp_path / "index.html"
    opened.write_text(probed((repo / "site/index.html").read_text(), PROBE))
    found = _Probe()
    found.feed(rendered(opened, tmp_path / "profile"))
    assert found.text, "the probe never ran: the page's scripts stopped parsing"
    probe = json.loads(found.text)
    assert probe["errors"] == []
    assert probe["rows"] == RUNS
    # The text is shown as text, its controls spelled out: the processor on the tip, the
    # commit and its date in the table.
    for shown in (probe["tip"], probe["table"]):
        assert "<!--<script>x</script> ## ![i](https://example.invalid/i.png)" in shown
        assert "\\u202e\\u2066rtl\\u2069 \\u2028 \\x1b[2J\\x0a::error file" in shown
        assert not RAW_CONTROL.search(shown), shown


def test_hostile_text_in_the_trend_is_escaped_as_the_job_summary_escapes_it(
    template: dict[str, Any], tmp_path: Path
) -> None:
    repo = _history_repo(tmp_path)
    write_reports(repo / "main", _reports(template, "hostile-text"))
    done = run_gate(
        repo, "history", "main", "--every-branch", "--out", "site", "--markdown", "trend.md"
    )
    assert done.returncode == 0, done
    trend = (repo / "trend.md").read_text(encoding="utf-8")
    safe_for_a_log("trend.md", trend)
    lines = trend.splitlines()
    # Our heading and table; the suite's name is one cell's text (and the hostile branch
    # name, drawn with --every-branch, no heading of its own).
    assert [x for x in lines if x.lstrip().startswith("#")] == [
        "### Step time over every branch's recent runs, a line each"
    ]
    [row] = lines[4:]
    # As the gate's own summary writes a message: Markdown's signs escaped (so no HTML, image,
    # link or emphasis), the line breaks one space, the controls spelled out.
    assert row == (
        "| \\<!--\\<script\\>x\\</script\\> ## !\\[i\\](https://example.invalid/i.png) "
        "\\<img src=x onerror=alert(1)\\> \\*a\\* \\_b\\_ \\[l\\](javascript:alert(1)) \\| c \\\\ "
        "\\&amp; \\u202e\\u2066rtl\\u2069 \\x1b\\[2J ::error file=README.md,line=1::INJECTED "
        "##\\[error\\]OLD.leaky | `▁▄█` | 1.00 ms | 3.00 ms | 3 |"
    )


def test_the_trend_is_cut_to_fit_a_steps_job_summary(
    template: dict[str, Any], tmp_path: Path
) -> None:
    repo = _history_repo(tmp_path)
    report = stepped(template, 0, median=1e-3)
    [region] = report["suites"][0]["regions"]
    names = [f"{'r' * 2000}{i:04d}" for i in range(600)]  # 1.2 MB of names
    report["suites"][0]["regions"] = [
        {**region, "name": name, "classname": f"p.{name}"} for name in names
    ]
    write_reports(repo / "main", [report])
    done = run_gate(
        repo, "history", "main", "--every-branch", "--out", "site", "--markdown", "trend.md"
    )
    assert done.returncode == 0, done
    trend = (repo / "trend.md").read_bytes()
    assert MAX_SUMMARY_BYTES - 4096 < len(trend) <= MAX_SUMMARY_BYTES
    text = trend.decode("utf-8")
    rows = [x for x in text.splitlines() if x.startswith("| p.r")]
    assert 0 < len(rows) < len(names)
    assert text.endswith(
        "_Trend cut to fit GitHub's limit of 1024 KiB per step: the page (index.html) and "
        f"history.json hold {len(names) - len(rows)} more regions._\n"
    ), text[-300:]
