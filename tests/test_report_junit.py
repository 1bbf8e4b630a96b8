"""The JUnit writer: valid against tests/junit.xsd, counts that add up, failures never lost."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import junit_xml  # not `from junit_xml import TestCase`: pytest would try to collect it
import pytest
import xmlschema
from result_samples import FAILED_CHECK, POLICY, SETUP_ERROR, region, run_of, transfer

from gate.levels import Direction, GuardLevel, GuardSpec
from gate.report import junit as report_junit
from gate.report.junit import ReportWriteError, render_junit, write_junit
from gate.report.junit_cases import Case, Outcome
from gate.results.errors import ErrorKind, RegionError
from gate.results.hints import hint_for
from gate.results.records import CheckName, CheckOutcome, Phase, RunResult, SuiteResult, Transfer
from gate.user_code import SourceLocation

XSD = Path(__file__).parent / "junit.xsd"

# --- sample runs, built from result_samples -----------------------------------------------

SAMPLES: dict[str, RunResult] = {
    "empty run": RunResult(()),
    "empty suite": run_of(),
    "passing": run_of(region()),
    "host-to-device": run_of(region(transfers=(transfer(),))),
    "device-to-host": run_of(region(transfers=(transfer(Direction.DEVICE_TO_HOST, shape=()),))),
    "device-to-device": run_of(region(transfers=(transfer(Direction.DEVICE_TO_DEVICE),))),
    "several and logged": run_of(
        region(
            transfers=(
                transfer(line=12),
                transfer(Direction.DEVICE_TO_HOST, line=14, phase=Phase.STEADY_STATE),
                transfer(Direction.DEVICE_TO_DEVICE, line=16),
                transfer(Direction.DEVICE_TO_HOST, failing=False, line=20),
            )
        )
    ),
    "logged only": run_of(region(transfers=(transfer(failing=False),))),
    "first call and steady state at one line": run_of(
        region(
            transfers=(
                transfer(source="y = x + np.ones(8)"),
                transfer(phase=Phase.STEADY_STATE, count=3, dtype=None, shape=None),
            )
        )
    ),
    "six failing lines": run_of(
        region(transfers=tuple(transfer(line=line) for line in range(10, 16)))
    ),
    "thread": run_of(
        region(
            transfers=(
                transfer(Direction.DEVICE_TO_HOST, phase=Phase.STEADY_STATE, thread="worker"),
            )
        )
    ),
    "notes": run_of(
        region(transfers=(transfer(),), notes=("no transfer map", "second note")),
        region("ok", notes=("no transfer map",)),
        region("e", error=SETUP_ERROR, notes=("no transfer map",)),
    ),
    "explicit outside boundary": run_of(
        region(
            guard=GuardSpec.uniform(GuardLevel.DISALLOW_EXPLICIT),
            transfers=(transfer(Direction.DEVICE_TO_HOST, explicit=True),),
        )
    ),
    "no location, no dtype": run_of(
        region(
            transfers=(
                Transfer(
                    Direction.HOST_TO_DEVICE, False, None, None, None, Phase.FIRST_CALL, True, ""
                ),
            )
        )
    ),
    "error": run_of(region(error=SETUP_ERROR, transfers=(transfer(),))),
    "error with checks": run_of(region(error=SETUP_ERROR, has_checks=True)),
    "error without location": run_of(region(error=replace(SETUP_ERROR, location=None))),
    "failed checks": run_of(
        region(
            has_checks=True,
            checks=(
                CheckOutcome(CheckName.FINITE, True, "all 8 values finite"),
                FAILED_CHECK,
                CheckOutcome(CheckName.CUSTOM, False, "loss went up"),
            ),
        )
    ),
    "passing checks": run_of(
        region(has_checks=True, checks=(CheckOutcome(CheckName.FINITE, True, "ok"),))
    ),
    "ansi and unicode": run_of(
        region(
            name="größe ✓ 数据",
            transfers=(transfer(message="\x1b[31mDisallowed\x1b[0m host-to-device 数据 \x00"),),
            error=None,
        ),
        region(
            name="err",
            error=RegionError(
                ErrorKind.STEP, "\x1b[1mKeyError\x1b[0m: 'ключ'\nsecond line", "\x1b[31mtb\r\n"
            ),
        ),
    ),
    "no timing, tiny wall time": run_of(region(timing=None, boundaries=(), wall_s=1e-5)),
    "two suites": RunResult(
        (
            SuiteResult("train", POLICY, (region(), region("bad", transfers=(transfer(),)))),
            SuiteResult(
                "serve",
                "policies/serve.yaml",
                (replace(region("e", error=SETUP_ERROR, has_checks=True), suite="serve"),),
            ),
        )
    ),
}


# --- reading reports back -------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(XSD)


def written(run: RunResult, tmp_path: Path, schema: xmlschema.XMLSchema) -> ET.Element:
    """Write `run`, validate it against the XSD, check the counts, return the root."""
    path = tmp_path / "report.xml"
    write_junit(run, path)
    schema.validate(str(path))
    root = ET.parse(path).getroot()
    assert_counts_add_up(root)
    return root


def assert_counts_add_up(root: ET.Element) -> None:
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        found = {
            "tests": len(cases),
            "failures": sum(len(c.findall("failure")) for c in cases),
            "errors": sum(len(c.findall("error")) for c in cases),
        }
        assert {k: int(suite.get(k, "-1")) for k in found} == found
        for key, value in found.items():
            totals[key] += value
    # junit-xml writes no totals on an empty <testsuites/>; readers take 0.
    default = "0" if not root.findall("testsuite") else "-1"
    assert {k: int(root.get(k, default)) for k in totals} == totals


def case(root: ET.Element, name: str) -> ET.Element:
    [element] = [c for c in root.iter("testcase") if c.get("name") == name]
    return element


def only(element: ET.Element, tag: str) -> ET.Element:
    [child] = element.findall(tag)
    return child


# --- every report -----------------------------------------------------------------------------


@pytest.mark.parametrize("run", SAMPLES.values(), ids=SAMPLES.keys())
def test_every_report_is_valid_and_its_counts_add_up(
    run: RunResult, tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(run, tmp_path, schema)
    assert len(root.findall("testsuite")) == len(run.suites)
    for result in [*root.iter("failure"), *root.iter("error")]:
        assert (result.get("message") or "").strip()
        assert "\n" not in (result.get("message") or "")


@pytest.mark.parametrize("run", SAMPLES.values(), ids=SAMPLES.keys())
def test_every_region_that_does_not_pass_has_a_failure_or_error(
    run: RunResult, tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(run, tmp_path, schema)
    for result in run.regions:
        cases = [c for c in root.iter("testcase") if c.get("classname") == result.classname]
        outcomes = [o for c in cases for o in (*c.findall("failure"), *c.findall("error"))]
        assert bool(outcomes) == (not result.passed), result.name


def test_layout_one_suite_per_policy_and_cases_per_region(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["two suites"], tmp_path, schema)
    suites = root.findall("testsuite")
    assert [(s.get("name"), s.get("file")) for s in suites] == [
        ("train", POLICY),
        ("serve", "policies/serve.yaml"),
    ]
    assert [(c.get("classname"), c.get("name")) for c in root.iter("testcase")] == [
        ("train.step", "step: transfers"),
        ("train.bad", "bad: transfers"),
        ("serve.e", "e: transfers"),
        ("serve.e", "e: result checks"),
    ]


# --- transfers ----------------------------------------------------------------------------


def test_one_failing_transfer_message_says_what_and_where(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["host-to-device"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    failure = only(testcase, "failure")
    assert failure.get("message") == (
        "implicit host-to-device transfer float32[8] at examples/bad.py:12, 1x on the first call"
    )
    assert (testcase.get("file"), testcase.get("line")) == ("examples/bad.py", "12")
    assert testcase.get("time") == "0.500000"
    body = failure.text or ""
    assert body.startswith(
        "1 line with failing transfers, most severe first:\n"
        "- examples/bad.py:12 in train_step: implicit host-to-device float32[8]"
        " — 1x on the first call\n"
        "  guard level: disallow (FAILS)\n"
        "  seen by: Disallowed host-to-device transfer: aval=ShapedArray(float32[8])\n"
        f"  fix: {hint_for(transfer())}\n"
    )


@pytest.mark.parametrize("direction", list(Direction))
def test_each_direction_is_named_with_its_hint(
    direction: Direction, tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    finding = transfer(direction, dtype="bfloat16", shape=(2, 3))
    root = written(run_of(region(transfers=(finding,))), tmp_path, schema)
    failure = only(case(root, "step: transfers"), "failure")
    assert f"implicit {direction.label} transfer bfloat16[2,3] at examples/bad.py:12" in (
        failure.get("message") or ""
    )
    assert hint_for(finding) in (failure.text or "")


def test_several_failing_lines_name_the_most_frequent_and_list_the_rest(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["several and logged"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    failure = only(testcase, "failure")
    # Line 14 happens every step, so it leads, and the annotation goes there; the
    # uncommitted device-to-device move at 16 is copied every step too (JAX checks it
    # on the first call only), so it comes before 12, which moves on the first call only.
    assert failure.get("message") == (
        "3 lines move data: implicit device-to-host transfer float32[8] "
        "at examples/bad.py:14, 1x per step; also examples/bad.py:16, examples/bad.py:12"
    )
    assert (testcase.get("file"), testcase.get("line")) == ("examples/bad.py", "14")
    body = failure.text or ""
    assert body.startswith("3 lines with failing transfers, most severe first:\n")
    failing_part, logged_part = body.split(
        "1 other line moving data (logged or allowed, not failing):"
    )
    entries = [
        "- examples/bad.py:14 in train_step: implicit device-to-host float32[8] — 1x per step",
        "- examples/bad.py:16 in train_step: implicit device-to-device float32[8]"
        " — every step; JAX checks it on the first call only",
        "- examples/bad.py:12 in train_step: implicit host-to-device float32[8]"
        " — 1x on the first call",
    ]
    positions = [failing_part.index(entry) for entry in entries]
    assert positions == sorted(positions)
    assert failing_part.count("(FAILS)") == 3
    assert "examples/bad.py:20 in train_step: implicit device-to-host float32[8]" in logged_part
    assert "guard level: disallow (allowed)" in logged_part
    assert "examples/bad.py:20" not in failing_part
    for direction in Direction:
        assert f"fix: {hint_for(transfer(direction))}" in failing_part


THREE_MORE = "also examples/bad.py:11, examples/bad.py:12, examples/bad.py:13"


def test_the_annotated_line_is_the_host_sync_not_the_busier_upload(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    # optax 47404ab6's momo: Python scalars uploaded 3x per step at line 98, the host sync
    # (`if count == jnp.zeros(...)`) once per step at 91. The sync is what to fix first.
    uploads = transfer(line=98, phase=Phase.STEADY_STATE, count=3, shape=())
    sync = transfer(Direction.DEVICE_TO_HOST, line=91, phase=Phase.STEADY_STATE, shape=())
    once = transfer(Direction.DEVICE_TO_HOST, line=40)  # on the first call only
    root = written(run_of(region(transfers=(uploads, once, sync))), tmp_path, schema)
    testcase = case(root, "step: transfers")
    assert (testcase.get("file"), testcase.get("line")) == ("examples/bad.py", "91")
    message = only(testcase, "failure").get("message") or ""
    assert message.startswith(
        "3 lines move data: implicit device-to-host transfer float32[] at examples/bad.py:91"
    )
    assert message.endswith("also examples/bad.py:40, examples/bad.py:98")


@pytest.mark.parametrize(
    ("lines", "tail"),
    [
        (4, "also examples/bad.py:11, examples/bad.py:12, examples/bad.py:13"),
        (5, f"{THREE_MORE}, and 1 more (every one in this testcase's body)"),
        (6, f"{THREE_MORE}, and 2 more (every one in this testcase's body)"),
    ],
)
def test_many_failing_lines_name_three_more_then_count(
    lines: int, tail: str, tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    transfers = tuple(transfer(line=line) for line in range(10, 10 + lines))
    root = written(run_of(region(transfers=transfers)), tmp_path, schema)
    failure = only(case(root, "step: transfers"), "failure")
    assert failure.get("message") == (
        f"{lines} lines move data: implicit host-to-device transfer float32[8] "
        f"at examples/bad.py:10, 1x on the first call; {tail}"
    )
    body = failure.text or ""
    assert body.startswith(f"{lines} lines with failing transfers, most severe first:\n")
    for line in range(10, 10 + lines):
        assert f"- examples/bad.py:{line} in train_step:" in body


def test_first_call_and_steady_state_at_one_line_are_one_finding(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["first call and steady state at one line"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    failure = only(testcase, "failure")
    # The steady-state sighting has no dtype; the first call's fills it in.
    assert failure.get("message") == (
        "implicit host-to-device transfer float32[8] at examples/bad.py:12, "
        "3x per step, 1x on the first call"
    )
    assert (testcase.get("file"), testcase.get("line")) == ("examples/bad.py", "12")
    body = failure.text or ""
    entry = (
        "- examples/bad.py:12 in train_step: implicit host-to-device float32[8]"
        " — 3x per step, 1x on the first call\n"
        "    y = x + np.ones(8)\n"
    )
    assert body.startswith(f"1 line with failing transfers, most severe first:\n{entry}")
    assert body.count("- examples/bad.py:12") == 1
    assert body.count("fix: ") == 1
    stdout = only(testcase, "system-out").text or ""
    assert stdout.startswith(entry)
    assert stdout.count("- examples/bad.py:12") == 1


def test_a_line_in_a_loop_counts_per_step(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    looped = transfer(Direction.DEVICE_TO_HOST, phase=Phase.STEADY_STATE, count=3)
    root = written(run_of(region(transfers=(looped,))), tmp_path, schema)
    failure = only(case(root, "step: transfers"), "failure")
    assert failure.get("message") == (
        "implicit device-to-host transfer float32[8] at examples/bad.py:12, 3x per step"
    )
    entry = "- examples/bad.py:12 in train_step: implicit device-to-host float32[8] — 3x per step"
    assert entry in (failure.text or "")


def test_thread_is_named_in_message_and_body(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    root = written(SAMPLES["thread"], tmp_path, schema)
    failure = only(case(root, "step: transfers"), "failure")
    assert failure.get("message") == (
        "implicit device-to-host transfer float32[8] in thread worker "
        "at examples/bad.py:12, 1x per step"
    )
    assert (
        "- examples/bad.py:12 in train_step: implicit device-to-host float32[8] — 1x per step\n"
        "  in thread worker\n"
    ) in (failure.text or "")


def test_notes_reach_the_body_and_system_out(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    root = written(SAMPLES["notes"], tmp_path, schema)
    failing = case(root, "step: transfers")
    for text in (only(failing, "failure").text, only(failing, "system-out").text):
        assert "Note: no transfer map\nNote: second note\n" in (text or "")
    passing = case(root, "ok: transfers")
    assert passing.findall("failure") == []
    assert "Note: no transfer map\n" in (only(passing, "system-out").text or "")
    errored = case(root, "e: transfers")
    assert "Note: no transfer map\n" in (only(errored, "error").text or "")
    assert "Note:" not in (only(failing, "failure").get("message") or "")


def test_failure_body_has_everything_a_reviewer_needs(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    finding = transfer(
        Direction.DEVICE_TO_HOST,
        boundary="pkg.io:save",
        message="raw JAX text",
        source="y = float(loss)",
    )
    guard = GuardSpec(GuardLevel.DISALLOW, GuardLevel.LOG_EXPLICIT, GuardLevel.DISALLOW)
    root = written(run_of(region(guard=guard, transfers=(finding,))), tmp_path, schema)
    testcase = case(root, "step: transfers")
    body = only(testcase, "failure").text or ""
    for expected in (
        "examples/bad.py:12 in train_step",
        "1x on the first call",
        "\n  in boundary pkg.io:save\n",
        "seen by: raw JAX text",
        "y = float(loss)",
        f"fix: {hint_for(finding)}",
        "host-to-device=disallow, device-to-host=log_explicit, device-to-device=disallow",
        "inside declared boundaries: host-to-device=disallow, device-to-host=log,",
        "median 1.23 ms",
        "20 repeats",
        "pkg.io:save: 20 calls, 3.10 ms total, 155 µs per step",
        f"{POLICY}:7",
    ):
        assert expected in body
    stdout = only(testcase, "system-out").text or ""
    for expected in ("median 1.23 ms", "pkg.io:save: 20 calls", "device-to-host=log_explicit"):
        assert expected in stdout


def test_properties_carry_the_numbers(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    root = written(SAMPLES["host-to-device"], tmp_path, schema)
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["step.timing.median_s"] == "0.00123"
    assert properties["step.timing.repeats"] == "20"
    assert properties["step.boundary[pkg.io:save].calls"] == "20"
    assert properties["step.boundary[pkg.io:save].per_step_s"] == "0.000155"
    assert properties["step.guard.host_to_device"] == "disallow"
    assert properties["step.transfers.failing"] == "1"
    assert properties["step.policy"] == f"{POLICY}:7"


def test_passing_region_points_at_its_policy_and_shows_logged_transfers(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["logged only"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    assert testcase.findall("failure") == []
    assert (testcase.get("file"), testcase.get("line")) == (POLICY, "7")
    stdout = only(testcase, "system-out").text or ""
    assert (
        "- examples/bad.py:12 in train_step: implicit host-to-device float32[8]"
        " — 1x on the first call\n"
        "  guard level: disallow (allowed)\n"
    ) in stdout


def test_explicit_transfer_outside_a_boundary(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    root = written(SAMPLES["explicit outside boundary"], tmp_path, schema)
    failure = only(case(root, "step: transfers"), "failure")
    assert failure.get("message") == (
        "explicit device-to-host transfer float32[8] outside a declared boundary "
        "at examples/bad.py:12, 1x on the first call"
    )
    assert "\n  outside a declared boundary\n" in (failure.text or "")
    assert "boundaries:" in (failure.text or "")


def test_transfer_without_location_falls_back_to_the_policy(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["no location, no dtype"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    assert (testcase.get("file"), testcase.get("line")) == (POLICY, "7")
    failure = only(testcase, "failure")
    assert failure.get("message") == (
        "implicit host-to-device transfer at an unknown line, 1x on the first call"
    )
    body = failure.text or ""
    assert f"- {POLICY}:7 in ?: implicit host-to-device — 1x on the first call" in body
    assert "(no frame of your code found; the location is the region's policy entry)" in body


# --- errors and checks ----------------------------------------------------------------------


def test_error_replaces_the_transfer_verdict(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    root = written(SAMPLES["error"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    assert testcase.findall("failure") == []
    error = only(testcase, "error")
    assert error.get("message") == "setup raised: ValueError: boom"
    assert "Traceback (most recent call last)" in (error.text or "")
    assert (
        "Transfers seen before the error:\n"
        "- examples/bad.py:12 in train_step: implicit host-to-device float32[8]"
        " — 1x on the first call\n"
    ) in (error.text or "")
    assert (testcase.get("file"), testcase.get("line")) == ("examples/setup.py", "3")


def test_error_without_location_points_at_the_policy(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["error without location"], tmp_path, schema)
    testcase = case(root, "step: transfers")
    assert (testcase.get("file"), testcase.get("line")) == (POLICY, "7")


def test_error_makes_the_checks_case_an_error_too(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["error with checks"], tmp_path, schema)
    checks = case(root, "step: result checks")
    error = only(checks, "error")
    assert error.get("message") == "result checks not run: setup raised: ValueError: boom"
    assert root.get("errors") == "2"


def test_failed_checks(tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    root = written(SAMPLES["failed checks"], tmp_path, schema)
    assert case(root, "step: transfers").findall("failure") == []
    checks = case(root, "step: result checks")
    failure = only(checks, "failure")
    assert failure.get("message") == "2 result checks failed: reference, custom"
    body = failure.text or ""
    assert "pass finite: all 8 values finite" in body
    assert "FAIL reference: max abs diff 0.3 > 1e-05" in body
    assert "FAIL custom: loss went up" in body
    assert (checks.get("file"), checks.get("line")) == (POLICY, "7")


def test_one_failed_check_is_named_with_its_detail(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(run_of(region(has_checks=True, checks=(FAILED_CHECK,))), tmp_path, schema)
    failure = only(case(root, "step: result checks"), "failure")
    assert failure.get("message") == "result check failed: reference: max abs diff 0.3 > 1e-05"


def test_checks_case_only_when_the_region_has_checks(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["passing"], tmp_path, schema)
    assert [c.get("name") for c in root.iter("testcase")] == ["step: transfers"]
    root = written(SAMPLES["passing checks"], tmp_path, schema)
    assert [c.get("name") for c in root.iter("testcase")] == [
        "step: transfers",
        "step: result checks",
    ]
    assert case(root, "step: result checks").findall("failure") == []


# --- text that junit-xml would mangle -----------------------------------------------------------


def test_ansi_codes_are_escaped_visibly_and_unicode_kept(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["ansi and unicode"], tmp_path, schema)
    failing = case(root, "größe ✓ 数据: transfers")
    body = only(failing, "failure").text or ""
    assert "\\x1b[31mDisallowed\\x1b[0m host-to-device 数据 \\x00" in body
    error = only(case(root, "err: transfers"), "error")
    assert error.get("message") == "step raised: \\x1b[1mKeyError\\x1b[0m: 'ключ' second line"
    assert "\\x1b[31mtb" in (error.text or "")
    assert "\x1b" not in (tmp_path / "report.xml").read_text(encoding="utf-8")


def test_escaping_covers_exactly_what_junit_xml_strips() -> None:
    # Pins junit-xml's _clean_illegal_xml_chars: if an upgrade strips more,
    # text would be lost again; if it strips less, we escape needlessly.
    every_char = "".join(map(chr, range(0x110000)))
    kept = set(junit_xml._clean_illegal_xml_chars(every_char))
    stripped = {c for c in every_char if c not in kept}
    escaped = {c for c in every_char if report_junit._visible(c) != c}
    assert escaped == stripped
    assert junit_xml._clean_illegal_xml_chars(report_junit._visible(every_char)) == (
        report_junit._visible(every_char)
    )


def test_tiny_wall_time_keeps_times_plain_decimals(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    root = written(SAMPLES["no timing, tiny wall time"], tmp_path, schema)
    assert "e" not in (root.get("time") or "")
    assert "Step time: not measured" in (
        only(case(root, "step: transfers"), "system-out").text or ""
    )


def test_schema_is_strict(schema: xmlschema.XMLSchema) -> None:
    def report(testcase_body: str, time: str = "1.5") -> str:
        return (
            f'<testsuites><testsuite name="s" tests="1" failures="0" errors="0" time="{time}">'
            f'<testcase name="c" file="x.py" line="3">{testcase_body}</testcase>'
            "</testsuite></testsuites>"
        )

    assert schema.is_valid(report('<failure type="t" message="m">body</failure>'))
    assert not schema.is_valid(report('<failure type="t">body</failure>'))
    assert not schema.is_valid(report('<failure type="t" message=" ">body</failure>'))
    assert not schema.is_valid(report('<errors type="t" message="m"/>'))
    assert not schema.is_valid(report('<rerunFailure type="t"/>'))
    assert not schema.is_valid(report("", time="1e-05"))


# --- never an empty failure ---------------------------------------------------------------------


def test_junit_xml_drops_a_failure_without_message_or_output() -> None:
    # Pins the junit-xml 1.9 trap the writer works around; if this starts
    # failing, junit-xml changed and report_junit's guards can be revisited.
    silent = junit_xml.TestCase("silent")
    silent.add_failure_info()
    loud = junit_xml.TestCase("loud")
    loud.add_failure_info(message="boom")
    root = ET.fromstring(junit_xml.to_xml_report_string([junit_xml.TestSuite("s", [silent, loud])]))
    assert [len(c.findall("failure")) for c in root.iter("testcase")] == [0, 1]
    assert root.get("failures") == "1"
    assert not silent.is_failure()


def test_writer_falls_back_when_a_message_is_empty() -> None:
    planned = Case(
        "step: transfers",
        "train.step",
        POLICY,
        7,
        None,
        "",
        Outcome("failure", "t", "  ", ""),
    )
    junit_case = report_junit._junit_case(planned)
    root = ET.fromstring(junit_xml.to_xml_report_string([junit_xml.TestSuite("s", [junit_case])]))
    failure = only(case(root, "step: transfers"), "failure")
    assert failure.get("message") == "step: transfers: failure"


def test_writer_refuses_a_report_that_lost_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def drop(
        self: object, message: object = None, output: object = None, failure_type: object = None
    ) -> None:
        return None

    monkeypatch.setattr(junit_xml.TestCase, "add_failure_info", drop)
    path = tmp_path / "report.xml"
    with pytest.raises(AssertionError, match="expected"):
        write_junit(SAMPLES["host-to-device"], path)
    assert not path.exists()


# --- writing the file -------------------------------------------------------------------------


def test_write_creates_folders_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "out" / "nested" / "report.xml"
    write_junit(SAMPLES["host-to-device"], path)
    assert os.listdir(path.parent) == ["report.xml"]
    assert path.read_text(encoding="utf-8") == render_junit(SAMPLES["host-to-device"])


def test_write_replaces_an_existing_report_whole(tmp_path: Path) -> None:
    path = tmp_path / "report.xml"
    path.write_text("x" * 1_000_000, encoding="utf-8")
    write_junit(SAMPLES["passing"], path)
    assert path.read_text(encoding="utf-8") == render_junit(SAMPLES["passing"])
    assert os.listdir(tmp_path) == ["report.xml"]


def test_failed_write_keeps_the_old_report_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.xml"
    path.write_text("old report", encoding="utf-8")

    def broken_fsync(descriptor: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(ReportWriteError, match="Input/output error"):
        write_junit(SAMPLES["passing"], path)
    assert path.read_text(encoding="utf-8") == "old report"
    assert os.listdir(tmp_path) == ["report.xml"]


@pytest.mark.parametrize("make_unwritable", ["parent is a file", "path is a folder"])
def test_unwritable_path_raises_report_write_error(make_unwritable: str, tmp_path: Path) -> None:
    if make_unwritable == "parent is a file":
        (tmp_path / "blocker").write_text("", encoding="utf-8")
        path = tmp_path / "blocker" / "report.xml"
    else:
        path = tmp_path / "report.xml"
        path.mkdir()
    with pytest.raises(ReportWriteError) as caught:
        write_junit(SAMPLES["passing"], path)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    assert "writable path" in message
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_an_unfinished_region_never_reads_as_clean(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    crashed = region("boom", error=RegionError(ErrorKind.CRASH, "killed by SIGSEGV", "stack"))
    root = written(run_of(crashed), tmp_path, schema)
    out = case(root, "boom: transfers").findtext("system-out") or ""
    assert "Lines moving data: not determined, the region did not finish" in out
    assert "Lines moving data: none" not in out
    names = {p.get("name") for p in root.iter("property")}
    assert "boom.transfers.total" not in names
    body = only(case(root, "boom: transfers"), "error").text or ""
    assert "fix: run the step locally with `python -X faulthandler`" in body


def test_a_cancelled_region_points_at_its_policy_entry(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    running = SourceLocation("examples/step.py", 38, "step")
    stopped = region(
        "stopped", error=RegionError(ErrorKind.CANCELLED, "SIGTERM arrived", "stack", running)
    )
    testcase = case(written(run_of(stopped), tmp_path, schema), "stopped: transfers")
    assert (testcase.get("file"), testcase.get("line")) == (POLICY, "7")
