"""Every reporter shows a region's comparison with the base (``run --base``) and the baseline.

Built from hand-made records (`result_samples`): the runner and the statistics that fill
them in are tested elsewhere; here only what the JUnit report, the terminal, GitHub's
summary and annotations, the JSON report and shard merging make of them.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
import xmlschema
from cli_helpers import JUNIT_XSD
from result_samples import POLICY, region, run_of, transfer

from gate.report.github import render_summary
from gate.report.github_annotations import annotation_lines
from gate.report.json_report import render_json
from gate.report.junit import render_junit, write_junit
from gate.report.merge import merge_reports
from gate.report.terminal import format_summary
from gate.results.baseline import fingerprints_of
from gate.results.comparison import (
    BaseComparison,
    BaseStatus,
    BoundaryTime,
    LeafDifference,
    Renamed,
    ResultComparison,
    ResultStatus,
    TimingComparison,
    TimingVerdict,
)
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import RegionResult, RunResult
from gate.user_code import SourceLocation

REF = "HEAD~1 (1a2b3c4)"
BASE_SAMPLES = tuple(412e-6 + i * 1e-6 for i in range(-20, 20))
HEAD_SAMPLES = tuple(545e-6 + i * 1e-6 for i in range(-20, 20))
# The interval the verdict rests on leads; the medians say they are the paired rounds' (on one
# core), not the timed runs' of the region's row.
HEADLINE = (
    "1.32x slower (interval 1.25-1.40x, beyond 1.1x): median 412 µs → 545 µs, "
    "40 paired rounds on one core"
)
# The same times as two samples measured apart (a stored baseline).
UNPAIRED = "1.32x slower (interval 1.25-1.40x, beyond 1.1x): median 412 µs → 545 µs, 40+40 samples"


def timing(verdict: TimingVerdict = TimingVerdict.SLOWER, **changes: object) -> TimingComparison:
    """A step 1.32x slower than the base over 40 paired rounds, failing unless changed."""
    sample = TimingComparison(
        against="base",
        verdict=verdict,
        base_median_s=412e-6,
        head_median_s=545e-6,
        ratio=545 / 412,
        ratio_low=1.25,
        ratio_high=1.40,
        p_value=3e-7,
        max_slowdown=1.1,
        failing=verdict is TimingVerdict.SLOWER,
        base_samples=BASE_SAMPLES,
        head_samples=HEAD_SAMPLES,
        rounds=40,
        paired=True,
        level=0.9999,
    )
    return replace(sample, **changes)  # type: ignore[arg-type]


def compared(**changes: object) -> BaseComparison:
    return replace(BaseComparison(REF, BaseStatus.COMPARED), **changes)  # type: ignore[arg-type]


DIFFERENT = ResultComparison(
    ResultStatus.DIFFERS,
    detail="2 leaves differ from the base",
    differences=(
        LeafDifference("['w']", "3 of 64 values differ, max abs diff 0.5 (rtol=1e-05, atol=1e-08)"),
        LeafDifference("['b']", "1 of 8 values differ, max abs diff 0.1 (rtol=1e-05, atol=1e-08)"),
    ),
)
NOT_DETERMINISTIC = ResultComparison(
    ResultStatus.NOT_COMPARED, "results not compared: setup is not deterministic"
)
BASE_ERROR = RegionError(
    ErrorKind.IMPORT,
    "ModuleNotFoundError: No module named 'steps'",
    "Traceback (most recent call last):\nModuleNotFoundError: No module named 'steps'",
    SourceLocation("policies/train.yaml", 9, "<policy>"),
)


def with_base(base: BaseComparison, **changes: object) -> RegionResult:
    return region(base=base, timing_samples=HEAD_SAMPLES, **changes)


# --- JUnit ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(JUNIT_XSD)


def junit(run: RunResult, tmp_path: Path, schema: xmlschema.XMLSchema) -> ET.Element:
    """Written, valid against the XSD, and its counts (skipped too) match its elements."""
    path = tmp_path / "report.xml"
    write_junit(run, path)
    schema.validate(str(path))
    root = ET.parse(path).getroot()
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        for tag, attribute in (
            ("failure", "failures"),
            ("error", "errors"),
            ("skipped", "skipped"),
        ):
            assert int(suite.get(attribute, "-1")) == sum(len(c.findall(tag)) for c in cases)
    return root


def case_named(root: ET.Element, name: str) -> ET.Element:
    found = [c for c in root.iter("testcase") if c.get("name") == name]
    assert len(found) == 1, [c.get("name") for c in root.iter("testcase")]
    return found[0]


def outcome(case: ET.Element) -> str | None:
    tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
    assert len(tags) <= 1
    return tags[0] if tags else None


def test_a_slower_step_fails_its_timing_testcase_with_the_headline(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = junit(run_of(with_base(compared(timing=timing()))), tmp_path, schema)
    case = case_named(root, "step: timing")
    assert (case.get("classname"), case.get("file"), case.get("line")) == (
        "train.step",
        POLICY,
        "7",
    )
    [failure] = case.findall("failure")
    assert failure.get("message") == HEADLINE
    assert failure.get("type") == "timing"
    body = failure.text or ""
    assert body.startswith(f"timing vs base: {HEADLINE}\n")
    assert "verdict: slower: significant, and beyond the allowed 1.1x; fails" in body
    assert "base: median 412 µs, IQR 402 µs-421 µs, 40 samples" in body
    assert "head: median 545 µs, IQR 535 µs-554 µs, 40 samples" in body
    assert "interval 1.25x-1.4x" in body
    assert "ratio, head/base: 1.32x, 99.99% interval 1.25x-1.4x" in body
    assert (
        "p-value of no difference at all (Wilcoxon signed-rank on the rounds' ratios, "
        "two-sided): 3e-07\n" in body
    )
    assert f"rounds: 40, each one base {REF} run and one head run on the same core" in body
    # The transfers testcase is still there and still passes.
    assert outcome(case_named(root, "step: transfers")) is None


def test_an_unchanged_or_faster_step_passes_and_says_so(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    unchanged = timing(
        TimingVerdict.UNCHANGED,
        head_median_s=415e-6,
        ratio=415 / 412,
        ratio_low=0.97,
        ratio_high=1.06,
        p_value=0.034,
    )
    faster = timing(
        TimingVerdict.FASTER, head_median_s=206e-6, ratio=0.5, ratio_low=0.48, ratio_high=0.52
    )
    run = run_of(
        with_base(compared(timing=unchanged)), with_base(compared(timing=faster), name="f")
    )
    root = junit(run, tmp_path, schema)
    case = case_named(root, "step: timing")
    assert outcome(case) is None
    out = case.findtext("system-out") or ""
    # "Unchanged" carries the interval it rests on; a p-value of 0.034 beside it would read as
    # a difference, so the body names what that p is, and that the verdict does not rest on it.
    assert out.startswith(
        "timing vs base: unchanged (1.01x, interval 0.97-1.06x, within 1.1x): "
        "median 412 µs → 415 µs, 40 paired rounds on one core\n"
    ), out
    assert "p=" not in out.splitlines()[0]
    assert (
        "p-value of no difference at all (Wilcoxon signed-rank on the rounds' ratios, two-sided):"
        " 0.034 (not what the verdict rests on: a real difference well within 1.1x is unchanged,"
        " and the interval says how large it is)\n"
    ) in out
    fast = case_named(root, "f: timing")
    assert outcome(fast) is None
    assert "2.00x faster (0.50x, interval 0.48-0.52x): median 412 µs → 206 µs" in (
        fast.findtext("system-out") or ""
    )


def test_a_warn_only_slowdown_passes_but_says_it_is_slower(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    result = with_base(compared(timing=timing(failing=False)))
    assert result.passed
    case = case_named(junit(run_of(result), tmp_path, schema), "step: timing")
    assert outcome(case) is None
    out = case.findtext("system-out") or ""
    assert f"{HEADLINE} (a warning: timing.on_regression is warn)" in out
    assert "reported, not failing (timing.on_regression: warn)" in out


def test_an_inconclusive_timing_is_skipped_not_passed(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    open_ = timing(TimingVerdict.INCONCLUSIVE, failing=False, ratio_low=0.98, ratio_high=1.14)
    result = with_base(compared(timing=open_))
    assert result.passed  # a warning, not a failure: the exit code is the head's
    root = junit(run_of(result), tmp_path, schema)
    [skipped] = case_named(root, "step: timing").findall("skipped")
    assert (skipped.get("message") or "").startswith(
        "inconclusive (1.32x, interval 0.98-1.14x straddles 1.1x): median 412 µs → 545 µs"
    )
    assert "not a pass" in (skipped.text or "")
    # An interval open only on the faster side says which end it straddles.
    faster_side = replace(open_, ratio=0.97, ratio_low=0.86, ratio_high=1.07)
    assert faster_side.headline().startswith(
        "inconclusive (0.97x, interval 0.86-1.07x straddles 1/1.1x): "
    )
    assert root.find("testsuite").get("skipped") == "1"  # type: ignore[union-attr]


def test_timing_against_the_stored_baseline_is_its_own_testcase(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    stored = timing(
        against="baseline",
        max_slowdown=1.5,
        ratio=3.0,
        ratio_low=2.8,
        ratio_high=3.2,
        rounds=0,
        head_median_s=1.236e-3,
        paired=False,
        level=0.999,
    )
    root = junit(run_of(region(timing_vs_baseline=stored)), tmp_path, schema)
    [failure] = case_named(root, "step: timing vs baseline").findall("failure")
    assert failure.get("message") == (
        "3.00x slower (interval 2.80-3.20x, beyond 1.5x): median 412 µs → 1.24 ms, 40+40 samples"
    )
    body = failure.text or ""
    assert body.startswith("timing vs baseline: 3.00x slower")
    assert "allowed slowdown: 1.5x" in body
    assert "rounds: none; the baseline samples were measured in an earlier job" in body
    assert "p-value of no difference at all (Mann-Whitney U, two-sided)" in body
    assert [c.get("name") for c in root.iter("testcase")] == [
        "step: transfers",
        "step: timing vs baseline",
    ]


def test_results_that_differ_fail_naming_every_leaf(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = junit(run_of(with_base(compared(results=DIFFERENT))), tmp_path, schema)
    [failure] = case_named(root, "step: results vs base").findall("failure")
    assert failure.get("message") == (
        "results differ from the base: 2 leaves differ: ['w'] (3 of 64 values differ, "
        "max abs diff 0.5 (rtol=1e-05, atol=1e-08)); also ['b']"
    )
    body = failure.text or ""
    assert "- ['w']: 3 of 64 values differ, max abs diff 0.5 (rtol=1e-05, atol=1e-08)" in body
    assert "- ['b']: 1 of 8 values differ, max abs diff 0.1 (rtol=1e-05, atol=1e-08)" in body


def test_results_not_compared_are_skipped_with_the_reason(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = junit(run_of(with_base(compared(results=NOT_DETERMINISTIC))), tmp_path, schema)
    [skipped] = case_named(root, "step: results vs base").findall("skipped")
    assert skipped.get("message") == "results not compared: setup is not deterministic"


def test_results_the_same_pass(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    same = ResultComparison(
        ResultStatus.MATCHES, "all 3 output leaves within rtol=1e-05, atol=1e-08"
    )
    case = case_named(
        junit(run_of(with_base(compared(results=same))), tmp_path, schema), "step: results vs base"
    )
    assert outcome(case) is None
    assert "all 3 output leaves within rtol=1e-05" in (case.findtext("system-out") or "")


def test_a_new_region_is_one_skipped_testcase(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    result = with_base(BaseComparison(REF, BaseStatus.NEW_REGION))
    root = junit(run_of(result), tmp_path, schema)
    [skipped] = case_named(root, "step: vs base").findall("skipped")
    assert skipped.get("message") == "new region, not compared"
    assert [c.get("name") for c in root.iter("testcase")] == ["step: transfers", "step: vs base"]


def test_a_base_that_broke_is_an_error_with_its_message(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    result = with_base(BaseComparison(REF, BaseStatus.BASE_FAILED, base_error=BASE_ERROR))
    assert not result.passed
    root = junit(run_of(result), tmp_path, schema)
    case = case_named(root, "step: vs base")
    [error] = case.findall("error")
    assert error.get("message") == (
        "the base could not run it: callable did not import: "
        "ModuleNotFoundError: No module named 'steps'"
    )
    assert error.get("type") == "base-import"
    assert (case.get("file"), case.get("line")) == (POLICY, "7")
    body = error.text or ""
    assert f"The base is {REF}; the head was still judged on its own." in body
    assert "Traceback (most recent call last):" in body


def test_boundary_timings_have_their_testcase_and_the_step_lists_boundary_times(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    save = timing(
        TimingVerdict.UNCHANGED,
        what="pkg.io:save",
        failing=False,
        ratio=1.0,
        ratio_low=0.95,
        ratio_high=1.05,
    )
    base = compared(
        timing=timing(),
        boundaries=(
            BoundaryTime("pkg.io:save", 150e-6, 155e-6),
            BoundaryTime("pkg:new", None, 2e-3),
        ),
        boundary_timing=(save,),
    )
    root = junit(run_of(with_base(base)), tmp_path, schema)
    body = case_named(root, "step: timing").findtext("failure") or ""
    assert f"Boundary time per step, base → head ({REF}):" in body
    assert "- pkg.io:save: 150 µs → 155 µs per step" in body
    assert "- pkg:new: not called → 2.00 ms per step" in body
    boundary = case_named(root, "step: boundary pkg.io:save timing vs base")
    assert outcome(boundary) is None
    assert "unchanged (1.00x, interval 0.95-1.05x, within 1.1x)" in (
        boundary.findtext("system-out") or ""
    )


def test_comparison_numbers_are_suite_properties(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = junit(run_of(with_base(compared(timing=timing(), results=DIFFERENT))), tmp_path, schema)
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["step.vs_base.ref"] == REF
    assert properties["step.vs_base.status"] == "compared"
    assert properties["step.vs_base.timing.verdict"] == "slower"
    assert properties["step.vs_base.timing.p_value"] == "3e-07"
    assert properties["step.vs_base.timing.samples"] == "40+40"
    assert properties["step.vs_base.results.differences"] == "2"


def test_a_transfer_in_the_base_is_described_as_already_in_the_base(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    moved = replace(transfer(), failing=False, accepted=True, in_base=True)
    result = with_base(compared(already_in_base=1), transfers=(moved,))
    assert result.passed
    root = junit(run_of(result), tmp_path, schema)
    out = case_named(root, "step: transfers").findtext("system-out") or ""
    assert "  guard level: disallow (allowed: already in the base)\n" in out
    terminal = format_summary(run_of(result))
    assert "1 failing lines" not in terminal
    assert "0 failing lines (+1 already in the base)" in terminal
    assert "accepted by the baseline" not in terminal
    assert "  transfers vs base: 1 transfer already in the base, not failing" in terminal
    [finding] = json.loads(render_json(run_of(result), fingerprints_of(run_of(result))))["suites"][
        0
    ]["regions"][0]["transfers"]
    assert (finding["in_base"], finding["accepted_by_baseline"], finding["failing"]) == (
        True,
        False,
        False,
    )


def test_regions_without_a_comparison_give_no_new_testcases_or_properties() -> None:
    text = render_junit(run_of(region(), region("other", transfers=(transfer(),))))
    assert "vs_base" not in text
    assert "vs_baseline" not in text
    names = [c.get("name") for c in ET.fromstring(text).iter("testcase")]
    assert names == ["step: transfers", "other: transfers"]


# --- every sample: valid, and a region that does not pass has a failure or error -------------

SAMPLES = {
    "slower": with_base(compared(timing=timing())),
    "warn": with_base(compared(timing=timing(failing=False))),
    "inconclusive": with_base(compared(timing=timing(TimingVerdict.INCONCLUSIVE, failing=False))),
    "results differ": with_base(compared(results=DIFFERENT)),
    "not deterministic": with_base(compared(results=NOT_DETERMINISTIC)),
    "new region": with_base(BaseComparison(REF, BaseStatus.NEW_REGION)),
    "base failed": with_base(BaseComparison(REF, BaseStatus.BASE_FAILED, base_error=BASE_ERROR)),
    "vs baseline": region(timing_vs_baseline=timing(against="baseline", rounds=0)),
}


@pytest.mark.parametrize("result", SAMPLES.values(), ids=SAMPLES.keys())
def test_a_compared_region_fails_in_junit_exactly_when_it_fails(
    result: RegionResult, tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = junit(run_of(result), tmp_path, schema)
    outcomes = [
        o for c in root.iter("testcase") for o in (*c.findall("failure"), *c.findall("error"))
    ]
    assert bool(outcomes) == (not result.passed)
    for element in root.iter():
        if element.tag in ("failure", "error", "skipped"):
            assert (element.get("message") or "").strip()


# --- terminal ------------------------------------------------------------------------------------


def test_the_terminal_shows_each_comparison_under_its_region() -> None:
    run = run_of(
        with_base(compared(timing=timing(), results=DIFFERENT)),
        region("other"),
        with_base(BaseComparison(REF, BaseStatus.NEW_REGION), name="fresh"),
    )
    lines = format_summary(run).splitlines()
    assert lines[:6] == [
        "FAIL  train.step   timing vs base, results vs base  median 1.23 ms  "
        "boundaries 155 µs/step",
        f"  timing vs base: {HEADLINE}",
        "  results vs base: 2 leaves differ: ['w'] (3 of 64 values differ, max abs diff 0.5 "
        "(rtol=1e-05, atol=1e-08)); also ['b']",
        "PASS  train.other  0 failing lines  median 1.23 ms  boundaries 155 µs/step",
        "PASS  train.fresh  0 failing lines  median 1.23 ms  boundaries 155 µs/step",
        "  vs base: new region, not compared",
    ]
    # The findings say it again at the region's policy line, and the count line is unchanged.
    assert f"  {POLICY}:7: timing vs base: {HEADLINE}" in lines
    assert lines[-1] == "2 passed, 1 failed"


def test_a_step_the_change_renamed_is_named_beside_every_comparison_with_the_bases() -> None:
    renamed = (Renamed("step", "pkg.steps:clean", "pkg.steps:clean2"),)
    said = "compared with the base's step pkg.steps:clean (the head renamed it pkg.steps:clean2)"
    run = run_of(with_base(compared(timing=timing(), results=DIFFERENT, renamed=renamed)))
    lines = format_summary(run).splitlines()
    assert lines[1] == f"  vs base: {said}", lines
    finding = next(line for line in lines if f"{POLICY}:7: results vs base" in line)
    assert finding.endswith(f"({said})"), finding
    assert f"| `train.step` | — | — | — | {said} |" in render_summary(run, "report.xml")
    document = json.loads(render_json(run, fingerprints_of(run)))
    base = document["suites"][0]["regions"][0]["base"]
    assert base["renamed"] == [
        {"role": "step", "base": "pkg.steps:clean", "head": "pkg.steps:clean2"}
    ]
    # A base that failed says it in its error, not as "compared with".
    failed = BaseComparison(REF, BaseStatus.BASE_FAILED, base_error=BASE_ERROR, renamed=renamed)
    assert said not in format_summary(run_of(with_base(failed)))


def test_the_terminal_marks_warnings_and_inconclusive_timings() -> None:
    run = run_of(
        with_base(compared(timing=timing(failing=False))),
        with_base(
            compared(timing=timing(TimingVerdict.INCONCLUSIVE, failing=False, ratio_low=1.05)),
            name="o",
        ),
        with_base(compared(timing=timing(TimingVerdict.INCONCLUSIVE, failing=False)), name="p"),
        region("b", timing_vs_baseline=timing(against="baseline", rounds=0, paired=False)),
    )
    text = format_summary(run)
    assert f"  timing vs base: {HEADLINE} (a warning: timing.on_regression is warn)" in text
    assert "  timing vs base: inconclusive (1.32x, interval 1.05-1.40x straddles 1.1x)" in text
    # Past the factor at the passing level, short of the failing one.
    past = "inconclusive (1.32x, interval 1.25-1.40x: past 1.1x, not yet beyond doubt)"
    assert f"  timing vs base: {past}" in text
    assert "(a warning, not a pass)" in text
    assert f"  timing vs baseline: {UNPAIRED}" in text
    assert text.splitlines()[-1] == "3 passed, 1 failed"


# --- GitHub --------------------------------------------------------------------------------------


def test_the_job_summary_has_a_comparison_table() -> None:
    run = run_of(
        with_base(compared(timing=timing())),
        with_base(compared(timing=timing(TimingVerdict.INCONCLUSIVE, failing=False)), name="o"),
        with_base(BaseComparison(REF, BaseStatus.BASE_FAILED, base_error=BASE_ERROR), name="e"),
        region("plain"),
    )
    summary = render_summary(run, "report.xml")
    assert (
        "### Against the base\n\nBase: `HEAD~1 (1a2b3c4)`. Base and head: median step time "
        "(samples): against the base, of paired rounds on one core, so not the timed runs' "
        "median above; ratio: head/base (the interval the verdict rests on).\n\n"
        "| Region | Base | Head | Ratio | Verdict |\n"
        "|---|---|---|---|---|\n"
        "| `train.step` | 412 µs (40) | 545 µs (40) | 1.32x (1.25-1.40) | **FAIL**: slower |\n"
        "| `train.o` | 412 µs (40) | 545 µs (40) | 1.32x (1.25-1.40) | "
        "**inconclusive** (not a pass) |\n"
        "| `train.e` | — | — | — | **ERROR**: the base could not run it: callable did not "
        "import: ModuleNotFoundError: No module named 'steps' |\n"
    ) in summary
    assert "`train.plain`" not in summary.split("### Against the base")[1].split("###")[0]
    # The region table says why the region failed.
    assert "| `train.step` | **FAIL**: timing vs base |" in summary


def test_no_comparison_table_without_a_comparison() -> None:
    assert "Against the base" not in render_summary(run_of(region()), "report.xml")


def test_annotations_for_failing_regressions_and_result_differences_at_the_policy_line() -> None:
    run = run_of(
        with_base(compared(timing=timing(), results=DIFFERENT)),
        with_base(compared(timing=timing(TimingVerdict.INCONCLUSIVE, failing=False)), name="o"),
        with_base(compared(timing=timing(failing=False)), name="w"),
    )
    lines = annotation_lines(run, "report.xml")
    assert lines == [
        f"::error file={POLICY},line=7,title=transfer-gate%3A train.step%3A timing vs base::"
        f"{HEADLINE}",
        f"::error file={POLICY},line=7,title=transfer-gate%3A train.step%3A results vs base::"
        "2 leaves differ: ['w'] (3 of 64 values differ, max abs diff 0.5 (rtol=1e-05, "
        "atol=1e-08)); also ['b']",
    ]


# --- JSON ----------------------------------------------------------------------------------------


def region_json(result: RegionResult) -> dict[str, object]:
    run = run_of(result)
    document = json.loads(render_json(run, fingerprints_of(run)))
    assert document["version"] == 1  # fields added, none renamed: the version stays
    regions: list[dict[str, object]] = document["suites"][0]["regions"]
    return regions[0]


def test_json_has_every_raw_sample_and_the_verdicts() -> None:
    base = compared(
        timing=timing(),
        results=DIFFERENT,
        boundaries=(BoundaryTime("pkg.io:save", 150e-6, None),),
        boundary_timing=(timing(what="pkg.io:save", failing=False),),
    )
    document = region_json(with_base(base, timing_vs_baseline=timing(against="baseline")))
    assert document["status"] == "failed"
    assert document["timing_samples"] == list(HEAD_SAMPLES)
    against = document["base"]
    assert isinstance(against, dict)
    assert (against["ref"], against["status"], against["failing"]) == (REF, "compared", True)
    step = against["timing"]
    assert step["base_samples"] == list(BASE_SAMPLES)
    assert step["head_samples"] == list(HEAD_SAMPLES)
    assert (step["verdict"], step["failing"], step["rounds"]) == ("slower", True, 40)
    assert (step["ratio_low"], step["ratio_high"], step["p_value"]) == (1.25, 1.40, 3e-7)
    assert step["headline"] == HEADLINE
    assert against["results"]["differences"][0] == {
        "path": "['w']",
        "detail": "3 of 64 values differ, max abs diff 0.5 (rtol=1e-05, atol=1e-08)",
    }
    assert against["boundaries"] == [
        {"name": "pkg.io:save", "base_per_step_s": 150e-6, "head_per_step_s": None}
    ]
    assert against["boundary_timing"][0]["what"] == "pkg.io:save"
    assert document["timing_vs_baseline"]["against"] == "baseline"  # type: ignore[index]


def test_json_of_a_broken_base_and_of_a_region_without_comparison() -> None:
    broken = region_json(
        with_base(BaseComparison(REF, BaseStatus.BASE_FAILED, base_error=BASE_ERROR))
    )
    assert broken["base"]["status"] == "base_failed"  # type: ignore[index]
    assert broken["base"]["error"]["kind"] == "import"  # type: ignore[index]
    plain = region_json(region())
    assert (plain["base"], plain["timing_vs_baseline"], plain["timing_samples"]) == (None, None, [])


# --- shard merging -------------------------------------------------------------------------------


def test_merged_shards_keep_the_comparison_testcases_and_fields(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    one = run_of(with_base(compared(timing=timing(TimingVerdict.INCONCLUSIVE, failing=False))))
    two = run_of(with_base(compared(timing=timing(), results=DIFFERENT), name="b"))
    for name, run in (("1", one), ("2", two)):
        write_junit(run, tmp_path / f"s{name}.xml")
        (tmp_path / f"s{name}.json").write_text(render_json(run, fingerprints_of(run)), "utf-8")

    summary = merge_reports(tmp_path / "all.xml", [tmp_path / "s1.xml", tmp_path / "s2.xml"])
    assert (summary.tests, summary.failures, summary.skipped) == (5, 2, 1)
    assert summary.describe(Path("all.xml")) == (
        "merged 2 reports into all.xml: 1 suite, 5 tests, 2 failures, 0 errors, 1 skipped"
    )
    schema.validate(str(tmp_path / "all.xml"))
    [suite] = ET.parse(tmp_path / "all.xml").getroot().findall("testsuite")
    assert suite.get("skipped") == "1"
    merged = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(merged) == [
        "step: transfers",
        "step: timing",
        "b: transfers",
        "b: timing",
        "b: results vs base",
    ]
    assert merged["step: timing"].find("skipped") is not None
    assert merged["b: timing"].find("failure").get("message") == HEADLINE  # type: ignore[union-attr]

    merge_reports(tmp_path / "all.json", [tmp_path / "s1.json", tmp_path / "s2.json"])
    document = json.loads((tmp_path / "all.json").read_text("utf-8"))
    regions = document["suites"][0]["regions"]
    assert [r["base"]["timing"]["verdict"] for r in regions] == ["inconclusive", "slower"]
    assert regions[1]["base"]["timing"]["base_samples"] == list(BASE_SAMPLES)
    assert document["passed"] is False


def test_the_unbounded_interval_of_small_samples_reads_as_none_and_has_no_infinity_in_json() -> (
    None
):
    few = timing(
        TimingVerdict.INCONCLUSIVE,
        failing=False,
        ratio_low=0.0,
        ratio_high=math.inf,
        base_samples=BASE_SAMPLES[:3],
        head_samples=HEAD_SAMPLES[:3],
        rounds=3,
    )
    result = with_base(compared(timing=few))
    body = "\n".join(
        c.findtext("skipped") or "" for c in ET.fromstring(render_junit(run_of(result))).iter()
    )
    assert "ratio, head/base: 1.32x, 99.99% interval none (too few samples)" in body
    assert "| 1.32x (no interval: too few samples) |" in render_summary(run_of(result), "r.xml")
    text = render_json(run_of(result), fingerprints_of(run_of(result)))
    assert "Infinity" not in text
    step = json.loads(text)["suites"][0]["regions"][0]["base"]["timing"]
    assert (step["ratio_low"], step["ratio_high"]) == (0.0, None)
