"""A line per region as it finishes, on stderr, while later regions still run.

Through the real CLI in a process of its own: the second region's step waits for a file that
the test writes only once the first region's line has arrived, so the line cannot have come
from the end-of-run summary.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from cli_helpers import FAST_DEFAULTS, gate_env, make_repo, run_gate
from processes import started

STEPS = """
import os
import time

import jax
import numpy as np

GO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")


@jax.jit
def double(x):
    return x * 2.0


def make():
    return (jax.device_put(np.ones(4, np.float32)),)


def quick(x):
    return double(x)


def waits(x):
    deadline = time.monotonic() + 120
    while not os.path.exists(GO):
        if time.monotonic() > deadline:
            raise TimeoutError("the test never wrote the go file")
        time.sleep(0.01)
    return double(x)
"""

POLICY = (
    "version: 1\n"
    + FAST_DEFAULTS
    + """regions:
  - {name: a, step: "steps:quick", setup: "steps:make"}
  - {name: b, step: "steps:waits", setup: "steps:make"}
"""
)


def test_each_region_has_its_line_while_the_next_still_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": POLICY})
    lines: list[str] = []
    with (
        (tmp_path / "stdout.txt").open("w") as stdout,
        started(
            [sys.executable, "-m", "gate", "run"],
            cwd=repo,
            env=gate_env(),
            stdout=stdout,
            stderr=subprocess.PIPE,
        ) as proc,
    ):
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
        reader.start()
        deadline = time.monotonic() + 180
        while not any(line.startswith("[1/2] PASS") for line in lines):
            assert proc.poll() is None, f"the gate ended before region a's line: {lines}"
            assert time.monotonic() < deadline, f"no line for region a: {lines}"
            time.sleep(0.05)
        assert not any(line.startswith("[2/2]") for line in lines), lines
        (repo / "go").write_text("")
        assert proc.wait(timeout=180) == 0, lines
        reader.join(timeout=30)
    [first] = [line for line in lines if line.startswith("[1/2]")]
    assert first.split()[1:3] == ["PASS", "p.a"], first
    [second] = [line for line in lines if line.startswith("[2/2]")]
    assert second.split()[1:3] == ["PASS", "p.b"], second
    assert "median" in second, second
    summary = (tmp_path / "stdout.txt").read_text()
    assert "[1/2]" not in summary, summary  # stdout keeps only the summary
    assert "\n2 passed, 0 failed\n" in summary, summary


def test_the_line_shows_the_verdict_after_the_baseline(tmp_path: Path) -> None:
    leaky = STEPS + "\n\ndef leaks(x):\n    return double(x) + np.ones(4, np.float32)\n"
    policy = POLICY.replace("steps:waits", "steps:leaks")
    repo = make_repo(tmp_path, {"steps.py": leaky, "policies/p.yaml": policy})
    assert run_gate(repo, "run").returncode == 1
    assert run_gate(repo, "baseline").returncode == 0
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    [line] = [line for line in run.stderr.splitlines() if line.startswith("[2/2]")]
    assert line.split()[1:3] == ["PASS", "p.b"], line
    assert "accepted by the baseline" in line, line


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_colour_follows_the_option_the_terminal_no_color_and_force_color() -> None:
    from gate.cli.run import colour

    terminal, pipe = _Stream(tty=True), _Stream(tty=False)
    assert colour("auto", terminal, {})
    assert not colour("auto", pipe, {})
    assert not colour("auto", terminal, {"NO_COLOR": "1"})
    assert colour("auto", pipe, {"FORCE_COLOR": "1"})
    assert not colour("auto", terminal, {"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert colour("always", pipe, {"NO_COLOR": "1"})
    assert not colour("never", terminal, {"FORCE_COLOR": "1"})
    assert not colour("auto", terminal, {"TERM": "dumb"})  # a terminal that shows escapes raw
    assert colour("auto", terminal, {"TERM": "dumb", "FORCE_COLOR": "1"})


def test_color_always_colours_the_summary_and_the_rows(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": POLICY})
    (repo / "go").write_text("")
    coloured = run_gate(repo, "run", "--color", "always")
    assert coloured.returncode == 0, coloured
    assert "\x1b[32mPASS\x1b[0m" in coloured.stdout, coloured
    assert "\x1b[32mPASS\x1b[0m" in coloured.stderr, coloured
    assert coloured.stdout.rstrip().splitlines()[-2] == "2 passed, 0 failed"  # never coloured
    plain = run_gate(repo, "run", "--color", "never", env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in plain.stdout + plain.stderr, plain


def test_quiet_shows_only_failures_and_verbose_every_transfer(tmp_path: Path) -> None:
    steps = STEPS + (
        "\n\ndef leaks(x):\n    return double(x) + np.ones(4, np.float32)  # leaks here\n"
    )
    policy = (
        "version: 1\n"
        + FAST_DEFAULTS
        + """regions:
  - {name: a, step: "steps:quick", setup: "steps:make"}
  - {name: logged, step: "steps:leaks", setup: "steps:make", guard: log}
  - {name: leaky, step: "steps:leaks", setup: "steps:make"}
"""
    )
    repo = make_repo(tmp_path, {"steps.py": steps, "policies/p.yaml": policy})
    quiet = run_gate(repo, "run", "-q")
    assert quiet.returncode == 1, quiet
    rows = [line for line in quiet.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert [row.split()[:2] for row in rows] == [["FAIL", "p.leaky"]], quiet
    live = [line for line in quiet.stderr.splitlines() if re.match(r"\[\d+/\d+\] ", line)]
    assert [line.split()[:3] for line in live] == [["[3/3]", "FAIL", "p.leaky"]], quiet
    assert "1 passed" not in quiet.stdout
    assert "2 passed, 1 failed" in quiet.stdout, quiet

    verbose = run_gate(repo, "run", "-v")
    assert "p.logged: 1 transfer line that passes:" in verbose.stdout, verbose
    assert "(allowed by the guard level)" in verbose.stdout, verbose
    normal = run_gate(repo, "run")
    assert "that passes:" not in normal.stdout, normal
    both = run_gate(repo, "run", "-q", "-v")
    assert both.returncode == 2, both
