"""``transfer-gate history``: reports lined up by commit, ``history.json``, bad input, drift.

Real reports come from real runs on a throwaway repository of three commits; the drift cases
need tens of runs, so they are made from one real report (`stepped`), each figure set as a
run on that commit would have measured it.
"""

from __future__ import annotations

import json
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import msgspec
import pytest
from browser_helpers import probed, rendered
from cli_helpers import ROOT, make_repo, run_gate
from git_helpers import commit, git, init
from history_reports import stepped, write_reports
from result_samples import policy_yaml, region_yaml

from gate.cli.exit_codes import ExitCode
from gate.report.history_series import History
from gate.report.history_summary import sparkline
from gate.text import duration_text

STEPS = """
import jax
import numpy as np

SCALE = 1.0


@jax.jit
def step(x):
    return x * SCALE + 1.0


def inputs():
    return (jax.device_put(np.zeros(64, np.float32)),)


def leaky(x):
    return step(np.zeros(64, np.float32))
"""
POLICY = policy_yaml(region_yaml("clean", "step"), region_yaml("leaky", "leaky"))
DATES = ("2026-03-01T10:00:00+01:00", "2026-03-02T10:00:00+01:00", "2026-03-03T10:00:00+01:00")


# The three commits' steps: the second does twice the FLOPs of the first.
VERSIONS = (
    STEPS,
    STEPS.replace("x * SCALE + 1.0", "x * SCALE * 2.0 + 1.0"),
    STEPS.replace("+ 1.0", "+ 2.0"),
)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Three commits of main, a day apart, each run once."""
    repo = init(tmp_path_factory.mktemp("history"))
    git(repo, "remote", "add", "origin", "https://github.com/octo/proj.git")
    shas = []
    for i, (date, steps) in enumerate(zip(DATES, VERSIONS, strict=True)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GIT_COMMITTER_DATE", date)
            shas.append(commit(repo, {"policies/p.yaml": POLICY, "mod.py": steps}, f"commit {i}"))
        done = run_gate(repo, "run", "--json", f"reports/run-{i}.json")
        assert done.returncode == ExitCode.REGION_FAILED, done  # leaky fails every run
    return repo, shas


def reports_of(repo: Path) -> list[dict]:
    return [json.loads((repo / f"reports/run-{i}.json").read_text()) for i in range(3)]


def test_history_lines_the_reports_up_in_the_order_given_with_their_figures(
    three_runs: tuple[Path, list[str]],
) -> None:
    repo, shas = three_runs
    # The folder's files by name: the order main's history job stores them in.
    done = run_gate(repo, "history", "reports", "--out", "site")
    assert done.returncode == ExitCode.OK, done
    assert done.stdout == (
        "wrote site/index.html and site/history.json: 3 runs, 2 regions, 1 machine; "
        "main's recent runs\n"
    )
    data = json.loads((repo / "site/history.json").read_text())
    published = json.loads((ROOT / "docs/schemas/history.schema.json").read_text())
    jsonschema.Draft202012Validator(published).validate(data)
    history = msgspec.convert(data, History)  # the declared schema, every key checked
    assert [r.commit for r in history.runs] == shas
    assert history.repository == "https://github.com/octo/proj"
    reports = reports_of(repo)
    for series in history.regions:
        assert [p.run for p in series.points] == [0, 1, 2]
        for point, report in zip(series.points, reports, strict=True):
            [region] = [
                r for s in report["suites"] for r in s["regions"]
                if r["classname"] == series.classname
            ]  # fmt: skip
            assert point.status == region["status"]
            assert point.median_s == region["timing"]["median_s"]
            assert (point.p25_s, point.p75_s) == (
                region["timing"]["p25_s"],
                region["timing"]["p75_s"],
            )
            assert point.samples == tuple(region["timing_samples"])
            assert point.flops == region["cost"]["totals"]["flops"]
            assert point.bytes_accessed == region["cost"]["totals"]["bytes_accessed"]
            assert point.implicit_lines == len(
                {(t["path"], t["line"]) for t in region["transfers"] if t["kind"] == "implicit"}
            )
            assert history.machines[point.machine or 0] == msgspec.convert(
                region["machine"], type(history.machines[0])
            )
    flops = [p.flops for p in history.regions[0].points]
    assert flops[1] == 2 * flops[0]  # the second commit's step: twice the work
    leaky = next(r for r in history.regions if r.name == "leaky")
    assert {p.status for p in leaky.points} == {"failed"}
    assert all(p.implicit_lines == 1 for p in leaky.points)


def test_the_newest_run_is_the_last_given_whatever_date_a_report_states(
    three_runs: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, shas = three_runs
    reports = reports_of(repo)
    # A report is written by the code it measures: its dates are that code's word.
    reports[0]["run"]["commit_date"] = reports[0]["run"]["run_at"] = "2099-12-31T23:59:59+00:00"
    write_reports(tmp_path / "kept", reports)
    done = run_gate(repo, "history", str(tmp_path / "kept"), "--out", str(tmp_path / "site"))
    assert done.returncode == ExitCode.OK, done
    history = json.loads((tmp_path / "site/history.json").read_text())
    assert [r["commit"] for r in history["runs"]] == shas
    assert history["runs"][0]["commit_date"] == "2099-12-31T23:59:59+00:00"  # shown as stated


# --- one real report, stepped ---------------------------------------------------------------------


@pytest.fixture
def template(three_runs: tuple[Path, list[str]]) -> dict:
    """A passing report of one region, ``p.clean``."""
    report = reports_of(three_runs[0])[0]
    report["suites"][0]["regions"] = [
        r for r in report["suites"][0]["regions"] if r["name"] == "clean"
    ]
    report["passed"] = True
    return report


def drift_repo(tmp_path: Path, drift: str = "") -> Path:
    return make_repo(tmp_path, {"policies/p.yaml": POLICY + drift})


def test_ten_small_slowdowns_drift_though_no_report_failed(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path)
    # Each run 8% slower than the last: every pull request within a 1.1x bound, 2x in all.
    reports = [stepped(template, i, median=1e-3 * 1.08**i) for i in range(10)]
    reports[6] = stepped(template, 6, median=1e-3 * 1.08**5 * 1.3)  # the biggest step up
    reports[7] = stepped(template, 7, median=1e-3 * 1.08**5 * 1.3 * 1.01)
    write_reports(repo / "main", reports)
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.REGION_FAILED, done
    lines = done.stdout.splitlines()
    [drift] = [line for line in lines if line.startswith("drift: p.clean")]
    assert drift.startswith(
        f"drift: p.clean: step time grew x{_median_ratio(reports):.2f} over 10 runs "
        f"(00ccccc..09ccccc), beyond the drift bound x1.25, rank test p="
    )
    assert drift.endswith("; it rose most at 06ccccc (x1.30), 01ccccc (x1.08), 02ccccc (x1.08)")
    assert lines[-1] == "drift: 1 figure of 1 region grew beyond the policy's drift bounds"
    # The page is written all the same.
    assert (repo / "site/index.html").is_file()


def forged(template: dict) -> dict:
    """A report that claims the newest commit date there can be and holds no region."""
    report = stepped(template, 99, median=1e-3)
    report["run"]["commit_date"] = report["run"]["run_at"] = "2099-12-31T23:59:59+00:00"
    report["suites"][0]["regions"] = []
    return report


@pytest.mark.parametrize("stored", [4, 10], ids=["stored-among-them", "stored-newest"])
def test_a_report_dated_2099_without_regions_cannot_switch_the_check_off(
    template: dict, tmp_path: Path, stored: int
) -> None:
    repo = drift_repo(tmp_path)
    # 8% slower each run: drift, whatever the forged report says.
    real = [stepped(template, i, median=1e-3 * 1.08**i) for i in range(10)]
    reports = [*real[:stored], forged(template), *real[stored:]]
    write_reports(repo / "main", reports)
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.REGION_FAILED, done
    lines = done.stdout.splitlines()
    if stored < len(reports) - 1:
        # Stored before the newest: the newest is the last stored, and it drifted.
        grew = f"drift: p.clean: step time grew x{_median_ratio(real):.2f} over 10 runs"
        assert any(line.startswith(grew) for line in lines), done
        return
    # Stored last, it is the newest: a region it leaves out is not a region without drift.
    assert lines[1:] == [
        "missing: p.clean: held by the run before the newest (09ccccc) and still named by "
        "policies/p.yaml, but not by the newest (99ccccc); a run that leaves out a region cannot "
        "pass the drift check: run the gate on every region, or remove the region from its "
        "policy",
        "drift: 1 region of the run before missing from the newest",
    ]


def test_a_region_removed_from_its_policy_is_not_missing(template: dict, tmp_path: Path) -> None:
    # The policy now names `leaky` only: `clean` was left out on purpose.
    repo = make_repo(tmp_path, {"policies/p.yaml": policy_yaml(region_yaml("leaky", "leaky"))})
    newest = stepped(template, 2, median=1e-3)
    [region] = newest["suites"][0]["regions"]
    region["name"], region["classname"] = "leaky", "p.leaky"
    write_reports(repo / "main", [stepped(template, i, median=1e-3) for i in range(2)] + [newest])
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.OK, done
    assert "missing:" not in done.stdout
    assert done.stdout.splitlines()[-1] == "no drift in 1 region"


def _median_ratio(reports: list[dict]) -> float:
    """The newest five runs' median of medians over the first five's."""
    medians = [r["suites"][0]["regions"][0]["timing"]["median_s"] for r in reports]
    first, last = sorted(medians[:5]), sorted(medians[-5:])
    return last[2] / first[2]


def test_a_bound_in_the_policy_lets_the_same_growth_pass(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path, "drift: {max_step_time: 3.0}\n")
    write_reports(repo / "main", [stepped(template, i, median=1e-3 * 1.08**i) for i in range(10)])
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.OK, done
    assert done.stdout.splitlines()[-1] == "no drift in 1 region"


def test_time_is_never_compared_across_machines(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path)
    # Twice as slow, but from the sixth run on another machine: each machine's stretch is flat.
    reports = [
        stepped(template, i, median=1e-3 if i < 6 else 2e-3, cores=2 if i < 6 else 64)
        for i in range(12)
    ]
    write_reports(repo / "main", reports)
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.OK, done
    assert done.stdout.splitlines()[1:] == [
        "not checked: p.clean: step time: 6 timed runs on its newest machine in the window, "
        "the rank test needs 10 (drift.runs 5 at each end)",
        "no drift in 1 region",
    ]
    history = json.loads((repo / "site/history.json").read_text())
    assert len(history["machines"]) == 2


def test_noise_alone_is_no_drift(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path)
    noise = random.Random(39)
    reports = [stepped(template, i, median=1e-3 * noise.uniform(0.9, 1.1)) for i in range(30)]
    write_reports(repo / "main", reports)
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.OK, done


def test_flops_are_compared_exactly(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path)
    # 4% more work per run: three runs make 1.08x, within the default 1.1; four 1.12x, beyond.
    reports = [stepped(template, i, median=1e-3, flops=1000 * 1.04**i) for i in range(4)]
    write_reports(repo / "main", reports)
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.REGION_FAILED, done
    assert (
        "drift: p.clean: flops grew x1.12 over 4 runs (00ccccc..03ccccc), beyond the drift "
        "bound x1.1; it rose most at 01ccccc (x1.04), 02ccccc (x1.04), 03ccccc (x1.04)"
    ) in done.stdout.splitlines()
    three = [f"main/run-00{i}.json" for i in range(3)]
    done = run_gate(repo, "history", *three, "--out", "s2", "--check")
    assert done.returncode == ExitCode.OK, done


def test_a_drift_key_the_policy_does_not_know_is_fatal(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path, "drift: {max_flop: 2}\n")
    write_reports(repo / "main", [stepped(template, i, median=1e-3) for i in range(2)])
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.USAGE, done
    assert "policies/p.yaml:10: drift: unknown key 'max_flop' (did you mean 'max_flops'?)" in (
        done.stderr
    )


def test_a_window_too_short_for_the_rank_test_is_refused(template: dict, tmp_path: Path) -> None:
    repo = drift_repo(tmp_path, "drift:\n  window: 8\n")
    write_reports(repo / "main", [stepped(template, i, median=1e-3) for i in range(2)])
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.USAGE, done
    assert (
        "policies/p.yaml:11: drift.window: window (8) holds fewer than twice runs (5), so the "
        "step time's rank test could never run; raise window or lower runs"
    ) in done.stderr


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "not_a_report",
            "bad.json: not a transfer-gate JSON report (no `format` of one); give the JSON "
            "reports `transfer-gate run --json` wrote, of one repository and suite",
        ),
        (
            "another_version",
            "bad.json: transfer-gate JSON report version 2 was written by a newer transfer-gate "
            "(this one reads up to 1); upgrade the gate, or give the JSON reports",
        ),
        ("cut_short", "bad.json:1: the file ends early (was it cut short?); give the JSON"),
        (
            "no_run",
            "bad.json: records no `run` (transfer-gate 0.1.0 wrote it, before reports named their "
            "commit), so it cannot be placed among commits; run the gate again in a git checkout",
        ),
        (
            "another_repository",
            "bad.json: a report of https://github.com/someone/else, but good.json is of "
            "https://github.com/octo/proj; make a history of one repository's reports",
        ),
        (
            "another_suite",
            "bad.json: shares no suite with the newest report good.json; give the JSON reports",
        ),
    ],
)
def test_what_is_not_a_report_of_this_history_is_refused_in_one_line(
    template: dict, tmp_path: Path, case: str, message: str
) -> None:
    good = stepped(template, 5, median=1e-3)
    bad = stepped(template, 1, median=1e-3)
    text = None
    if case == "not_a_report":
        text = json.dumps({"format": "jax-transfer-gate.results.baseline", "version": 4})
    elif case == "another_version":
        bad["version"] = 2
    elif case == "cut_short":
        text = json.dumps(bad)[:500]
    elif case == "no_run":
        bad["run"] = None
    elif case == "another_repository":
        bad["run"]["repository"] = "https://github.com/someone/else"
    elif case == "another_suite":
        bad["suites"][0]["name"] = "other"
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text(text or json.dumps(bad))
    # good.json is the newest: given last.
    done = run_gate(tmp_path, "history", "bad.json", "good.json", "--out", "site")
    assert done.returncode == ExitCode.USAGE, done
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {message}"), line
    assert not (tmp_path / "site").exists()


def test_a_folder_without_reports_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = run_gate(tmp_path, "history", "empty", "--out", "site")
    assert done.returncode == ExitCode.USAGE, done
    assert done.stderr == (
        "error: empty: no *.json report in this folder; give the JSON reports `transfer-gate "
        "run --json` wrote, of one repository and suite\n"
    )


# --- the pull request's one line ------------------------------------------------------------------


def test_the_job_summary_shows_each_regions_trend_and_links_its_chart(
    template: dict, tmp_path: Path
) -> None:
    medians = [1e-3, 1.1e-3, 1.2e-3, 1.5e-3]
    write_reports(
        tmp_path / "main", [stepped(template, i, median=m) for i, m in enumerate(medians)]
    )
    done = run_gate(
        tmp_path, "history", "main", "--out", "site", "--markdown", "trend.md",
        "--page-url", "https://octo.github.io/proj/",
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done
    assert (tmp_path / "trend.md").read_text() == (
        "### Step time over main's recent runs\n\n"
        "| Region | Trend | First | Newest | Runs |\n"
        "| --- | --- | --- | --- | --- |\n"
        "| [p.clean](https://octo.github.io/proj/#region-0) | `▁▂▄█` | 1.00 ms | 1.50 ms | 4 |\n"
        "\nEvery region's charts: https://octo.github.io/proj/\n"
    )


def test_a_sparkline_scales_from_lowest_to_highest() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3, 3]) == "▁▁"
    assert sparkline([]) == ""


# --- the page, in a real browser --------------------------------------------------------------

# Put last in the page: a keyboard user's moves, and what the page showed, into #probe. Its toggle
# listener comes after the page's own, so it reads the table the page has just built.
PROBE = """<pre id="probe"></pre><script>
window.addEventListener("load",function(){
var out={},tip=document.getElementById("tip"),svg=document.querySelector("svg.chart");
function style(selector,property){var found=document.querySelector(selector);
return found?getComputedStyle(found)[property]:null;}
out.colors={text:style("body","color"),link:style("a","color"),
caption:style("figcaption","color"),tick:style(".tick","fill"),axis:style(".axis","stroke"),
line:style("path.line.s0","stroke"),second:style("path.line.s1","stroke"),
failed:style("path.failed","stroke"),failedText:style("td.failed","color"),
tip:style("#tip","color"),tipBackground:style("#tip","backgroundColor"),
background:style("body","backgroundColor")};
svg.focus();out.focused=document.activeElement===svg;out.onFocus=tip.hidden?null:tip.textContent;
svg.dispatchEvent(new KeyboardEvent("keydown",{key:"ArrowLeft",bubbles:true}));
out.afterLeft=tip.textContent;
svg.dispatchEvent(new KeyboardEvent("keydown",{key:"Home",bubbles:true}));
out.atHome=tip.textContent;
var details=document.querySelector("details[data-region]");
details.addEventListener("toggle",function(){
out.tableRows=details.querySelectorAll("tbody tr").length;
out.errors=window.__errors;document.getElementById("probe").textContent=JSON.stringify(out);});
details.open=true;
});</script>"""


def contrast(first: str, second: str) -> float:
    """WCAG's contrast ratio of two CSS ``rgb(r, g, b)`` colours, 1 to 21."""

    def luminance(color: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", color)[:3]]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def expand(ranges: str) -> list[int]:
    """``0-2,5`` as [0, 1, 2, 5]: a line's corners, as the page writes them."""
    runs = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        runs += range(int(first), int(last or first) + 1)
    return runs


class Charts(HTMLParser):
    """Each chart's axis and lines, and the text of #probe and of the runs table."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, str]] = {}
        self.lines: list[tuple[str, dict[str, str]]] = []
        self.chart = ""
        self.in_probe = False
        self.probe = ""
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "svg" and "chart" in found.get("class", ""):
            self.chart = found["id"]
            self.charts[self.chart] = found
        elif tag == "path" and found.get("class", "").startswith("line"):
            self.lines.append((self.chart, found))
        self.in_probe = tag == "pre" and found.get("id") == "probe"

    def handle_data(self, data: str) -> None:
        if self.in_probe:
            self.probe += data
        self.text.append(data)


def test_the_page_in_chromium_shows_every_commit_with_the_reports_figures(
    three_runs: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, shas = three_runs
    assert run_gate(repo, "history", "reports", "--out", "site").returncode == ExitCode.OK
    page = (repo / "site/index.html").read_text()
    # Nothing from the network: no script, style, font or image is fetched.
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)=", page)
    assert "url(" not in page
    assert "@import" not in page
    opened = tmp_path / "index.html"
    opened.write_text(probed(page, PROBE))
    parsed = Charts()
    parsed.feed(rendered(opened, tmp_path / "profile"))
    probe = json.loads(parsed.probe)
    assert probe["errors"] == []
    # Every commit is in the runs table, linked to its page.
    for sha in shas:
        assert f'href="https://github.com/octo/proj/commit/{sha}"' in page
        assert sha[:7] in parsed.text
    # A keyboard user: focus shows the newest point, the arrows and Home move along the line.
    history = json.loads((repo / "site/history.json").read_text())
    first = history["regions"][0]
    assert probe["focused"] is True
    assert probe["onFocus"].startswith(f"{shas[2][:7]}  2026-03-03  {first['points'][2]['status']}")
    assert probe["afterLeft"].startswith(f"{shas[1][:7]}  2026-03-02")
    assert probe["atHome"].startswith(f"{shas[0][:7]}  2026-03-01")
    assert f"median: {duration_text(first['points'][0]['median_s'])}" in probe["atHome"]
    assert "machine 1: " in probe["atHome"]
    assert probe["tableRows"] == 3
    # WCAG AA against the page's white: text 4.5:1, the charts' lines and marks 3:1; the tip's
    # text against its own background.
    colors = probe["colors"]
    white = colors["background"]
    for key in ("text", "link", "caption", "tick", "failedText"):
        assert contrast(colors[key], white) >= 4.5, (key, colors[key])
    for key in ("axis", "line", "second", "failed"):
        assert contrast(colors[key], white) >= 3, (key, colors[key])
    assert contrast(colors["tip"], colors["tipBackground"]) >= 4.5
    # The charts' points are the reports' figures: each line's points, read back through the axis.
    figures = {
        "median_s": lambda p: p["median_s"],
        "flops": lambda p: p["flops"],
        "bytes_accessed": lambda p: p["bytes_accessed"],
        "implicit_lines": lambda p: p["implicit_lines"],
        "collectives": lambda p: p["collectives"],
    }
    checked = 0
    for chart_id, line in parsed.lines:
        chart = parsed.charts[chart_id]
        region = history["regions"][int(chart["data-region"])]
        lo, hi = float(chart["data-lo"]), float(chart["data-hi"])
        top, height = float(chart["data-top"]), float(chart["data-height"])
        left, width = float(chart["data-left"]), float(chart["data-width"])
        corners = expand(line["data-runs"])
        drawn = [tuple(map(float, xy.split(","))) for xy in line["d"][1:].split(" L")]
        assert len(drawn) == len(corners)
        # Every commit, on one machine: one line from the first run to the newest.
        assert (corners[0], corners[-1]) == (0, 2)
        figure = figures[line["data-series"]]
        for point in region["points"]:
            # A run between two corners lies on their flat line: the earlier corner's height.
            at = max(i for i, run in enumerate(corners) if run <= point["run"])
            x, y = drawn[at]
            if corners[at] == point["run"]:
                assert x == pytest.approx(left + width * point["run"] / 2, abs=0.06)
            value = lo + (1 - (y - top) / height) * (hi - lo)
            # Drawn to a tenth of a unit of the SVG: the figure within that.
            assert value == pytest.approx(figure(point), abs=(hi - lo) * 0.06 / height), chart_id
            checked += 1
    assert checked == 2 * 5 * 3  # two regions, five lines (memory is not measured on a CPU)


def test_a_newest_run_that_errored_hides_neither_drift_nor_the_machine(
    template: dict, tmp_path: Path
) -> None:
    repo = drift_repo(tmp_path)
    reports = [stepped(template, i, median=1e-3 * 1.1**i) for i in range(10)]
    # The newest run errored before a worker said where it ran: no machine, no timing.
    errored = stepped(template, 10, median=1e-3, status="error")
    for region in errored["suites"][0]["regions"]:
        del region["machine"]
        region["timing"], region["timing_samples"], region["cost"] = None, [], None
    write_reports(repo / "main", [*reports, errored])
    done = run_gate(repo, "history", "main", "--out", "site", "--check")
    assert done.returncode == ExitCode.REGION_FAILED, done
    assert "drift: p.clean: step time grew" in done.stdout
    page = (repo / "site/index.html").read_text()
    assert 'class="machine"' not in page  # one machine: no change is marked
    assert "the machine changed" not in page


# --- branches ------------------------------------------------------------------------------------


def on_branch(report: dict, ref: str | None) -> dict:
    report["run"]["ref"] = ref
    return report


def branch_reports(template: dict, folder: Path) -> Path:
    """Four runs of main at 1 ms, a feature branch's 5 ms run among them, and a pull request's
    2 ms run on feature-y, the newest."""
    reports = [on_branch(stepped(template, i, median=1e-3), "main") for i in range(4)]
    reports.insert(2, on_branch(stepped(template, 9, median=5e-3), "feature-x"))
    reports.append(on_branch(stepped(template, 10, median=2e-3), "feature-y"))
    return write_reports(folder, reports)


def test_history_draws_main_alone_and_a_pull_requests_run_as_a_line_of_its_own(
    template: dict, tmp_path: Path
) -> None:
    branch_reports(template, tmp_path / "runs")
    done = run_gate(tmp_path, "history", "runs", "--out", "site", "--markdown", "trend.md")
    assert done.returncode == ExitCode.OK, done
    said = (
        "main's recent runs, then this run's on feature-y as a line of its own; "
        "1 report of other branches left out (--every-branch)"
    )
    assert done.stdout.splitlines()[0].endswith(f"1 region, 1 machine; {said}"), done
    data = json.loads((tmp_path / "site/history.json").read_text())
    lines = {r["branch"]: [p["median_s"] for p in r["points"]] for r in data["regions"]}
    assert lines == {"main": [pytest.approx(1e-3)] * 4, "feature-y": [pytest.approx(2e-3)]}
    assert (tmp_path / "trend.md").read_text() == (
        f"### Step time over {said}\n\n"
        "| Region | Trend | First | Newest | Runs |\n"
        "| --- | --- | --- | --- | --- |\n"
        "| p.clean on main | `▁▁▁▁` | 1.00 ms | 1.00 ms | 4 |\n"
        "| p.clean on feature-y | `▁` | 2.00 ms | 2.00 ms | 1 |\n"
    )
    # The change over the window is main's own: the feature branches' runs are not in it.
    page = (tmp_path / "site/index.html").read_text()
    assert "<td>x1.00 over 4 runs</td>" in page
    assert "x2.00" not in page
    assert "x5.00" not in page


def test_every_branch_draws_each_branch_as_its_own_line(template: dict, tmp_path: Path) -> None:
    branch_reports(template, tmp_path / "runs")
    done = run_gate(
        tmp_path, "history", "runs", "--out", "site", "--every-branch", "--markdown", "trend.md"
    )
    assert done.returncode == ExitCode.OK, done
    data = json.loads((tmp_path / "site/history.json").read_text())
    assert [(r["branch"], len(r["points"])) for r in data["regions"]] == [
        ("main", 4),
        ("feature-x", 1),
        ("feature-y", 1),
    ]
    assert data["branches"] == "every branch's recent runs, a line each"
    trend = (tmp_path / "trend.md").read_text()
    assert trend.startswith("### Step time over every branch's recent runs, a line each\n")
    assert "| p.clean on feature-x | `▁` | 5.00 ms | 5.00 ms | 1 |" in trend


def test_a_history_without_the_branch_says_which_branches_it_has(
    template: dict, tmp_path: Path
) -> None:
    reports = [on_branch(stepped(template, i, median=1e-3), "master") for i in range(3)]
    write_reports(tmp_path / "runs", reports)
    done = run_gate(tmp_path, "history", "runs", "--out", "site")
    assert done.returncode == ExitCode.USAGE, done
    assert (
        "no report of the branch 'main' among the 3 given (they are of master); name the "
        "branch with --branch NAME, or draw each with --every-branch"
    ) in done.stderr, done
    done = run_gate(tmp_path, "history", "runs", "--out", "site", "--branch", "master")
    assert done.returncode == ExitCode.OK, done


SCROLL_PROBE = """<pre id="probe"></pre><script>
window.addEventListener("load",function(){
var box=document.querySelector("table.summary").parentElement;
document.getElementById("probe").textContent=JSON.stringify(
{window:window.innerWidth,scroll:box.scrollWidth,client:box.clientWidth});});</script>"""


def test_the_summary_table_fits_a_1300_pixel_window(template: dict, tmp_path: Path) -> None:
    long_name = "a_long_region_name_of_a_real_training_loop_iteration"
    reports = []
    for report in json.loads(json.dumps([template] * 2)):
        report["suites"][0]["regions"][0]["name"] = long_name
        reports.append(report)
    write_reports(
        tmp_path / "runs",
        [on_branch(stepped(r, i, median=1e-3), "main") for i, r in enumerate(reports)],
    )
    assert run_gate(tmp_path, "history", "runs", "--out", "site").returncode == ExitCode.OK
    opened = tmp_path / "index.html"
    opened.write_text(probed((tmp_path / "site/index.html").read_text(), SCROLL_PROBE))
    parsed = Charts()
    parsed.feed(rendered(opened, tmp_path / "profile", window=(1300, 900)))
    probe = json.loads(parsed.probe)
    assert probe["window"] == 1300, probe
    assert probe["scroll"] <= probe["client"], probe  # no horizontal scrollbar
