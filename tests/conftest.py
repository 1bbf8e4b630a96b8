"""Suite-wide rules: `gpu` tests run only where a GPU can, the tests of each JAX internal
(tests/jax_hooks.py) are marked `jaxhooks`, and every JUnit report left in a test's tmp_path
must be valid.

Tests that assert on a report validate it themselves (`GateRun.junit`); the
net catches the reports of tests that only look at an exit code or the log.
"""

from __future__ import annotations

import importlib.metadata
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from accelerator_rule import accelerator_rule, one_process_on_the_device
from cli_helpers import validate_junit
from jax_hooks import hook_tests

__all__ = ["accelerator_rule", "one_process_on_the_device"]  # fixtures for every module


def _cuda_plugin_installed() -> bool:
    for name in ("jax-cuda12-plugin", "jax-cuda13-plugin"):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False


# Before `-m` deselects by marker, which is a collection_modifyitems hook too.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of each JAX internal `jaxhooks`; skip tests marked `gpu` without JAX's CUDA
    plugin (the CPU tests cover their logic)."""
    hooked = hook_tests()
    for item in items:
        if item.nodeid.split("[", 1)[0] in hooked:
            item.add_marker(pytest.mark.jaxhooks)
    if _cuda_plugin_installed():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and JAX's CUDA plugin")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


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
