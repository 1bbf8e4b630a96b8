"""GitHub Actions output: workflow-command annotations and the Markdown job summary."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from cli_helpers import line_of, make_repo, run_gate
from result_samples import (
    FAILED_CHECK,
    STEPS,
    policy,
    region,
    region_error,
    run_of,
    transfer,
)

from gate.cli.exit_codes import ExitCode
from gate.levels import Direction, GuardLevel, GuardSpec
from gate.policy.model import CostRule
from gate.report.github import (
    MAX_DETAILS_CHARS,
    MAX_SUMMARY_BYTES,
    render_summary,
    report_to_github,
)
from gate.report.github_annotations import (
    MAX_ERROR_ANNOTATIONS,
    annotation_lines,
    escape_data,
    escape_property,
    workflow_command,
)
from gate.results.comparison import BaseComparison, BaseStatus
from gate.results.costs import FunctionCost, StepCost, compare_costs, not_measured, step_cost
from gate.results.errors import ErrorKind, RegionError
from gate.results.records import (
    CheckName,
    CheckOutcome,
    CoverageJudge,
    Phase,
    RegionResult,
    RunResult,
    SuiteResult,
)

REPORT = "reports/transfer-gate.xml"
GITHUB = {"GITHUB_ACTIONS": "true"}


# --- escaping ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "data", "prop"),
    [
        ("plain", "plain", "plain"),
        ("100%", "100%25", "100%25"),
        ("a\nb", "a%0Ab", "a%0Ab"),
        ("a\r\nb", "a%0D%0Ab", "a%0D%0Ab"),
        ("a:b,c", "a:b,c", "a%3Ab%2Cc"),
        # % first, so an escape already in the text stays literal text.
        ("%0A", "%250A", "%250A"),
        ("::error::x", "::error::x", "%3A%3Aerror%3A%3Ax"),
    ],
)
def test_escaping_follows_githubs_rules(text: str, data: str, prop: str) -> None:
    assert escape_data(text) == data
    assert escape_property(text) == prop


def test_workflow_command_leaves_out_missing_properties() -> None:
    assert workflow_command("error", "m") == "::error::m"
    assert workflow_command("error", "m", file="a.py", line=None, title="t") == (
        "::error file=a.py,title=t::m"
    )
    assert workflow_command("warning", "x\ny", title="a:b") == "::warning title=a%3Ab::x%0Ay"


def test_property_values_with_commas_and_colons_stay_one_property() -> None:
    run = run_of(region("step", transfers=(transfer(path="odd,dir/a:b.py"),)))
    (line,) = annotation_lines(run, REPORT)
    assert line.startswith("::error file=odd%2Cdir/a%3Ab.py,line=12,title=")


def test_hostile_messages_cannot_start_a_workflow_command_of_their_own() -> None:
    hostile = "boom\n::add-mask::secret\r\n::stop-commands::x 100%"
    run = run_of(
        region("step", error=region_error(message=hostile)),
        region("check", checks=(CheckOutcome(CheckName.CUSTOM, False, hostile),)),
    )
    lines = annotation_lines(run, REPORT)
    assert len(lines) == 2
    for line in lines:
        assert "\n" not in line
        assert "\r" not in line
        assert line.startswith("::error ")
        assert "100%25" in line


# --- annotations: what, where, how many ----------------------------------------------------------


def test_annotations_put_transfers_first_then_errors_then_checks() -> None:
    run = run_of(
        region("checked", checks=(FAILED_CHECK,), has_checks=True),
        region("broken", error=region_error()),
        region("leaky", transfers=(transfer(line=17),)),
    )
    lines = annotation_lines(run, REPORT)
    assert [line.split("title=")[1].split("::")[0] for line in lines] == [
        "transfer-gate%3A train.leaky%3A implicit host-to-device transfer",
        "transfer-gate%3A train.broken%3A step raised",
        "transfer-gate%3A train.checked%3A result check failed%3A reference",
    ]
    assert lines[0].startswith("::error file=examples/bad.py,line=17,")
    assert lines[1].startswith("::error file=examples/bad.py,line=30,")
    assert lines[2].startswith("::error file=policies/train.yaml,line=7,")
    assert "%0Afix: put inputs on the device" in lines[0]
    assert lines[2].endswith("::max abs diff 0.3 > 1e-05")


def test_one_annotation_per_line_of_code_whatever_the_phases() -> None:
    run = run_of(
        region(
            "leaky",
            transfers=(
                transfer(line=12, phase=Phase.FIRST_CALL),
                transfer(line=12, phase=Phase.STEADY_STATE),
                transfer(line=13, failing=False),
            ),
        )
    )
    (line,) = annotation_lines(run, REPORT)
    assert "line=12" in line
    assert "per step" in line
    assert "first call" in line


def test_passing_run_has_no_annotations() -> None:
    assert annotation_lines(run_of(region("ok")), REPORT) == []


def test_a_gate_error_without_a_file_is_annotated_without_one() -> None:
    bug = RegionResult(
        suite="transfer-gate",
        name="gate",
        policy_path="",
        policy_line=0,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        error=RegionError(ErrorKind.INTERNAL, "transfer-gate itself failed", "Traceback"),
    )
    (line,) = annotation_lines(RunResult((SuiteResult("transfer-gate", "", (bug,)),)), REPORT)
    assert line.startswith("::error title=transfer-gate%3A transfer-gate.gate%3A gate error::")


@pytest.mark.parametrize(("findings", "errors"), [(9, 9), (10, 10), (11, 10), (25, 10)])
def test_at_most_ten_error_annotations_then_a_count(findings: int, errors: int) -> None:
    run = run_of(region("leaky", transfers=tuple(transfer(line=100 + i) for i in range(findings))))
    lines = annotation_lines(run, REPORT)
    assert MAX_ERROR_ANNOTATIONS == 10
    assert sum(1 for line in lines if line.startswith("::error ")) == errors
    left = findings - errors
    if left:
        assert lines[-1].startswith("::warning title=transfer-gate::")
        assert f"{left} more finding" in lines[-1]
        assert REPORT in lines[-1]
        assert len(lines) == errors + 1
    else:
        assert len(lines) == errors


def test_the_most_important_findings_win_the_ten_slots() -> None:
    checks = tuple(CheckOutcome(CheckName.CUSTOM, False, f"check {i}") for i in range(8))
    run = run_of(
        region("checked", checks=checks, has_checks=True),
        region("leaky", transfers=tuple(transfer(line=100 + i) for i in range(8))),
    )
    errors = [line for line in annotation_lines(run, REPORT) if line.startswith("::error")]
    assert sum("transfer::" in line for line in errors) == 8
    assert sum("result check failed" in line for line in errors) == 2


# --- the job summary -----------------------------------------------------------------------------


def test_summary_has_a_row_per_region_and_the_findings() -> None:
    run = run_of(
        region("ok", cost=_cost(603_460.0)),
        region(
            "leaky",
            transfers=(
                transfer(line=12),
                transfer(line=14),
                transfer(Direction.DEVICE_TO_HOST, line=20),
            ),
        ),
        region("broken", error=region_error(), timing=None, boundaries=()),
        region("checked", checks=(FAILED_CHECK,), has_checks=True),
    )
    text = render_summary(run, REPORT)
    assert text.startswith("## transfer-gate: 1 passed, 3 failed\n")
    rows = [line for line in text.splitlines() if line.startswith("| `train.")]
    assert "| Region | Status | Failing transfers | Median step | Cost | Boundary costs |" in text
    assert rows == [
        "| `train.ok` | pass | none | 1.23 ms | 603 kFLOP/step | pkg.io:save: 20 calls, "
        "3.10 ms total, 155 µs per step |",
        "| `train.leaky` | **FAIL**: transfers | device-to-host: 1 line, host-to-device: 2 lines "
        "| 1.23 ms | — | pkg.io:save: 20 calls, 3.10 ms total, 155 µs per step |",
        "| `train.broken` | **ERROR**: step raised | — | — | — | — |",
        "| `train.checked` | **FAIL**: checks: reference | none | 1.23 ms | — "
        "| pkg.io:save: 20 calls, 3.10 ms total, 155 µs per step |",
    ]
    assert "- `examples/bad.py:12`: implicit host-to-device float32\\[8\\]" in text
    assert "  fix: put inputs on the device" in text
    assert "- `examples/bad.py:30`: step raised: ValueError: boom" in text
    assert "<details><summary>details</summary>" in text
    assert "- `policies/train.yaml:7`: result check failed: reference: max abs diff" in text
    assert text.endswith(f"\nFull report: `{REPORT}`\n")


def _cost(flops: float) -> StepCost:
    return step_cost((FunctionCost("jit(step)", 1, 1, (("flops", flops),)),), None)


def test_summary_cost_column_is_a_dash_when_the_cost_was_not_measured() -> None:
    run = run_of(
        region("old_jax", cost=not_measured("this JAX has no compile hook")),
        # Measured, but XLA gave no flop count: nothing to show as the terminal shows nothing.
        region("no_flops", cost=step_cost((FunctionCost("jit(s)", 1, 1, ()),), None)),
    )
    rows = [line for line in render_summary(run, REPORT).splitlines() if "| `train." in line]
    assert [row.split(" | ")[4] for row in rows] == ["—", "—"]


def test_summary_shows_a_failing_cost_comparison_against_the_base_and_the_baseline() -> None:
    doubled = compare_costs(_cost(2.1e6), _cost(4.2e6), CostRule(max_increase=1.05))
    baseline = dataclasses.replace(doubled, against="baseline")
    report_only = compare_costs(_cost(2.1e6), _cost(4.2e6), CostRule(max_work_increase=2.5))
    unmeasured = compare_costs(not_measured("no hook"), _cost(4.2e6), CostRule(1.05))
    run = run_of(
        region(
            "vs_base",
            cost=_cost(4.2e6),
            base=BaseComparison("HEAD~1", BaseStatus.COMPARED, cost=doubled),
        ),
        region("vs_baseline", cost=_cost(4.2e6), cost_vs_baseline=baseline),
        region(
            "changed",
            cost=_cost(4.2e6),
            base=BaseComparison("HEAD~1", BaseStatus.COMPARED, cost=report_only),
        ),
        region(
            "same", cost=_cost(4.2e6), base=BaseComparison("HEAD~1", BaseStatus.COMPARED, cost=None)
        ),
        region(
            "unmeasured",
            cost=_cost(4.2e6),
            base=BaseComparison("HEAD~1", BaseStatus.COMPARED, cost=unmeasured),
        ),
    )
    text = render_summary(run, REPORT)
    headline = "total: flops 2.10e6 → 4.20e6 (2.00x); jit(step): flops 2.10e6 → 4.20e6 (2.00x)"
    # The one edit that accepts it, as Markdown escapes it.
    edit = "\\`cost: {max\\_work\\_increase: 2, max\\_increase: 2}\\` in the region"
    # The region table says why it failed, ...
    assert "| `train.vs_base` | **FAIL**: cost vs base | none | 1.23 ms | 4.2 MFLOP/step |" in text
    assert "| `train.vs_baseline` | **FAIL**: cost vs baseline | none |" in text
    assert "| `train.changed` | pass | none |" in text
    # ... the comparison table has a row for each cost comparison that found a change, ...
    table = text.split("### Against the base")[1].split("###")[0]
    assert (
        f"| `train.vs_base` cost | — | — | — | **FAIL**: cost beyond 1.05x the base: {headline}; "
        f"if every later change may do this too, raise the bound: {edit} |\n"
    ) in table
    assert (
        f"| `train.vs_baseline` cost (vs baseline) | — | — | — | **FAIL**: cost beyond 1.05x "
        f"the baseline: {headline}; if intended, record the baseline again, or accept it with "
        f"{edit} |\n"
    ) in table
    assert f"| `train.changed` cost | — | — | — | cost changed against the base: {headline} |" in (
        table
    )
    assert "`train.same` cost" not in table
    # A bound nobody could check fails, saying so, instead of passing as "not compared".
    assert (
        "| `train.unmeasured` cost | — | — | — | **FAIL**: cost not checked against the base: "
        "base: no hook, so cost.max\\_increase 1.05x cannot bound it |"
    ) in table
    # ... and the findings say it again, with the whole headline.
    findings = text.split("### Findings")[1]
    assert f"cost vs base: cost beyond 1.05x the base: {headline}" in findings
    assert f"cost vs baseline: cost beyond 1.05x the baseline: {headline}" in findings


def test_summary_escapes_user_text_and_fences_tracebacks() -> None:
    traceback = "Traceback\n```\nnot the end of the block\n````\n  <b>x</b>"
    run = run_of(
        region(
            "broken",
            error=region_error(message="<script>alert(1)</script> | *x*", details=traceback),
        )
    )
    text = render_summary(run, REPORT)
    assert "\\<script\\>alert(1)\\</script\\> \\| \\*x\\*" in text
    assert "<script>" not in text
    # The fence is longer than any run of backticks inside, so the block holds it all.
    assert "  `````text\n  Traceback\n" in text
    assert "\n  `````\n" in text


def test_summary_cuts_a_huge_traceback() -> None:
    run = run_of(region("broken", error=region_error(details="x" * (MAX_DETAILS_CHARS * 5))))
    text = render_summary(run, REPORT)
    assert len(text) < MAX_DETAILS_CHARS + 5_000
    assert f"{MAX_DETAILS_CHARS * 4} more characters in the report" in text


def test_summary_of_an_empty_run_says_no_regions_ran() -> None:
    text = render_summary(RunResult(()), REPORT)
    assert text.startswith("## transfer-gate: no regions ran\n")
    assert "|" not in text


@pytest.mark.parametrize("limit", [2_000, 50_000, MAX_SUMMARY_BYTES])
def test_summary_stays_within_the_limit_and_says_what_it_left_out(limit: int) -> None:
    regions = [
        region(
            f"r{i:05d}",
            transfers=tuple(transfer(line=j) for j in range(3)),
            error=region_error(details="frame\n" * 400) if i % 2 else None,
            cost=_cost(603_460.0),
        )
        for i in range(3_000)
    ]
    text = render_summary(run_of(*regions), REPORT, limit)
    assert len(text.encode("utf-8")) <= limit
    assert "_Summary cut to fit GitHub's limit of 1024 KiB per step: " in text
    assert text.endswith(f"\nFull report: `{REPORT}`\n")
    assert text.startswith("## transfer-gate: 0 passed, 3000 failed\n")


def test_summary_that_fits_is_not_cut() -> None:
    text = render_summary(run_of(region("ok")), REPORT, 10_000)
    assert "Summary cut" not in text


def test_summary_is_empty_when_not_even_the_heading_fits() -> None:
    assert render_summary(run_of(region("ok")), REPORT, 20) == ""


# --- report_to_github ----------------------------------------------------------------------------


def test_nothing_outside_github_actions(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("before\n")
    out = io.StringIO()
    run = run_of(region("leaky", transfers=(transfer(),)))
    for environ in ({}, {"GITHUB_ACTIONS": "false"}, {"GITHUB_ACTIONS": "1"}):
        report_to_github(run, REPORT, {**environ, "GITHUB_STEP_SUMMARY": str(summary)}, out)
    assert out.getvalue() == ""
    assert summary.read_text() == "before\n"


def test_summary_is_appended_within_what_the_step_has_left(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    earlier = "x" * (MAX_SUMMARY_BYTES - 3_000) + "\n"
    summary.write_text(earlier)
    out = io.StringIO()
    run = run_of(*(region(f"r{i}", transfers=(transfer(),)) for i in range(200)))
    report_to_github(run, REPORT, {**GITHUB, "GITHUB_STEP_SUMMARY": str(summary)}, out)
    written = summary.read_bytes()
    assert written.startswith(earlier.encode())
    assert len(written) <= MAX_SUMMARY_BYTES
    assert b"Summary cut" in written
    assert out.getvalue().count("::error ") == 10


def test_a_full_or_unwritable_summary_costs_a_warning_not_the_run(tmp_path: Path) -> None:
    full = tmp_path / "full.md"
    full.write_text("x" * MAX_SUMMARY_BYTES)
    out = io.StringIO()
    report_to_github(
        run_of(region("ok")), REPORT, {**GITHUB, "GITHUB_STEP_SUMMARY": str(full)}, out
    )
    assert out.getvalue().startswith("::warning title=transfer-gate::no room left in the job")
    assert full.stat().st_size == MAX_SUMMARY_BYTES

    out = io.StringIO()
    report_to_github(
        run_of(region("ok")), REPORT, {**GITHUB, "GITHUB_STEP_SUMMARY": str(tmp_path)}, out
    )
    assert out.getvalue().startswith("::warning title=transfer-gate::cannot write the job summary")


# --- through the real CLI ------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo", {"mod.py": STEPS, "policies/p.yaml": policy("step", "leaky")}
    )


def test_run_in_github_actions_annotates_and_writes_the_summary(repo: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("written earlier in the step\n")
    env = {**GITHUB, "GITHUB_STEP_SUMMARY": str(summary)}
    run = run_gate(repo, "run", env=env)
    assert run.returncode == ExitCode.REGION_FAILED, run
    line = line_of(repo / "mod.py", "return step(np.zeros")
    errors = [x for x in run.stdout.splitlines() if x.startswith("::error ")]
    assert errors == [
        f"::error file=mod.py,line={line},title=transfer-gate%3A p.leaky%3A implicit "
        "host-to-device transfer::implicit host-to-device float32[3], 1x per step, 1x on the "
        "first call%0Afix: put inputs on the device in setup or the data loader "
        "(jax.device_put); don't pass NumPy arrays or Python scalars to jitted functions or to "
        "eager jnp ops on device arrays"
    ], run
    text = summary.read_text()
    assert text.startswith("written earlier in the step\n\n## transfer-gate: 1 passed, 1 failed\n")
    assert "| `p.step` | pass | none |" in text
    assert "| `p.leaky` | **FAIL**: transfers | host-to-device: 1 line |" in text
    assert f"- `mod.py:{line}`: implicit host-to-device float32\\[3\\]" in text
    assert "Full report: `reports/transfer-gate.xml`" in text
    run.junit()


def test_run_outside_github_actions_prints_no_workflow_commands(repo: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("")
    run = run_gate(repo, "run", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert run.returncode == ExitCode.REGION_FAILED, run
    assert "::" not in run.stdout
    assert summary.read_text() == ""


def test_invalid_policy_is_annotated_on_its_line(repo: Path, tmp_path: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step") + "    gaurd: disallow\n"})
    summary = tmp_path / "step_summary.md"
    run = run_gate(repo, "run", env={**GITHUB, "GITHUB_STEP_SUMMARY": str(summary)})
    assert run.returncode == ExitCode.USAGE, run
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("::error ")]
    assert line.startswith("::error file=policies/p.yaml,line=7,title=transfer-gate%3A p.policy")
    assert "unknown key 'gaurd'" in line
    assert "**ERROR**: invalid policy" in summary.read_text()


def test_cancelled_regions_are_one_warning_not_an_error_each() -> None:
    cancelled = [
        region(name, error=region_error(ErrorKind.CANCELLED, message="SIGTERM arrived"))
        for name in ("a", "b")
    ]
    lines = annotation_lines(run_of(region("ok"), *cancelled), REPORT)
    assert not [line for line in lines if line.startswith("::error")]
    (warning,) = lines
    assert warning.startswith("::warning title=transfer-gate%3A run cancelled::")
    assert "before 2 regions finished (train.a, train.b)" in warning


def test_an_error_annotation_carries_the_usual_fix() -> None:
    timed_out = region("slow", error=region_error(ErrorKind.TIMEOUT, message="still running"))
    (line,) = annotation_lines(run_of(timed_out), REPORT)
    assert "%0Afix: raise the region's timeout_s in the policy" in line


def test_source_lines_keep_their_pipes_outside_tables() -> None:
    found = transfer(line=12, source="y = a | b")
    summary = render_summary(run_of(region("s", transfers=(found,))), REPORT)
    assert "  `y = a | b`\n" in summary  # a list item: no table to break, no backslash


def test_summary_names_the_platform_and_what_went_unchecked() -> None:
    seen = region(
        "s",
        platform="cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2",
        coverage=(
            ("host-to-device", CoverageJudge.GUARD),
            ("device-to-host", CoverageJudge.NOT_CHECKED),
        ),
    )
    summary = render_summary(run_of(seen), REPORT)
    assert "\nPlatform: cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2\n" in summary
    assert "\n**Not checked on this platform: device-to-host**\n" in summary


def test_transfer_annotations_come_in_the_findings_order_one_per_array() -> None:
    from dataclasses import replace

    from gate.report.github_annotations import region_annotations

    init = transfer(line=3)  # first call only: an initialiser
    hot = transfer(line=9, phase=Phase.STEADY_STATE, count=2)
    x = replace(transfer(line=7, phase=Phase.STEADY_STATE, dtype="float32"), argument="x")
    y = replace(
        transfer(line=7, phase=Phase.STEADY_STATE, dtype="int32", shape=(32,)), argument="y"
    )
    found = region_annotations(region(transfers=(init, hot, x, y)))
    assert [(a.line, a.message) for a in found] == [
        (9, "implicit host-to-device float32[8], 2x per step"),
        (7, "implicit host-to-device argument 'x' float32[8], 1x per step"),
        (7, "implicit host-to-device argument 'y' int32[32], 1x per step"),
        (3, "implicit host-to-device float32[8], 1x on the first call"),
    ]
