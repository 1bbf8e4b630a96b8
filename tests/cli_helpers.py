"""Running the real CLI on throwaway repos, and reading what it wrote."""

from __future__ import annotations

import os
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import xmlschema
from processes import run

TESTS = Path(__file__).resolve().parent
JUNIT_XSD = TESTS / "junit.xsd"
# The console script of the environment running the tests.
TRANSFER_GATE = Path(sys.executable).parent / "transfer-gate"

# Regions in tests run a handful of times: enough to cover every phase
# (first call, warm-up, steady state, timed) without paying for statistics.
FAST_DEFAULTS = "defaults: {warmup: 1, guarded_runs: 1, repeats: 2}\n"


@dataclass(repr=False)
class GateRun:
    """One finished ``transfer-gate`` process and where its report should be."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    report: Path

    def __str__(self) -> str:  # shown by pytest when an assertion on the run fails
        return (
            f"transfer-gate {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )

    __repr__ = __str__

    def junit(self) -> ET.Element:
        """The report, checked against the bundled XSD and the count invariant."""
        assert self.report.is_file(), f"no report at {self.report}\n{self}"
        validate_junit(self.report)
        return ET.parse(self.report).getroot()

    def testcase(self, name: str) -> ET.Element:
        root = self.junit()
        found = [c for c in root.iter("testcase") if c.get("name") == name]
        names = [c.get("name") for c in root.iter("testcase")]
        assert len(found) == 1, f"testcase {name!r} not found once in {names}\n{self}"
        return found[0]


def validate_junit(path: Path) -> None:
    """Schema-valid, and the counts in the attributes match the elements."""
    xmlschema.XMLSchema(JUNIT_XSD).validate(path)
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for suite in suites:
        cases = suite.findall("testcase")
        counted = {
            "tests": len(cases),
            "failures": sum(len(c.findall("failure")) for c in cases),
            "errors": sum(len(c.findall("error")) for c in cases),
        }
        for key, value in counted.items():
            assert int(suite.get(key, "0")) == value, (key, suite.get("name"))
            totals[key] += value
    if root.tag == "testsuites":
        for key, value in totals.items():
            assert int(root.get(key, "0")) == value, ("testsuites", key)


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path -> text, dedented) under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def gate_env(devices: int = 1, extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """The environment a gate under test sees; a None in ``extra`` removes that variable."""
    # GITHUB_*: when the suite itself runs in GitHub Actions, a gate under test
    # must not annotate the real run or write to its job summary.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "GITHUB_"))}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("PYTHONPATH", None)
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_gate(
    repo: Path,
    *args: str,
    devices: int = 1,
    env: dict[str, str | None] | None = None,
    report: str = "reports/transfer-gate.xml",
    timeout: float = 240,
    console_script: bool = False,
) -> GateRun:
    """``python -m gate ARGS`` in ``repo``, as CI would run it.

    With ``console_script``, the installed ``transfer-gate`` command instead: the only way in for
    a repo with a ``gate`` package of its own, which ``python -m gate`` would run. Past
    ``timeout`` the gate's whole process group is killed (`processes.run`).
    """
    gate = [TRANSFER_GATE] if console_script else [sys.executable, "-m", "gate"]
    done = run([*gate, *args], cwd=repo, env=gate_env(devices, env), timeout=timeout)
    return GateRun(tuple(args), done.returncode, done.stdout, done.stderr, repo / report)


def line_of(path: Path, needle: str) -> int:
    """The 1-based line of the only line in ``path`` that contains ``needle``."""
    lines = [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    assert len(lines) == 1, (needle, lines)
    return lines[0]
