"""The run as a JUnit XML report, laid out for GitHub's PR annotation tools.

One ``<testsuite>`` per policy file (its path in ``file``). Each region
gives a ``<region>: transfers`` testcase and, when the region declares
result checks, a ``<region>: result checks`` testcase; both have the
classname ``<suite>.<region>``.

What the PR tools read: mikepenz/action-junit-report and
EnricoMi/publish-unit-test-result-action take the annotation's place from
``testcase@file``/``@line`` (https://github.com/mikepenz/action-junit-report/issues/740,
https://github.com/EnricoMi/publish-unit-test-result-action/issues/377) and its text
from the failure ``message``; only EnricoMi shows ``system-out``; none
shows ``<properties>``. So the message says what and where in one line,
the body says everything else (timing, boundary costs and guard levels
included), ``system-out`` repeats the region's details for passing cases,
and ``<properties>`` carries the same numbers for machines.

junit-xml 1.9 has two traps this module works around: a failure with
neither message nor body is silently dropped (the case then passes), and
characters illegal in XML (ANSI colour codes) are deleted, not escaped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from gate.files import write_bytes_atomically
from gate.levels import Direction
from gate.report.junit_cases import Case, region_cases
from gate.report.junit_collectives import communication_cases, communication_properties
from gate.report.junit_comparison import comparison_cases, comparison_properties
from gate.report.junit_memory import memory_cases
from gate.report.terminal import one_line
from gate.results.records import RunResult, SuiteResult


class ReportWriteError(Exception):
    """The report file could not be written; the message is one line: path, OS error, fix."""


# The characters junit-xml 1.9's `_clean_illegal_xml_chars` deletes (CR
# among them, but _visible turns CR into LF first). A test checks this set
# against junit-xml's own over every code point, so an upgrade that changes
# it is noticed.
_STRIPPED_BY_JUNIT_XML = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufdd0-\ufddf\ufffe\uffff"
    + "".join(
        f"{chr(plane + 0xFFFE)}-{chr(plane + 0xFFFF)}"
        for plane in range(0x10000, 0x110000, 0x10000)
    )
    + "]"
)


def _visible(text: str) -> str:
    """`text` with what junit-xml would delete spelled out, e.g. ESC as ``\\x1b``.

    The same idea as pytest's ``bin_xml_escape``: an ANSI-coloured
    traceback stays readable instead of silently losing characters.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _STRIPPED_BY_JUNIT_XML.sub(_escape_char, text)


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _attribute(text: str) -> str:
    """One-line, visibly escaped text for an XML attribute.

    junit-xml pretty-prints through minidom, which writes a newline in an
    attribute raw; XML parsers then read it back as a space anyway.
    """
    return _visible(one_line(text))


def _non_empty(text: str, fallback: str) -> str:
    # An empty message makes junit-xml drop the failure, and the case passes.
    return text if text.strip() else fallback


def render_junit(run: RunResult) -> str:
    """The JUnit XML text for `run`.

    Raises AssertionError when the XML junit-xml produced disagrees with
    what the run says (a missing failure, a wrong count): a gate bug that
    must not reach CI as a passing report.
    """
    planned = [
        (
            suite,
            [
                case
                for r in suite.regions
                for case in (
                    *region_cases(r),
                    *comparison_cases(r),
                    *communication_cases(r),
                    *memory_cases(r),
                )
            ],
        )
        for suite in run.suites
    ]
    suites = [
        TestSuite(
            _attribute(suite.name),
            [_junit_case(case) for case in cases],
            file=_attribute(suite.policy_path),
            properties=_properties(suite),
        )
        for suite, cases in planned
    ]
    xml_text: str = to_xml_report_string(suites, prettyprint=True)
    _check_rendered(xml_text, [cases for _, cases in planned])
    return xml_text


def write_junit(run: RunResult, path: Path) -> None:
    """Write the JUnit report for `run` to `path`, atomically.

    Parent folders are created. The text goes to a temporary file in the
    same folder, is fsynced, then renamed over `path`: a reader never sees
    a half-written report, which would read as "0 tests, all passed".
    Raises ReportWriteError when the path cannot be written.
    """
    data = render_junit(run).encode("utf-8")
    _write_atomically(path, data)


def write_report_file(path: Path, data: bytes) -> None:
    """Write an already rendered report to `path` the way `write_junit` does (atomically)."""
    _write_atomically(path, data)


def _write_atomically(path: Path, data: bytes) -> None:
    try:
        write_bytes_atomically(path, data)
    except OSError as exc:
        raise ReportWriteError(_write_error(path, exc)) from exc


def _write_error(path: Path, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return one_line(
        f"cannot write the JUnit report {path}: {reason}; "
        "choose a writable path for the report or fix that folder's permissions"
    )


def _junit_case(case: Case) -> TestCase:
    junit_case = TestCase(
        _attribute(case.name),
        classname=_attribute(case.classname),
        elapsed_sec=case.elapsed_s,
        stdout=_visible(case.stdout),
        file=_attribute(case.file),
        line=case.line,
    )
    outcome = case.outcome
    if outcome is not None:
        # Checked once more after rendering; this keeps the fallback local.
        message = _attribute(_non_empty(outcome.message, f"{case.name}: {outcome.tag}"))
        body = _visible(outcome.body)
        if outcome.tag == "failure":
            junit_case.add_failure_info(message=message, output=body, failure_type=outcome.kind)
        elif outcome.tag == "skipped":
            # junit-xml writes type="skipped" whatever is asked; the kind is in the message.
            junit_case.add_skipped_info(message=message, output=body)
        else:
            junit_case.add_error_info(message=message, output=body, error_type=outcome.kind)
    return junit_case


def _properties(suite: SuiteResult) -> dict[str, str]:
    """The numbers of every region, keyed ``<region>.<what>``, for machines.

    Boundary names contain dots and colons, so they go in brackets:
    ``step.boundary[pkg.io:save].calls``.
    """
    properties: dict[str, str] = {}
    platforms = sorted({r.platform for r in suite.regions if r.platform})
    if platforms:
        properties["platform"] = "; ".join(platforms)
    for region in suite.regions:
        prefix = f"{region.name}."
        properties[prefix + "policy"] = f"{region.policy_path}:{region.policy_line}"
        for label, judge in region.coverage:
            properties[f"{prefix}checked_by.{label}"] = judge
        for direction in Direction:
            properties[f"{prefix}guard.{direction.value}"] = region.guard.level(direction).value
        if region.error is None:  # an unfinished region's counts would read as "clean"
            properties[prefix + "transfers.total"] = str(len(region.transfers))
            properties[prefix + "transfers.failing"] = str(len(region.failing_transfers))
        properties[prefix + "wall_s"] = repr(region.wall_s)
        if region.error is not None:
            properties[prefix + "error"] = region.error.kind.name.lower()
        timing = region.timing
        if timing is not None:
            properties[prefix + "timing.repeats"] = str(timing.repeats)
            for stat, value in (
                ("min_s", timing.min_s),
                ("p25_s", timing.p25_s),
                ("median_s", timing.median_s),
                ("p75_s", timing.p75_s),
                ("max_s", timing.max_s),
            ):
                properties[f"{prefix}timing.{stat}"] = repr(value)
        for cost in region.boundaries:
            key = f"{prefix}boundary[{cost.name}]."
            properties[key + "calls"] = str(cost.calls)
            properties[key + "total_s"] = repr(cost.total_s)
            properties[key + "per_step_s"] = repr(cost.per_step_s)
        properties.update(comparison_properties(region))
        properties.update(communication_properties(region))
    return {_attribute(k): _attribute(v) for k, v in properties.items()}


def _check_rendered(xml_text: str, planned: list[list[Case]]) -> None:
    """Fail loudly if the XML says less than the run: a lost failure passes the merge."""
    root = ET.fromstring(xml_text)
    suites = root.findall("testsuite")
    if len(suites) != len(planned):
        raise AssertionError(f"JUnit report has {len(suites)} suites, expected {len(planned)}")
    for element, cases in zip(suites, planned, strict=True):
        testcases = element.findall("testcase")
        expected = {
            "tests": len(cases),
            "failures": sum(1 for c in cases if c.outcome and c.outcome.tag == "failure"),
            "errors": sum(1 for c in cases if c.outcome and c.outcome.tag == "error"),
            "skipped": sum(1 for c in cases if c.outcome and c.outcome.tag == "skipped"),
        }
        found = {
            "tests": len(testcases),
            "failures": sum(len(tc.findall("failure")) for tc in testcases),
            "errors": sum(len(tc.findall("error")) for tc in testcases),
            "skipped": sum(len(tc.findall("skipped")) for tc in testcases),
        }
        declared = {key: int(element.get(key, "-1")) for key in expected}
        if not expected == found == declared:
            raise AssertionError(
                f"JUnit suite {element.get('name')!r}: expected {expected}, "
                f"found nodes {found}, attributes {declared}"
            )
        for result in element.iter():
            if (
                result.tag in ("failure", "error", "skipped")
                and not (result.get("message") or "").strip()
            ):
                raise AssertionError(f"JUnit suite {element.get('name')!r}: empty <{result.tag}>")
