"""Suite-wide rules: `gpu` and `tpu` tests run only where such a device can, the tests of each
JAX internal (tests/jax_hooks.py) are marked `jaxhooks`, every JUnit report left in a test's
tmp_path must be valid, and SIGINT reaches what the tests start however the suite was started.

Tests that assert on a report validate it themselves (`GateRun.junit`); the
net catches the reports of tests that only look at an exit code or the log.
"""

from __future__ import annotations

import compileall
import importlib.metadata
import importlib.util
import signal
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from accelerator_rule import accelerator_rule, one_process_on_the_device
from cli_helpers import validate_junit
from jax_hooks import hook_tests
from scheduling import heavy_first

from gate.machine.devices import tpu_chip_files
from gate.package import PACKAGE_DIR

__all__ = ["accelerator_rule", "one_process_on_the_device"]  # fixtures for every module

# A suite started in the background by a script (`bash .ci/run &`, `nohup`) inherits SIGINT
# ignored, and so would every process it starts: the gate would never hear the runner's
# cancelling SIGINT, and each test of it would wait out its timeout (six failed so, a minute
# each). A handler of Python's own is not inherited across exec; the default is.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _cuda_plugin_installed() -> bool:
    for name in ("jax-cuda12-plugin", "jax-cuda13-plugin"):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False


def _tpu_present() -> bool:
    """A TPU's device files, and libtpu installed or on the path (a TPU VM may bring either)."""
    if not tpu_chip_files():
        return False
    try:
        importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return importlib.util.find_spec("libtpu") is not None
    return True


def pytest_configure(config: pytest.Config) -> None:
    """The gate's modules byte-compiled (`_compile_the_gate`); on a TPU machine, this process's
    JAX kept on the CPU.

    A TPU chip admits one process (docs/runner-host.md). The tests marked `tpu` start the gate,
    or a script, in processes of their own that need the chip; this process, which runs the
    other tests' gates in-process on the CPU, must never be the one holding it.
    """
    _compile_the_gate()
    # xdist's loadscope would deal modules by their count of tests alone; `heavy_first` orders
    # them (tests/scheduling.py), and xdist keeps that order with its reordering off.
    if getattr(config.option, "loadscopereorder", False):
        config.option.loadscopereorder = False
    if _tpu_present():
        import jax

        jax.config.update("jax_platforms", "cpu")


def _compile_the_gate() -> None:
    """Byte-compile the gate's own modules, as an installed gate is, so that each of the
    thousand-odd worker processes the tests start reads them instead of compiling ~200 modules
    from source: PYTHONDONTWRITEBYTECODE, set on the development and CI machines, keeps Python
    from writing them itself. Quick once they are up to date. Only gate/: a test repository's
    module is rewritten faster than a .pyc's timestamp (whole seconds) can tell."""
    compileall.compile_dir(PACKAGE_DIR, quiet=2, workers=1)


# Before `-m` deselects by marker, which is a collection_modifyitems hook too.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the modules for xdist (`heavy_first`); mark the tests of each JAX internal
    `jaxhooks`, and `pythons` too where it reaches Python's own machinery; skip tests marked
    `gpu` without JAX's CUDA plugin and those marked `tpu` without a TPU (the CPU tests cover
    their logic)."""
    items[:] = heavy_first(items)
    hooked, on_pythons = hook_tests(), hook_tests(python=True)
    for item in items:
        test = item.nodeid.split("[", 1)[0]
        if test in hooked:
            item.add_marker(pytest.mark.jaxhooks)
        if test in on_pythons:  # the hook reaches Python's own machinery too
            item.add_marker(pytest.mark.pythons)
    missing = {
        "gpu": None if _cuda_plugin_installed() else "needs a CUDA GPU and JAX's CUDA plugin",
        "tpu": None if _tpu_present() else "needs a TPU (/dev/accel* or /dev/vfio/N) and libtpu",
    }
    for marker, reason in missing.items():
        if reason is None:
            continue
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


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
