"""The run as it goes: the running line on a terminal, ``::group::`` under GitHub Actions, stages.

`LiveOutput` is driven directly with a fake clock for the exact bytes; then the real CLI on a
pseudo-terminal, under ``GITHUB_ACTIONS=true`` and with ``-v``, for what a user sees.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, gate_env, make_repo, run_gate
from processes import started
from result_samples import region, transfer

from gate.report.live import SHOWN_LINES, LiveOutput

WIPE = "\r\x1b[K"
ROW = "[1/2] PASS  train.step  0 failing lines  median 1.23 ms  boundaries 155 µs/step"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def live(**options: bool) -> tuple[LiveOutput, io.StringIO, Clock]:
    stream, clock = io.StringIO(), Clock()
    watcher = LiveOutput(stream, clock=clock, **options)
    watcher.total = 2
    return watcher, stream, clock


def test_the_running_line_is_redrawn_in_place_and_wiped_before_every_real_line() -> None:
    watcher, stream, clock = live(running_line=True)
    with watcher:
        watcher.stage("train.step", "compiling")
        assert stream.getvalue() == f"{WIPE}[1/2] train.step: compiling"
        clock.now += 3.4
        watcher.stage("train.step", "timing")
        assert stream.getvalue().endswith(f"{WIPE}[1/2] train.step: timing")
        clock.now += 2.0
        watcher.output("train.step", ["loss 4.7"])
        # Wiped, the line, then the running line again, with its clock.
        assert stream.getvalue().endswith(
            f"{WIPE}[train.step] loss 4.7\n{WIPE}[1/2] train.step: timing 2 s"
        )
        watcher.finished(region())
        # The row replaces the running line; no region runs now, so none is drawn after it.
        assert stream.getvalue().endswith(f"{WIPE}{ROW}\n")
    written = stream.getvalue()
    assert written.endswith("\n"), written  # nothing is left on the last line after close
    assert written.count("[1/2] PASS") == 1, written


def test_without_a_terminal_nothing_is_redrawn() -> None:
    watcher, stream, _ = live()
    with watcher:
        watcher.stage("train.step", "compiling")
        watcher.output("train.step", ["hello"])
        watcher.finished(region())
    written = stream.getvalue()
    assert "\r" not in written, written
    assert "\x1b" not in written, written
    assert written.startswith("[train.step] hello\n[1/2] PASS  train.step"), written


def test_a_failing_row_is_followed_by_the_lines_to_fix() -> None:
    watcher, stream, _ = live()
    with watcher:
        watcher.finished(region(transfers=(transfer(),)))
    rows = stream.getvalue().splitlines()
    assert rows[0].startswith("[1/2] FAIL  train.step  1 failing line"), rows
    assert rows[1].startswith("  examples/bad.py:12: implicit host-to-device"), rows
    assert rows[2].startswith("  fix: "), rows


def test_quiet_drops_passing_rows_and_verbose_adds_each_stage_with_its_time() -> None:
    quiet, stream, _ = live(quiet=True)
    with quiet:
        quiet.stage("train.step", "compiling")
        quiet.finished(region())
    assert stream.getvalue() == ""

    verbose, stream, clock = live(verbose=True)
    with verbose:
        verbose.stage("train.step", "starting a worker")
        clock.now += 0.5
        verbose.stage("train.step", "compiling")
        clock.now += 1.25
        verbose.stage("train.step", "timing")
        clock.now += 0.002
        verbose.finished(region())
    lines = stream.getvalue().splitlines()
    assert lines[-1] == "    stages: starting a worker 500 ms, compiling 1.25 s, timing 2.00 ms", (
        lines
    )


def test_under_github_each_region_is_a_group_of_its_output_and_stages() -> None:
    watcher, stream, clock = live(groups=True)
    with watcher:
        watcher.output("worker", ["jax warning at start-up"])  # no region yet: written now
        watcher.stage("train.step", "compiling")
        watcher.output("train.step", ["loss 4.7", "loss 4.6"])
        assert stream.getvalue() == "[worker] jax warning at start-up\n"  # held until the row
        clock.now += 1.0
        watcher.finished(region(transfers=(transfer(),)))
    lines = stream.getvalue().splitlines()
    assert lines[1].startswith("::group::[1/2] FAIL  train.step  1 failing line"), lines
    assert lines[2:5] == [
        "[train.step] loss 4.7",
        "[train.step] loss 4.6",
        "    stages: compiling 1.00 s",
    ], lines
    assert lines[5] == "::endgroup::", lines
    # What to fix stays outside the fold, where it is seen.
    assert lines[6].startswith("  examples/bad.py:12: implicit host-to-device"), lines


def test_under_github_quiet_still_shows_what_a_passing_region_printed() -> None:
    watcher, stream, _ = live(groups=True, quiet=True)
    with watcher:
        watcher.stage("train.a", "compiling")
        watcher.finished(region("a"))
        watcher.stage("train.b", "compiling")
        watcher.output("train.b", ["printed"])
        watcher.finished(region("b"))
    lines = stream.getvalue().splitlines()
    # Region a passed and printed nothing: no group. Region b's output is never dropped.
    assert lines == [
        "::group::[2/2] PASS  train.b  0 failing lines  median 1.23 ms  boundaries 155 µs/step",
        "[train.b] printed",
        "    stages: compiling 0 s",
        "::endgroup::",
    ], lines


def test_what_a_region_that_never_finished_printed_is_written_on_close() -> None:
    watcher, stream, _ = live(groups=True)
    with watcher:
        watcher.stage("train.step", "compiling")
        watcher.output("train.step", ["last words"])
    assert stream.getvalue() == "[train.step] last words\n"


def test_the_running_line_is_cut_to_the_terminal_width() -> None:
    watcher, stream, _ = live(running_line=True)
    with watcher:
        watcher.stage("train." + "x" * 200, "compiling")
        first = stream.getvalue()
    assert len(first.removeprefix(WIPE)) == 79, first  # not a terminal that says its size: 80


def test_the_mode_follows_the_stream_and_the_environment() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    on_terminal = LiveOutput.for_stream(Terminal(), {}, color=False)
    assert on_terminal.running_line
    assert not on_terminal.groups
    assert not LiveOutput.for_stream(Terminal(), {"TERM": "dumb"}, color=False).running_line
    github = LiveOutput.for_stream(Terminal(), {"GITHUB_ACTIONS": "true"}, color=False)
    assert github.groups
    assert not github.running_line
    piped = LiveOutput.for_stream(io.StringIO(), {}, color=False)
    assert not piped.running_line
    assert not piped.groups


# -- through the real CLI ---------------------------------------------------------------------

STEPS = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def make():
    return (jax.device_put(np.ones(4, np.float32)),)


def chatty(x):
    print("hello from the step")
    return double(x)
"""

POLICY = (
    "version: 1\n"
    + FAST_DEFAULTS
    + """regions:
  - {name: a, step: "steps:chatty", setup: "steps:make"}
  - {name: b, step: "steps:chatty", setup: "steps:make", checks: {finite: true}}
"""
)


def _repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": STEPS, "policies/p.yaml": POLICY})


def _on_terminal(repo: Path, *, stdout_too: bool, returncode: int = 0) -> str:
    """``transfer-gate run --color never`` in ``repo`` with stderr (and stdout) on a
    pseudo-terminal: what the terminal received. The run must exit ``returncode``."""
    leader, follower = pty.openpty()
    try:
        with started(
            [sys.executable, "-m", "gate", "run", "--color", "never"],
            cwd=repo,
            env=gate_env(),
            stdout=follower if stdout_too else subprocess.DEVNULL,
            stderr=follower,
        ) as proc:
            os.close(follower)
            follower = -1
            seen = _read_until_exit(leader, proc, timeout=180)
            assert proc.returncode == returncode, seen
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return seen


def test_on_a_terminal_the_running_region_and_its_stage_show_in_place(tmp_path: Path) -> None:
    seen = _on_terminal(_repo(tmp_path), stdout_too=False)
    assert f"{WIPE}[1/2] p.a: starting a worker" in seen, seen
    assert f"{WIPE}[1/2] p.a: compiling" in seen, seen
    assert f"{WIPE}[2/2] p.b: checking" in seen, seen
    # A finished row replaces the running line, and the last thing written ends the line.
    assert f"{WIPE}[1/2] PASS  p.a" in seen, seen
    assert seen.endswith("\n"), seen


def _read_until_exit(fd: int, proc: subprocess.Popen[str], timeout: float) -> str:
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # the other side closed: on Linux, EIO
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=max(1.0, end - time.monotonic()))
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_piped_stderr_gets_rows_and_output_lines_but_no_redrawing(tmp_path: Path) -> None:
    run = run_gate(_repo(tmp_path), "run", "-v")
    assert run.returncode == 0, run
    assert "\r" not in run.stderr, run
    assert "\x1b" not in run.stderr, run
    assert "[p.a] hello from the step" in run.stderr, run
    stages = [line.strip() for line in run.stderr.splitlines() if "stages:" in line]
    assert len(stages) == 2, run
    names = [part.rsplit(" ", 2)[0] for part in stages[1].removeprefix("stages: ").split(", ")]
    # The second region's worker is already up; its checks run before the cost run.
    expected = ["importing", "compiling", "warming up", "watching", "timing", "checking", "costing"]
    assert names == expected, stages
    assert stages[0].startswith("stages: starting a worker "), stages


def test_under_github_actions_each_region_is_a_group_holding_its_output(tmp_path: Path) -> None:
    run = run_gate(_repo(tmp_path), "run", env={"GITHUB_ACTIONS": "true"})
    assert run.returncode == 0, run
    lines = run.stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("::group::")]
    assert [lines[i].split()[:3] for i in starts] == [
        ["::group::[1/2]", "PASS", "p.a"],
        ["::group::[2/2]", "PASS", "p.b"],
    ], run
    for start in starts:
        end = lines.index("::endgroup::", start)
        inside = lines[start + 1 : end]
        assert f"[{lines[start].split()[2]}] hello from the step" in inside, run
        assert any(line.strip().startswith("stages: ") for line in inside), run
    # Outside the groups, no line of the step's.
    assert sum(line.endswith("] hello from the step") for line in lines) == sum(
        line.startswith("[p.") and line.endswith("hello from the step")
        for start in starts
        for line in lines[start : lines.index("::endgroup::", start)]
    ), run


def test_baseline_shows_no_rows_but_groups_what_each_region_printed(tmp_path: Path) -> None:
    # Its transfers are what `baseline` accepts: rows saying FAIL and "fix:" would mislead.
    run = run_gate(_repo(tmp_path), "baseline", env={"GITHUB_ACTIONS": "true"})
    assert run.returncode == 0, run
    lines = run.stderr.splitlines()
    assert not any(line.startswith(("[1/2]", "::group::[")) for line in lines), run
    start = lines.index("::group::p.a")
    assert "[p.a] hello from the step" in lines[start : lines.index("::endgroup::", start)], run
    assert "::group::p.b" in lines, run


# -- a region's last lines are its own --------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.got: list[tuple[str, list[str]]] = []

    def stage(self, label: str, stage: str) -> None:
        pass

    def output(self, label: str, lines: Sequence[str]) -> None:
        self.got.append((label, list(lines)))


def test_the_end_of_job_mark_closes_the_regions_output_whatever_arrived_first() -> None:
    from gate.isolation.protocol import END_OF_JOB
    from gate.isolation.worker_output import WorkerOutput

    read_end, write_end = os.pipe()
    recorder = Recorder()
    output = WorkerOutput(read_end, recorder)
    output.start_job(7, "p.a")
    # A last line without its newline, then the mark; the next lines are between regions.
    os.write(write_end, f"first\nno newline{END_OF_JOB}7\nafter\n".encode())
    assert output.wait_ended(7, timeout_s=10)
    assert not output.wait_ended(8, timeout_s=0.05)
    # The next job sent before the last one's mark was read: the mark hands over to it.
    output.start_job(8, "p.b")
    output.start_job(9, "p.c")
    os.write(write_end, f"b's last{END_OF_JOB}8\nc's first\n{END_OF_JOB}9\n".encode())
    assert output.wait_ended(9, timeout_s=10)
    os.close(write_end)
    output.finish(timeout_s=10)
    assert recorder.got == [
        ("p.a", ["first", "no newline"]),
        ("worker", ["after"]),
        ("p.b", ["b's last"]),
        ("p.c", ["c's first"]),
    ]
    # The marks are not kept.
    assert output.lines_since(0) == ["first", "no newline", "after", "b's last", "c's first"]
    assert output.count == 5


def test_a_line_redrawn_with_a_carriage_return_keeps_what_a_terminal_shows() -> None:
    from gate.isolation.worker_output import WorkerOutput

    read_end, write_end = os.pipe()
    recorder = Recorder()
    output = WorkerOutput(read_end, recorder)
    # A progress bar; and a "\r" that would start a line of its own for GitHub's runner.
    os.write(write_end, b"10%\r50%\r100%\nx\r::error::forged\r\n")
    os.close(write_end)
    output.finish(timeout_s=10)
    assert recorder.got == [("worker", ["100%", "::error::forged"])]  # prefixed by the sinks


CHATTY_AT_THE_END = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def make():
    return (jax.device_put(np.ones(4, np.float32)),)


def step(x):
    y = double(x)
    # Many lines just before the step returns: the reply overtakes them on its own pipe.
    print("\\n".join(f"line {i}" for i in range(300)))
    return y
"""


def test_under_github_actions_a_regions_last_lines_stay_in_its_group(tmp_path: Path) -> None:
    policy = (
        "version: 1\n"
        + FAST_DEFAULTS
        + """regions:
  - {name: a, step: "steps:step", setup: "steps:make"}
  - {name: b, step: "steps:step", setup: "steps:make"}
"""
    )
    repo = make_repo(tmp_path, {"steps.py": CHATTY_AT_THE_END, "policies/p.yaml": policy})
    run = run_gate(repo, "run", env={"GITHUB_ACTIONS": "true"})
    assert run.returncode == 0, run
    lines = run.stderr.splitlines()
    assert not any(line.startswith("[worker] line ") for line in lines), run
    for name in ("a", "b"):
        start = next(
            i
            for i, line in enumerate(lines)
            if line.startswith("::group::[") and f" p.{name} " in line
        )
        inside = lines[start + 1 : lines.index("::endgroup::", start)]
        # Every call's 300 lines, whole, the last call's too.
        first, last = f"[p.{name}] line 0", f"[p.{name}] line 299"
        assert inside.count(first) >= 5, (name, inside[-5:])
        assert inside.count(last) == inside.count(first), (name, inside[-5:])


def test_a_failing_comparison_is_said_once_under_its_row() -> None:
    from gate.report.terminal import progress_lines
    from gate.results.comparison import TimingComparison, TimingVerdict

    failing = TimingComparison(
        against="baseline",
        verdict=TimingVerdict.SLOWER,
        base_median_s=0.001,
        head_median_s=0.002,
        ratio=2.0,
        ratio_low=1.8,
        ratio_high=2.2,
        p_value=0.0001,
        max_slowdown=1.1,
        failing=True,
    )
    rows = progress_lines(1, 1, region(timing_vs_baseline=failing))
    said = [row for row in rows if "slower" in row]
    assert len(said) == 1, rows


def test_on_a_terminal_the_summary_does_not_repeat_the_rows_shown_live(tmp_path: Path) -> None:
    seen = _on_terminal(_repo(tmp_path), stdout_too=True)
    lines = [line.rsplit(WIPE, 1)[-1] for line in seen.split("\n")]
    assert any(line.startswith("[2/2] PASS  p.b") for line in lines), seen
    assert not any(line.startswith("PASS") for line in lines), seen  # no summary rows
    assert "2 passed, 0 failed" in lines, seen


def test_a_line_the_step_prints_never_reaches_github_as_a_workflow_command() -> None:
    watcher, stream, _ = live(groups=True)
    with watcher:
        watcher.stage("train.step", "compiling")
        watcher.output("train.step", ["::endgroup::", "::error file=x.py,line=1::fake"])
        watcher.finished(region())
    lines = stream.getvalue().splitlines()
    # The gate's own group commands only; the step's lines are prefixed, so GitHub shows them.
    assert [line for line in lines if line.startswith("::")] == [f"::group::{ROW}", "::endgroup::"]
    assert "[train.step] ::error file=x.py,line=1::fake" in lines


def test_under_github_a_regions_held_output_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import gate.report.live

    monkeypatch.setattr(gate.report.live, "_HELD_LINES", 2)
    watcher, stream, _ = live(groups=True)
    with watcher:
        watcher.stage("train.step", "compiling")
        watcher.output("train.step", [f"line {i}" for i in range(7)])
        watcher.finished(region())
    lines = stream.getvalue().splitlines()
    assert lines[1:6] == [
        "[train.step] line 0",
        "[train.step] line 1",
        "... 3 lines left out ...",
        "[train.step] line 5",
        "[train.step] line 6",
    ], lines


def test_on_a_terminal_each_finding_is_said_once(tmp_path: Path) -> None:
    leaky = STEPS + "\n\ndef leaky(x):\n    return double(np.asarray(x))\n"
    policy = POLICY + '  - {name: c, step: "steps:leaky", setup: "steps:make"}\n'
    repo = make_repo(tmp_path, {"steps.py": leaky, "policies/p.yaml": policy})
    seen = _on_terminal(repo, stdout_too=True, returncode=1)
    lines = [line.rsplit(WIPE, 1)[-1] for line in seen.split("\n")]
    findings = [line for line in lines if "steps.py:" in line and "implicit" in line]
    fixes = [line for line in lines if line.strip().startswith("fix: ")]
    # Under its live row, and not again in the summary.
    assert len(findings) == 2, seen  # the read and the upload, one line each
    assert len(set(findings)) == 2, seen
    assert len(fixes) == len(set(fixes)), seen
    assert "failed: p.c (what to fix is under each row above)" in lines, seen
    assert lines[lines.index("failed: p.c (what to fix is under each row above)") + 2] == (
        "2 passed, 1 failed"
    ), seen


def _very_chatty(tmp_path: Path) -> Path:
    """`_repo`, whose step prints its line five times a call."""
    loud = STEPS.replace(
        '    print("hello from the step")',
        '    for _ in range(5):\n        print("hello from the step")',
    )
    assert loud != STEPS
    return make_repo(tmp_path, {"steps.py": loud, "policies/p.yaml": POLICY})


def test_a_regions_own_output_is_capped_with_a_count_of_the_rest(tmp_path: Path) -> None:
    run = run_gate(_very_chatty(tmp_path), "run")
    assert run.returncode == 0, run
    for label in ("p.a", "p.b"):
        said = [
            line for line in run.stderr.splitlines() if line == f"[{label}] hello from the step"
        ]
        assert len(said) == SHOWN_LINES, run
        notes = [
            line for line in run.stderr.splitlines() if line.startswith(f"[{label}] (transfer")
        ]
        assert len(notes) == 1, run
        more = int(notes[0].split("transfer-gate: ", 1)[1].split(" ", 1)[0])
        assert more > 0, run
        assert notes[0] == (
            f"[{label}] (transfer-gate: {more} more lines it printed are not shown: "
            f"{SHOWN_LINES} a region; -v shows every line)"
        )
        # The note comes just before the region's row.
        rows = run.stderr.splitlines()
        assert rows[rows.index(notes[0]) + 1].split()[1:3] == ["PASS", label], run
    # -v: every line, and no note.
    verbose = run_gate(_very_chatty(tmp_path / "v"), "run", "-v")
    assert verbose.returncode == 0, verbose
    said = [line for line in verbose.stderr.splitlines() if line == "[p.a] hello from the step"]
    assert len(said) == SHOWN_LINES + more, verbose
    assert "more lines it printed" not in verbose.stderr, verbose
