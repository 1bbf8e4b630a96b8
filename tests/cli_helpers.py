"""Running the real CLI on throwaway repos, and reading what it wrote."""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import signal
import sys
import sysconfig
import textwrap
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import xmlschema
from accelerator_rule import active_rule
from processes import run

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
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
    # Where JAX itself comes from PYTHONPATH (a TPU machine's image), a gate under test needs it
    # too: a test's own PYTHONPATH (a sitecustomize) goes first, the inherited one after it.
    inherited = env.pop("PYTHONPATH", None)
    rule = active_rule()
    for key, value in {**(rule.environment() if rule else {}), **(extra or {})}.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    if inherited:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), inherited]))
    return env


def run_gate(
    repo: Path,
    *args: str,
    devices: int = 1,
    env: dict[str, str | None] | None = None,
    report: str = "reports/transfer-gate.xml",
    timeout: float = 240,
    console_script: bool = False,
    process: bool = False,
) -> GateRun:
    """``transfer-gate ARGS`` in ``repo``, as CI would run it; its workers are real processes.

    The gate's own process is this one (`in_process`): starting another Python and importing
    jax in it costs seconds a run and tests nothing the gate does. A process of its own,
    ``python -m gate ARGS``, runs instead where the gate's process itself is under test or its
    start matters: with ``process`` (signals, isolation, what it imports); with ``PYTHONPATH``
    in ``env`` (a sitecustomize runs at start-up); with ``devices`` other than 1 (the user's
    modules are imported in the gate's process, and one may ask for the second device; this
    process's JAX has one); and for ``doctor`` (it starts JAX's backend under the run's
    XLA_FLAGS). With ``console_script``, the installed ``transfer-gate`` command: the only way in
    for a repo with a ``gate`` package of its own, which ``python -m gate`` would run. Past
    ``timeout`` such a process's whole group is killed (`processes.run`); in-process, a hang is
    pytest-timeout's to stop.
    """
    environ = gate_env(devices, env)
    planted = "PYTHONPATH" in (env or {}) or active_rule() is not None  # a sitecustomize
    own_process = planted or devices != 1 or args[:1] == ("doctor",)
    if not (process or console_script or own_process):
        returncode, stdout, stderr = in_process(repo, args, environ)
        return GateRun(tuple(args), returncode, stdout, stderr, repo / report)
    gate = [TRANSFER_GATE] if console_script else [sys.executable, "-m", "gate"]
    done = run([*gate, *args], cwd=repo, env=environ, timeout=timeout)
    return GateRun(tuple(args), done.returncode, done.stdout, done.stderr, repo / report)


# Where the modules that may stay imported after an in-process run come from: the standard
# library, installed packages, the gate itself and the tests' own helpers (tests/*.py).
_LIBRARIES = tuple(
    os.path.realpath(path) + os.sep
    for path in {
        *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
        str(ROOT / "gate"),
    }
)


def _kept(path: str) -> bool:
    real = os.path.realpath(path)
    return (real + os.sep).startswith(_LIBRARIES) or os.path.dirname(real) == str(TESTS)


def _users_modules() -> list[str]:
    """Modules imported from anywhere else: a repo's own code, which must not outlive its run."""
    found = []
    for name, module in list(sys.modules.items()):
        places = [getattr(module, "__file__", None), *getattr(module, "__path__", ())]
        places = [p for p in places if isinstance(p, str)]
        if places and not all(_kept(p) for p in places):
            found.append(name)
    return found


def _forget_users_modules() -> None:
    for name in _users_modules():
        del sys.modules[name]
    # Source lines a report quotes are read afresh, as a new process would.
    linecache.clearcache()


@contextlib.contextmanager
def _like_a_fresh_process(repo: Path, environ: Mapping[str, str]) -> Iterator[None]:
    """This process as ``python -m gate`` would start in ``repo`` with ``environ``; put back after.

    The working directory, `sys.path` (``-m`` puts the working directory first), the
    environment, the warning filters (Python's defaults, not pytest's ``error``), the signal
    handlers and JAX's ``jax_platforms`` (which `keep_accelerators_for_workers` sets), and no
    module of another repo's: a test's ``steps.py`` must not answer for the next test's.
    """
    import jax

    # This process's own backend starts under its own environment, never under a run's XLA_FLAGS.
    jax.devices()
    platforms = jax.config.jax_platforms
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    cwd, path, saved_env = os.getcwd(), list(sys.path), dict(os.environ)
    _forget_users_modules()
    os.chdir(repo)
    sys.path.insert(0, str(repo))
    os.environ.clear()
    os.environ.update(environ)
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()
            # Python's default filters, as `python -m gate` starts with (the most specific last).
            for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning):
                warnings.simplefilter("ignore", category)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = path
        os.chdir(cwd)
        _forget_users_modules()
        jax.config.update("jax_platforms", platforms)
        changed = [s.name for s, h in handlers.items() if signal.getsignal(s) is not h]
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        assert not changed, f"the gate left its handlers for {changed} installed"


def in_process(
    repo: Path, args: tuple[str, ...], environ: Mapping[str, str]
) -> tuple[int, str, str]:
    """``transfer-gate ARGS`` run by `gate.cli.main.main` in this process: (exit code, out, err)."""
    from gate.cli.main import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        _like_a_fresh_process(repo, environ),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            returncode = main(list(args))
        except SystemExit as exc:  # argparse: --help, --version, a usage error
            returncode = _exit_status(exc.code)
    return returncode, stdout.getvalue(), stderr.getvalue()


def _exit_status(code: object) -> int:
    """The status `SystemExit(code)` gives a process, printing a message the way Python would."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def line_of(path: Path, needle: str) -> int:
    """The 1-based line of the only line in ``path`` that contains ``needle``."""
    lines = [i for i, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    assert len(lines) == 1, (needle, lines)
    return lines[0]
