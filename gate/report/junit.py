"""The run as a JUnit XML report, laid out for GitHub's PR annotation tools.

One ``<testsuite>`` per policy file (its path in ``file``). Each region
gives a ``<region>: transfers`` testcase and, when the region declares
result checks, a ``<region>: result checks`` testcase; both have the
classname ``<suite>.<region>``.

What the PR tools read (see FIELD-NOTES, "JUnit as PR tools read it"):
mikepenz/action-junit-report and EnricoMi/publish-unit-test-result-action
take the annotation's place from ``testcase@file``/``@line`` and its text
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

import contextlib
import os
import re
import secrets
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from junit_xml import TestCase, TestSuite, to_xml_report_string

from gate.policy.levels import Direction, GuardSpec
from gate.report.terminal import (
    format_boundary,
    format_check,
    format_timing,
    one_line,
    transfer_location,
)
from gate.results.findings import Finding, group
from gate.results.hints import hint_for, hint_for_error
from gate.results.records import (
    ErrorKind,
    RegionError,
    RegionResult,
    RunResult,
    SuiteResult,
)


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


@dataclass(frozen=True)
class _Outcome:
    """A failure or error for one testcase, before it reaches junit-xml."""

    tag: Literal["failure", "error"]
    kind: str  # the element's `type` attribute
    message: str
    body: str


@dataclass(frozen=True)
class _Case:
    """One testcase; the suite's counts and the XML both come from these."""

    name: str
    classname: str
    file: str
    line: int
    elapsed_s: float | None
    stdout: str
    outcome: _Outcome | None


def render_junit(run: RunResult) -> str:
    """The JUnit XML text for `run`.

    Raises AssertionError when the XML junit-xml produced disagrees with
    what the run says (a missing failure, a wrong count): a gate bug that
    must not reach CI as a passing report.
    """
    planned = [(suite, [case for r in suite.regions for case in _cases(r)]) for suite in run.suites]
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
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportWriteError(_write_error(path, exc)) from exc
    # A name of our own (not tempfile's) so O_EXCL guards against clashes
    # and the 0o666 mode goes through the umask like any other output file.
    temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise ReportWriteError(_write_error(path, exc)) from exc
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        _remove_quietly(temporary)
        raise ReportWriteError(_write_error(path, exc)) from exc
    except BaseException:
        _remove_quietly(temporary)
        raise
    _fsync_folder(path.parent)


def _write_error(path: Path, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return one_line(
        f"cannot write the JUnit report {path}: {reason}; "
        "choose a writable path for the report or fix that folder's permissions"
    )


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _fsync_folder(folder: Path) -> None:
    # Makes the rename itself durable; not possible on every platform
    # (Windows cannot open a folder), and the report is already complete.
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _junit_case(case: _Case) -> TestCase:
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
        else:
            junit_case.add_error_info(message=message, output=body, error_type=outcome.kind)
    return junit_case


_RUN_LEVEL_ERRORS = frozenset({ErrorKind.POLICY, ErrorKind.BASELINE, ErrorKind.INTERNAL})


def _cases(region: RegionResult) -> list[_Case]:
    policy_file, policy_line = region.policy_path, region.policy_line
    # junit-xml omits `time` when it is 0; rounding to the millisecond keeps
    # the suite's summed `time` out of scientific notation (1e-05), which
    # some readers reject.
    elapsed = round(region.wall_s, 3)
    system_out = _system_out(region)

    if region.error is not None:
        error = region.error
        # A cancelled region did nothing wrong: point at its policy entry, not at
        # whatever line happened to be running when the run was stopped.
        where = None if error.kind is ErrorKind.CANCELLED else error.location
        # An invalid policy, or a gate bug outside any region, is not about a
        # region's transfers: name the testcase after what broke ("policy",
        # "gate"). A gate bug while a region ran keeps the region's testcase.
        run_level = error.kind in _RUN_LEVEL_ERRORS and (
            error.kind in (ErrorKind.POLICY, ErrorKind.BASELINE) or not region.policy_path
        )
        name = region.name if run_level else f"{region.name}: transfers"
        cases = [
            _Case(
                name,
                region.classname,
                where.path if where is not None else policy_file,
                where.line if where is not None else policy_line,
                elapsed,
                system_out,
                _Outcome(
                    "error",
                    error.kind.name.lower(),
                    _error_message(error),
                    _error_body(region, error),
                ),
            )
        ]
        if region.has_checks:
            cases.append(
                _Case(
                    f"{region.name}: result checks",
                    region.classname,
                    policy_file,
                    policy_line,
                    None,
                    "",
                    _Outcome(
                        "error",
                        "not-run",
                        f"result checks not run: {_error_message(error)}",
                        f"The region stopped before its result checks could run:\n"
                        f"{_error_message(error)}\n"
                        f"See the '{region.name}: transfers' testcase for the details.\n",
                    ),
                )
            )
        return cases

    failing = [f for f in group(region.transfers) if f.failing]
    if failing:
        first = failing[0].location
        file, line = (first.path, first.line) if first is not None else (policy_file, policy_line)
        outcome: _Outcome | None = _Outcome(
            "failure", "transfer", _transfers_message(failing), _transfers_body(region)
        )
    else:
        file, line, outcome = policy_file, policy_line, None
    cases = [
        _Case(
            f"{region.name}: transfers", region.classname, file, line, elapsed, system_out, outcome
        )
    ]

    if region.has_checks:
        check_lines = "\n".join(format_check(c) for c in region.checks) or "no checks ran"
        failed = [c for c in region.checks if not c.passed]
        check_outcome = (
            _Outcome(
                "failure",
                "result-check",
                _checks_message(region),
                f"{check_lines}\n\nRegion declared at {policy_file}:{policy_line}\n",
            )
            if failed
            else None
        )
        cases.append(
            _Case(
                f"{region.name}: result checks",
                region.classname,
                policy_file,
                policy_line,
                None,
                check_lines + "\n",
                check_outcome,
            )
        )
    return cases


def _transfers_message(failing: list[Finding]) -> str:
    """``implicit host-to-device transfer float32[8] at a.py:12, 3x per step`` (+ the rest)."""
    message = failing[0].headline()
    if len(failing) > 1:
        lines = {f.where() for f in failing}
        shown = []
        for finding in failing[1:4]:
            # Two directions or arrays at one line read as two entries of the same place.
            same_place = finding.where() == failing[0].where() or len(lines) < len(failing)
            shown.append(
                f"{finding.what()} at {finding.where()}" if same_place else finding.where()
            )
        more = len(failing) - 4
        tail = f", and {more} more" if more > 0 else ""
        head = (
            f"{len(failing)} lines move data"
            if len(lines) == len(failing)
            else f"{len(failing)} transfers at {len(lines)} line{'s' if len(lines) > 1 else ''}"
        )
        message = f"{head}: {message}; also {', '.join(shown)}{tail}"
    return message


def _transfers_body(region: RegionResult) -> str:
    findings = group(region.transfers)
    failing = [f for f in findings if f.failing]
    lines = len({f.location for f in failing})
    head = (
        f"{_count(len(failing), 'line')} with failing transfers"
        if lines == len(failing)
        # One line moving several arrays: one entry per array.
        else f"{_count(len(failing), 'failing transfer')} at {_count(lines, 'line')}"
    )
    parts = [
        f"{head}, most frequent first:\n" + "\n".join(_finding_entry(f, region) for f in failing)
    ]
    others = [f for f in findings if not f.failing]
    if others:
        parts.append(
            f"{_count(len(others), 'other line')} moving data (logged or allowed, not failing):\n"
            + "\n".join(_finding_entry(f, region) for f in others)
        )
    parts.append(_details(region))
    return "\n\n".join(parts)


def _finding_entry(finding: Finding, region: RegionResult) -> str:
    transfer = finding.sample_with_shape()
    function = finding.location.function if finding.location is not None else "?"
    where = transfer_location(transfer, region)
    levels = region.guard.inside_boundary() if finding.boundary is not None else region.guard
    verdict = "FAILS" if finding.failing else "allowed"
    lines = [f"- {where} in {function}: {finding.kind} {finding.what()} — {finding.counts()}"]
    if finding.source:
        lines.append(f"    {finding.source}")
    if finding.scope():
        lines.append(f"  {finding.scope()}")
    lines.append(f"  guard level: {levels.level(finding.direction).value} ({verdict})")
    if finding.location is None:
        lines.append("  (no frame of your code found; the location is the region's policy entry)")
    jax_lines = transfer.message.splitlines() or ["(no message)"]
    lines.append(f"  seen by: {jax_lines[0]}")
    lines.extend(f"       {rest}" for rest in jax_lines[1:])
    lines.append(f"  fix: {hint_for(transfer)}")
    return "\n".join(lines)


def _system_out(region: RegionResult) -> str:
    """Every transfer seen, then the region's details: what EnricoMi shows for any case."""
    if not region.transfers:
        return _details(region)
    entries = "\n".join(_finding_entry(f, region) for f in group(region.transfers))
    return f"{entries}\n\n{_details(region)}"


def _details(region: RegionResult) -> str:
    """Guard levels, transfer counts, timing and boundary costs: closes every body."""
    lines = [f"Guard levels: {_guard_levels(region.guard)}"]
    inside = region.guard.inside_boundary()
    if inside != region.guard:
        lines.append(f"  inside declared boundaries: {_guard_levels(inside)}")
    findings = group(region.transfers)
    failing = sum(1 for f in findings if f.failing)
    if region.error is not None:
        # An unfinished region's silence proves nothing; never let it read as clean.
        lines.append(
            f"Lines moving data: not determined, the region did not finish "
            f"({len(findings)} seen before it stopped)"
        )
    elif findings:
        lines.append(f"Lines moving data: {len(findings)} ({failing} failing)")
    else:
        lines.append("Lines moving data: none")
    if region.fixed:
        lines.append("Accepted in the baseline but no longer seen:")
        lines.extend(f"- {entry}" for entry in region.fixed)
    if region.timing is not None:
        lines.append(f"Step time: {format_timing(region.timing)}")
    else:
        lines.append("Step time: not measured")
    if region.boundaries:
        lines.append("Boundary costs:")
        lines.extend(f"- {format_boundary(b)}" for b in region.boundaries)
    else:
        lines.append("Boundary costs: no boundaries declared")
    if region.platform:
        lines.append(f"Platform: {region.platform}")
    if region.coverage:
        judged = "; ".join(f"{label}: {judge}" for label, judge in region.coverage)
        lines.append(f"Checked by: {judged}")
    lines.extend(f"Note: {note}" for note in region.notes)
    lines.append(f"Wall time: {region.wall_s:.3f} s")
    lines.append(f"Region declared at {region.policy_path}:{region.policy_line}")
    return "\n".join(lines) + "\n"


def _guard_levels(guard: GuardSpec) -> str:
    return ", ".join(f"{d.label}={guard.level(d).value}" for d in Direction)


def _error_message(error: RegionError) -> str:
    return f"{error.kind.value}: {one_line(error.message)}"


def _error_body(region: RegionResult, error: RegionError) -> str:
    parts = [_error_message(error)]
    fix = hint_for_error(error)
    if fix is not None:
        parts.append(f"fix: {fix}")
    if error.location is not None:
        parts.append(f"at {error.location} in {error.location.function}")
    if error.details.strip():
        parts.append(error.details.rstrip("\n"))
    if region.transfers:
        parts.append(
            "Transfers seen before the error:\n"
            + "\n".join(_finding_entry(f, region) for f in group(region.transfers))
        )
    parts.append(_details(region))
    return "\n\n".join(parts)


def _checks_message(region: RegionResult) -> str:
    failed = [c for c in region.checks if not c.passed]
    if len(failed) == 1:
        return f"result check failed: {failed[0].name.value}: {one_line(failed[0].detail)}"
    names = ", ".join(c.name.value for c in failed)
    return f"{len(failed)} result checks failed: {names}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


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
    return {_attribute(k): _attribute(v) for k, v in properties.items()}


def _check_rendered(xml_text: str, planned: list[list[_Case]]) -> None:
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
        }
        found = {
            "tests": len(testcases),
            "failures": sum(len(tc.findall("failure")) for tc in testcases),
            "errors": sum(len(tc.findall("error")) for tc in testcases),
        }
        declared = {key: int(element.get(key, "-1")) for key in expected}
        if not expected == found == declared:
            raise AssertionError(
                f"JUnit suite {element.get('name')!r}: expected {expected}, "
                f"found nodes {found}, attributes {declared}"
            )
        for result in element.iter():
            if result.tag in ("failure", "error") and not (result.get("message") or "").strip():
                raise AssertionError(f"JUnit suite {element.get('name')!r}: empty <{result.tag}>")
