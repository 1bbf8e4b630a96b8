"""A net under every test: each JUnit report left in a test's tmp_path must be valid.

Tests that assert on a report validate it themselves (`GateRun.junit`); this
catches the reports of tests that only look at an exit code or the log.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import validate_junit


@pytest.fixture(autouse=True)
def _every_report_is_valid_junit(request: pytest.FixtureRequest) -> Iterator[None]:
    if "tmp_path" not in request.fixturenames:
        yield
        return
    # Asked for before the test runs, so tmp_path outlives this fixture's teardown.
    root: Path = request.getfixturevalue("tmp_path")
    yield
    for report in root.rglob("*.xml"):
        if not report.is_file():
            continue  # a folder named like a report, to make a write fail
        try:
            tag = ET.parse(report).getroot().tag
        except ET.ParseError:
            continue  # a test's deliberately broken input, not a report
        if tag in ("testsuites", "testsuite"):
            validate_junit(report)
