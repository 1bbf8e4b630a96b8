"""Runs that survive anything: crashes, hangs, cancellation, gate bugs, bad input.

Every test goes through the real CLI; regions run in worker processes
(`gate.isolation.scheduler`, `gate.isolation.worker`), so a broken region takes down only itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from accelerator_rule import AcceleratorRule
from cli_helpers import FAST_DEFAULTS, GateRun, gate_env, line_of, make_repo, run_gate
from git_helpers import commit, init
from processes import communicate, process_gone, started
from result_samples import STEPS as STEPS_FOR_SAMPLES

from gate.cli.exit_codes import ExitCode
from gate.isolation.cancellation import Cancellation, cancel_after, cancel_on_signals
from gate.isolation.worker_output import StackDump, split_output
from gate.user_code import UserCode

STEPS = """
import ctypes
import os
import signal
import sys
import time

import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def batch():
    return (jax.device_put(np.ones(4, np.float32)),)


def record(name):
    with open(f"pid-{name}", "a") as out:
        out.write(f"{os.getpid()}\\n")


def first(x):
    record("first")
    return double(x)


def second(x):
    record("second")
    return double(x)


def third(x):
    record("third")
    return double(x)


def aborts(x):
    print("about to abort")
    os.abort()  # the abort line


def segfaults(x):
    print("about to segfault")
    ctypes.string_at(0)  # the segfault line


def hangs(x):
    print("about to hang")
    with open("hang-started", "w") as out:
        out.write(str(os.getpid()))
    time.sleep(120)  # the hang line


def raises(x):
    raise ValueError("the step broke")


def sigkilled(x):
    os.kill(os.getpid(), signal.SIGKILL)


def exits_hard(x):
    os._exit(3)


def exits(x):
    sys.exit("the step called sys.exit")


def killed_after_import_error(x):
    try:
        import no_such_plugin_for_the_gate_tests  # noqa: F401
    except ImportError as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def region(name: str, step: str, extra: str = "") -> str:
    return f"  - name: {name}\n    step: steps:{step}\n    setup: steps:batch\n{extra}"


def policy(*regions: str) -> str:
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{''.join(regions)}"


# The tests of a lost worker run under the accelerator's rule (tests/accelerator_rule.py): the
# worker that replaces a crashed, hung or cancelled one starts only once that one is gone.
under_the_rule = pytest.mark.usefixtures("one_process_on_the_device")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": STEPS})


def error_of(run: GateRun, name: str) -> tuple[str, str, str]:
    """(type, message, body) of the region's error."""
    error = run.testcase(f"{name}: transfers").find("error")
    assert error is not None, f"{name} has no error\n{run}"
    return error.get("type", ""), error.get("message", ""), error.text or ""


def assert_passed(run: GateRun, name: str) -> None:
    case = run.testcase(f"{name}: transfers")
    assert case.find("error") is None, run
    assert case.find("failure") is None, run


def pids(repo: Path, name: str) -> set[int]:
    return {int(line) for line in (repo / f"pid-{name}").read_text().split()}


@under_the_rule
def test_crash_hang_and_raise_leave_the_other_regions_judged(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("before", "first"),
                region("abort", "aborts"),
                region("segv", "segfaults"),
                # timeout_s also bounds the worker's start (after the crashes, a new one):
                # 12 s leaves room for a loaded runner; 6 s did not at a load of 12-16.
                region("hang", "hangs", "    timeout_s: 12\n"),
                region("boom", "raises"),
                region("after", "second"),
            )
        },
    )
    started = time.monotonic()
    run = run_gate(repo, "run", timeout=120, process=True)
    assert time.monotonic() - started < 60, run
    assert run.returncode == ExitCode.REGION_FAILED, run
    assert_passed(run, "before")
    assert_passed(run, "after")
    assert "2 passed, 4 failed" in run.stdout, run

    steps = repo / "steps.py"
    for name, signal_name, marker, printed in (
        ("abort", "SIGABRT", "the abort line", "about to abort"),
        ("segv", "SIGSEGV", "the segfault line", "about to segfault"),
    ):
        kind, message, body = error_of(run, name)
        assert kind == "crash", run
        assert f"killed by {signal_name}" in message, run
        assert "during a watched run (the first call" in message, run  # the phase it died in
        assert f"last output: {printed}" in message, run
        assert printed in body, run
        # faulthandler's stack names the line that crashed; PR tools annotate it.
        case = run.testcase(f"{name}: transfers")
        assert (case.get("file"), case.get("line")) == ("steps.py", str(line_of(steps, marker)))

    kind, message, body = error_of(run, "hang")
    assert kind == "timeout", run
    assert "still running after 12 s (timeout_s)" in message, run
    assert "during a watched run" in message, run
    assert "fix: raise the region's timeout_s" in body, run
    assert "about to hang" in body, run
    case = run.testcase("hang: transfers")
    assert case.get("line") == str(line_of(steps, "the hang line")), run
    assert float(case.get("time", "0")) < 12 + 8, run  # stopped at its timeout, not later

    kind, message, _ = error_of(run, "boom")
    assert kind == "step", run
    assert "ValueError: the step broke" in message, run

    # What the steps print reaches the CI log (stderr), named by region;
    # stdout keeps the summary.
    assert "[p.abort] about to abort" in run.stderr, run
    assert "[p." not in run.stdout, run


@under_the_rule
@pytest.mark.parametrize("base", [False, True], ids=["run", "run --base"])
def test_policies_with_other_env_get_their_workers_one_after_the_other(
    tmp_path: Path, accelerator_rule: AcceleratorRule, base: bool
) -> None:
    """Each `env:` needs a worker of its own (JAX reads it at import): never two at once."""
    repo = init(tmp_path / "repo")
    two = "env:\n  XLA_FLAGS: --xla_force_host_platform_device_count=2\n"
    files = {
        "steps.py": STEPS,
        "policies/a.yaml": f"version: 1\nsuite: a\n{FAST_DEFAULTS}regions:\n"
        + region("x", "first"),
        "policies/b.yaml": f"version: 1\nsuite: b\n{two}{FAST_DEFAULTS}regions:\n"
        + region("y", "second"),
        "policies/c.yaml": f"version: 1\nsuite: c\n{FAST_DEFAULTS}regions:\n"
        + region("z", "first"),
    }
    # compare: always, or each tree, the same as its base, would run once (its footprint).
    files = {
        k: v.replace(FAST_DEFAULTS, FAST_DEFAULTS.replace("}", ", compare: always}"))
        for k, v in files.items()
    }
    commit(repo, files, "base")
    run = run_gate(repo, "run", *(["--base", "HEAD"] if base else []))
    assert run.returncode == ExitCode.OK, run
    assert "3 passed" in run.stdout, run
    workers = [start for start in accelerator_rule.starts() if start.is_worker]
    # b's env is checked first, then the first env's, whose worker runs a; b and c then need
    # one each. Had two been alive at once, the planted lock would have failed one.
    # Under --base each policy's regions also run from the base in a worker of its own, after
    # the head's: three more. The device refused the first base worker beside the head's
    # (it never held the device), and that head's worker was replaced: one more.
    assert len(workers) == (8 if base else 4), workers


@under_the_rule
def test_a_healthy_worker_is_reused_and_a_crashed_one_replaced(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("one", "first"),
                region("two", "second"),
                region("abort", "aborts"),
                region("three", "third"),
            )
        },
    )
    run = run_gate(repo, "run", process=True)
    assert run.returncode == ExitCode.REGION_FAILED, run
    one, two, three = pids(repo, "first"), pids(repo, "second"), pids(repo, "third")
    assert len(one) == 1, one  # every run of a region in one worker
    assert one == two, run
    assert three.isdisjoint(one), run


@under_the_rule
def test_other_ways_a_worker_dies(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("killed", "sigkilled"),
                region("exit_hard", "exits_hard"),
                region("exit", "exits"),
                region("after", "first"),
            )
        },
    )
    run = run_gate(repo, "run", process=True)
    assert run.returncode == ExitCode.REGION_FAILED, run
    kind, message, _ = error_of(run, "killed")
    assert kind == "crash", run
    assert "killed by SIGKILL" in message, run
    assert "out-of-memory killer" in message, run
    kind, message, _ = error_of(run, "exit_hard")
    assert (kind, message) == ("crash", "worker crashed: exited with code 3"), run
    # sys.exit is an exception: the worker survives it and runs the next region.
    kind, message, body = error_of(run, "exit")
    assert kind == "step", run
    assert "SystemExit(the step called sys.exit) raised" in message, run
    assert "sys.exit(" in body, run
    assert_passed(run, "after")


def start_gate(repo: Path, *args: str) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """The gate, started in the background; its process group is killed when the test ends.

    Its temporary folders (the run's compilation cache) go beside ``repo``: a gate
    killed with SIGKILL cannot remove them.
    """
    return started(
        [sys.executable, "-m", "gate", *args],
        cwd=repo,
        env=gate_env(extra={"TMPDIR": str(repo.parent)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for(path: Path, gate: subprocess.Popen[str], limit_s: float = 60) -> None:
    end = time.monotonic() + limit_s
    while not path.exists():
        if gate.poll() is not None or time.monotonic() > end:
            gate.kill()
            out, err = communicate(gate, 30)
            raise AssertionError(f"{path.name} never appeared\n{out}\n{err}")
        time.sleep(0.05)
    time.sleep(0.1)  # the step is now sleeping


def finished(gate: subprocess.Popen[str], repo: Path) -> GateRun:
    out, err = communicate(gate, 60)
    return GateRun(("run",), gate.returncode, out, err, repo / "reports/transfer-gate.xml")


@under_the_rule
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cancelling_the_run_still_writes_the_report(repo: Path, signum: signal.Signals) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("done", "first"),
                region("hang", "hangs"),
                region("later", "second"),
            )
        },
    )
    with start_gate(repo, "run") as gate:
        wait_for(repo / "hang-started", gate)
        worker = int((repo / "hang-started").read_text())
        gate.send_signal(signum)
        run = finished(gate, repo)

    assert run.returncode == ExitCode.REGION_FAILED, run
    assert f"run cancelled by {signum.name}" in run.stderr, run
    assert_passed(run, "done")
    kind, message, body = error_of(run, "hang")
    assert kind == "cancelled", run
    assert f"{signum.name} arrived while this region was running" in message, run
    assert "about to hang" in body, run
    kind, message, _ = error_of(run, "later")
    assert kind == "cancelled", run
    assert f"{signum.name} arrived before this region started" in message, run
    assert not (repo / "pid-second").exists(), run
    assert process_gone(worker), "the worker outlived the cancelled run"


# Above the time a worker needs to start and run `done` on a loaded machine, far below the
# 120 s that `hangs` sleeps.
# Room for the worker's start and the first region on a loaded 2-core runner, where
# `import jax` alone can take seconds; the hung region is what must spend it.
BUDGET_S = 12


@under_the_rule
def test_a_spent_time_budget_cancels_the_run_and_still_writes_the_report(repo: Path) -> None:
    # What CI relies on: a job step runs under `docker exec`, which passes no signal on, so the
    # budget set below the job's timeout is what stops a hung region before the job is killed.
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("done", "first"),
                region("hang", "hangs"),
                region("later", "second"),
            )
        },
    )
    started = time.monotonic()
    run = run_gate(
        repo,
        "run",
        "--time-budget",
        str(BUDGET_S),
        "--json",
        "reports/transfer-gate.json",
        process=True,
    )
    took = time.monotonic() - started

    spent = f"the run's time budget of {BUDGET_S} s was spent"
    assert run.returncode == ExitCode.REGION_FAILED, run
    assert took < 60, f"the run took {took:.0f} s: the budget did not stop the hung region"
    assert f"error: run cancelled: {spent}" in run.stderr, run
    assert (repo / "hang-started").exists(), run
    assert_passed(run, "done")
    kind, message, body = error_of(run, "hang")
    assert kind == "cancelled", run
    assert f"{spent} while this region was running; the worker was stopped" in message, run
    assert "about to hang" in body, run
    kind, message, _ = error_of(run, "later")
    assert kind == "cancelled", run
    assert f"{spent} before this region started" in message, run
    assert not (repo / "pid-second").exists(), run
    report = json.loads((repo / "reports" / "transfer-gate.json").read_text())
    assert report["passed"] is False
    statuses = {
        r["name"]: (r["status"], (r["error"] or {}).get("kind"))
        for s in report["suites"]
        for r in s["regions"]
    }
    assert statuses == {
        "done": ("passed", None),
        "hang": ("error", "cancelled"),
        "later": ("error", "cancelled"),
    }


def test_a_run_within_its_time_budget_is_untouched(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(region("done", "first"))})
    run = run_gate(repo, "run", "--time-budget", "600", process=True)
    assert run.returncode == ExitCode.OK, run
    assert "cancelled" not in run.stderr, run
    assert_passed(run, "done")


@pytest.mark.parametrize("budget", ["0", "-5", "soon", "nan", "inf"])
def test_time_budget_must_be_a_positive_number_of_seconds(repo: Path, budget: str) -> None:
    make_repo(repo, {"policies/p.yaml": policy(region("done", "first"))})
    run = run_gate(repo, "run", f"--time-budget={budget}", process=True)
    assert run.returncode == ExitCode.USAGE, run
    assert "--time-budget" in run.stderr, run
    assert not (repo / "pid-first").exists(), run


def test_a_killed_gate_takes_its_worker_along(repo: Path) -> None:
    # SIGKILL leaves the gate no time to clean up: the worker notices that its
    # jobs pipe closed mid-region and kills its own process group.
    make_repo(repo, {"policies/p.yaml": policy(region("hang", "hangs"))})
    with start_gate(repo, "run") as gate:
        wait_for(repo / "hang-started", gate)
        worker = int((repo / "hang-started").read_text())
        gate.kill()
        communicate(gate, 30)
    assert process_gone(worker), "the worker outlived the gate"


def test_a_gate_bug_inside_a_worker_is_an_internal_error_for_that_region(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(region("buggy", "first"), region("fine", "second")),
            "inject/sitecustomize.py": """
                import gate.region.engine

                original = gate.region.engine.run_region

                def broken(policy, region, **options):
                    if region.name == "buggy":
                        raise KeyError("injected gate bug")
                    return original(policy, region, **options)

                gate.region.engine.run_region = broken
            """,
        },
    )
    run = run_gate(repo, "run", env={"PYTHONPATH": str(repo / "inject")}, process=True)
    assert run.returncode == ExitCode.INTERNAL, run
    assert "transfer-gate itself failed while running p.buggy; this is a bug" in run.stderr
    kind, message, body = error_of(run, "buggy")
    assert kind == "internal", run
    assert "injected gate bug" in message, run
    assert "this is a bug" in message, run
    assert 'raise KeyError("injected gate bug")' in body, run
    assert_passed(run, "fine")


def test_a_worker_that_cannot_start_errors_each_region_and_stops_trying(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("a", "first"), region("b", "first"), region("c", "first")
            )
        },
    )
    run = run_gate(repo, "run", env={"JAX_PLATFORMS": "no_such_platform"}, process=True)
    assert run.returncode == ExitCode.REGION_FAILED, run
    for name in ("a", "b", "c"):
        kind, message, body = error_of(run, name)
        assert kind == "crash", run
        assert "the worker process could not start: it exited with code 1" in message, run
        assert "no_such_platform" in body, run
    assert "not tried again" in error_of(run, "c")[1], run


def test_a_worker_that_does_not_start_in_time_is_a_timeout(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(region("slow", "first", "    timeout_s: 1\n")),
            # Workers run as `python -c BOOTSTRAP JOBS_FD RESULTS_FD`
            # (gate.isolation.spawn.worker_command).
            "inject/sitecustomize.py": """
                import sys
                import time

                if sys.argv[0] == "-c" and sys.argv[1:2] and sys.argv[1].isdigit():
                    print("worker start-up stuck", flush=True)
                    time.sleep(60)
            """,
        },
    )
    run = run_gate(repo, "run", env={"PYTHONPATH": str(repo / "inject")}, process=True)
    assert run.returncode == ExitCode.REGION_FAILED, run
    kind, message, body = error_of(run, "slow")
    assert kind == "timeout", run
    assert "the worker process did not start within 1 s (timeout_s)" in message, run
    assert "worker start-up stuck" in body, run


def test_a_worker_that_cannot_import_says_so_not_out_of_memory(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("a", "first"),
                region("b", "killed_after_import_error"),
                region("c", "first"),
            ),
            # The worker that replaces b's cannot import the gate's own worker module.
            "inject/sitecustomize.py": """
                import os
                import sys

                if sys.argv[0] == "-c":
                    if os.path.exists("first-worker-started"):
                        sys.modules["gate.isolation.worker"] = None
                    open("first-worker-started", "w").close()
            """,
        },
    )
    run = run_gate(repo, "run", env={"PYTHONPATH": str(repo / "inject")}, process=True)
    assert run.returncode == ExitCode.REGION_FAILED, run
    for name, how, missing in (
        ("b", "killed by SIGKILL (Killed)", "no_such_plugin_for_the_gate_tests"),
        ("c", "could not start: it exited with code 1", "gate.isolation.worker"),
    ):
        kind, message, body = error_of(run, name)
        assert kind == "crash", run
        assert how in message, run
        assert "after an import error (ModuleNotFoundError: " in message, run
        assert missing in message, run
        assert "memory" not in message + body, run
        assert "fix: the worker could not import a module" in body, run


def test_only_workers_import_the_users_modules_and_keep_the_environments_platforms(
    repo: Path,
) -> None:
    # A module that makes an array on import must not start a GPU backend (and its
    # preallocated memory) in the gate's own process: the policy's callables are checked in
    # the worker the regions run in. Workers keep the environment's choice of platforms.
    make_repo(
        repo,
        {
            "probe.py": """
                import os

                import jax

                with open("platforms", "a") as out:
                    out.write(f"{os.getpid()} {jax.config.jax_platforms!r}\\n")

                from steps import batch, first
            """,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n"
                "  - name: probe\n    step: probe:first\n    setup: probe:batch\n"
            ),
        },
    )
    run = run_gate(repo, "run", env={"JAX_PLATFORMS": ""}, process=True)
    assert run.returncode == ExitCode.OK, run
    (worker,) = pids(repo, "first")
    seen = dict(line.split(" ", 1) for line in (repo / "platforms").read_text().splitlines())
    assert seen == {str(worker): "''"}, seen  # imported once, by the worker, for both


# -- bad input at run time -------------------------------------------------------

BAD = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def batch():
    return (jax.device_put(np.ones(4, np.float32)),)


def setup_raises():
    raise RuntimeError("no data today")  # the setup line


def setup_returns_a_list():
    return [np.ones(4, np.float32)]


def step(x):
    return double(x)


def returns_none(x):
    double(x)


def returns_text(x):
    return "done"


def returns_two(x):
    return double(x), double(x)


def check_raises(outputs):
    raise AssertionError("custom check exploded")
"""

# name -> (policy entry, testcase, element, type, text in the message)
BAD_CASES = {
    "setup_raises": (
        "    step: bad:step\n    setup: bad:setup_raises\n",
        "transfers",
        "error",
        "setup",
        "RuntimeError: no data today",
    ),
    "setup_list": (
        "    step: bad:step\n    setup: bad:setup_returns_a_list\n",
        "transfers",
        "error",
        "bad_input",
        "bad:setup_returns_a_list returned list",
    ),
    "returns_none": (
        "    step: bad:returns_none\n    setup: bad:batch\n",
        "transfers",
        "error",
        "bad_output",
        "bad:returns_none returned None",
    ),
    "returns_text": (
        "    step: bad:returns_text\n    setup: bad:batch\n",
        "transfers",
        "error",
        "bad_output",
        "returned str",
    ),
    "ref_shape": (
        "    step: bad:step\n    setup: bad:batch\n    checks: {reference: refs/three.npz}\n",
        "result checks",
        "failure",
        "result-check",
        "shape (4,) != reference (3,)",
    ),
    "ref_dtype": (
        "    step: bad:step\n    setup: bad:batch\n    checks: {reference: refs/text.npz}\n",
        "result checks",
        "failure",
        "result-check",
        "dtype float32 != reference <U",
    ),
    "ref_leaves": (
        "    step: bad:returns_two\n    setup: bad:batch\n"
        "    checks: {reference: refs/three.npz}\n",
        "result checks",
        "failure",
        "result-check",
        "the outputs have 2 array leaves, the reference 1; regenerate it",
    ),
    "check_raises": (
        "    step: bad:step\n    setup: bad:batch\n    checks: {custom: bad:check_raises}\n",
        "result checks",
        "failure",
        "result-check",
        "custom check exploded",
    ),
}


@pytest.fixture(scope="module")
def bad_input_run(tmp_path_factory: pytest.TempPathFactory) -> GateRun:
    """One run of every bad-input region, side by side with a good one."""
    repo = tmp_path_factory.mktemp("bad-input")
    entries = "".join(f"  - name: {name}\n{entry}" for name, (entry, *_) in BAD_CASES.items())
    make_repo(
        repo,
        {
            "bad.py": BAD,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n{entries}"
                "  - name: good\n    step: bad:step\n    setup: bad:batch\n"
            ),
        },
    )
    (repo / "policies/refs").mkdir()
    np.savez(repo / "policies/refs/three.npz", np.zeros(3, np.float32))
    np.savez(repo / "policies/refs/text.npz", np.array(["a", "b", "c", "d"]))
    return run_gate(repo, "run", process=True)


@pytest.mark.parametrize("name", list(BAD_CASES))
def test_bad_input_at_run_time_is_reported_per_region(bad_input_run: GateRun, name: str) -> None:
    _, testcase, element, kind, text = BAD_CASES[name]
    run = bad_input_run
    assert run.returncode == ExitCode.REGION_FAILED, run
    found = run.testcase(f"{name}: {testcase}").find(element)
    assert found is not None, f"{name}: no <{element}>\n{run}"
    assert found.get("type") == kind, run
    assert text in found.get("message", "") + (found.text or ""), run
    assert_passed(run, "good")


def test_setup_error_points_at_the_setup_line(bad_input_run: GateRun) -> None:
    case = bad_input_run.testcase("setup_raises: transfers")
    bad = bad_input_run.report.parent.parent / "bad.py"
    assert (case.get("file"), case.get("line")) == ("bad.py", str(line_of(bad, "the setup line")))


# -- the pieces --------------------------------------------------------------------


def test_cancel_on_signals_turns_signals_into_a_request_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with cancel_on_signals() as cancel:
        assert not cancel.requested
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)  # a second signal changes nothing
        assert cancel.signal is signal.SIGTERM
        readable = os.read(cancel.fileno(), 1)
        assert readable, "the wakeup pipe is readable once cancelled"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_cancel_after_expires_once_and_is_stopped_on_exit() -> None:
    cancel = Cancellation()
    try:
        with cancel_after(cancel, 0.05):
            deadline = time.monotonic() + 10
            while not cancel.requested and time.monotonic() < deadline:
                time.sleep(0.01)
        assert cancel.reason == "the run's time budget of 0.05 s was spent"
        assert cancel.signal is None
        assert os.read(cancel.fileno(), 1), "the wakeup pipe is readable once cancelled"
        cancel.request(signal.SIGTERM)  # the first reason stays
        assert cancel.reason == "the run's time budget of 0.05 s was spent"
        assert cancel.signal is None
    finally:
        cancel.close()

    cancel = Cancellation()
    try:
        with cancel_after(cancel, 0.2):
            pass
        time.sleep(0.4)
        assert not cancel.requested, "the timer outlived the run"
        assert not [t for t in threading.enumerate() if t.name == "transfer-gate time budget"]
        with cancel_after(cancel, None):
            assert not cancel.requested
    finally:
        cancel.close()


DUMP = """\
printed by the step
Fatal Python error: Segmentation fault

Thread 0x00007f0e91abb6c0 (most recent call first):
  File "{root}/gate/isolation/worker.py", line 165 in _read_jobs
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f0e9262ab80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "{repo}/steps.py", line 22 in segfaults
  File "{root}/gate/region/engine.py", line 124 in call_step
  File "{root}/gate/isolation/worker.py", line 191 in run_job

Extension modules: numpy._core._multiarray_umath (total: 1)
"""


def test_stack_dump_names_the_user_line_and_keeps_only_user_threads(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    lines = DUMP.format(root=root, repo=tmp_path).splitlines()
    printed, dumped = split_output(lines)
    assert printed == ["printed by the step"]
    dump = StackDump.parse(dumped)
    code = UserCode(tmp_path)
    where = dump.location(code, crashed=True)
    assert where is not None
    assert (where.path, where.line, where.function) == ("steps.py", 22, "segfaults")
    text = dump.text(code)
    assert text.startswith("Fatal Python error: Segmentation fault\n\nCurrent thread")
    assert "_read_jobs" not in text
    assert "Extension modules" not in text


STOPPED = """\
Thread 0x00007f0e91abb6c0 (most recent call first):
  File "{repo}/logger.py", line 9 in drain
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f0e9262ab80 (most recent call first):
  File "{repo}/steps.py", line 31 in spin
  File "{root}/gate/region/engine.py", line 124 in call_step
  File "{root}/gate/isolation/worker.py", line 211 in run_job
"""


def test_a_stopped_region_is_placed_in_the_thread_that_runs_it_not_a_users_other_thread(
    tmp_path: Path,
) -> None:
    """A region stopped on request (timeout, cancelled run) is where the worker's region
    thread is, the one with `run_job` in its stack, even when another thread of the user's
    is listed first."""
    root = Path(__file__).resolve().parent.parent
    dump = StackDump.parse(STOPPED.format(root=root, repo=tmp_path).splitlines())
    where = dump.location(UserCode(tmp_path), crashed=False)
    assert where is not None
    assert (where.path, where.line, where.function) == ("steps.py", 31, "spin")


# -- a `gate` package of the user's ---------------------------------------------------

# A user's own package that happens to be called `gate`: were the gate's processes to import
# it instead of their own, the marker would appear and `gate.isolation.worker` would end the worker.
USERS_GATE = {
    "gate/__init__.py": """
        open("users-gate-imported", "w").close()
    """,
    "gate/isolation/worker.py": """
        raise SystemExit("the user's own gate.isolation.worker ran")
    """,
    "gate/models.py": """
        def scale(x):
            return x * 3.0
    """,
}


def test_a_gate_package_in_the_repo_does_not_shadow_the_gates_own(tmp_path: Path) -> None:
    make_repo(
        tmp_path,
        {
            **USERS_GATE,
            "src/mod.py": STEPS_FOR_SAMPLES,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}python_path: [../src]\nregions:\n"
                "  - name: clean\n    step: mod:step\n    setup: mod:inputs\n"
                "  - name: leaky\n    step: mod:leaky\n    setup: mod:inputs\n"
            ),
        },
    )
    run = run_gate(tmp_path, "run", console_script=True)
    assert run.returncode == ExitCode.REGION_FAILED, run
    assert_passed(run, "clean")
    assert run.testcase("leaky: transfers").find("failure") is not None, run
    assert "worker crashed" not in run.stdout + run.stderr, run
    assert not (tmp_path / "users-gate-imported").exists(), run


# How a user's code may reach for their own `gate`; each gets the same one line.
USES_THEIR_GATE = {
    "submodule": "from gate.models import scale",
    "name": "from gate import scale",
    "attribute": "import gate\n\nscale = gate.scale",
    "binding": "import gate",
    "deeper": "import helper",
}


def test_code_that_imports_the_users_own_gate_gets_one_line_naming_the_clash(
    tmp_path: Path,
) -> None:
    modules = {
        f"uses_{how}.py": f"{line}\n\nfrom mod import inputs, step\n"
        for how, line in USES_THEIR_GATE.items()
    }
    regions = "".join(f"  - name: {how}\n    step: uses_{how}:step\n" for how in USES_THEIR_GATE)
    make_repo(
        tmp_path,
        {
            **USERS_GATE,
            **modules,
            "helper.py": "import gate.models\n",
            "mod.py": STEPS_FOR_SAMPLES,
            "policies/p.yaml": f"version: 1\n{FAST_DEFAULTS}regions:\n{regions}",
        },
    )
    run = run_gate(tmp_path, "run", console_script=True)
    assert run.returncode == ExitCode.USAGE, run
    assert "Traceback" not in run.stderr, run
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(USES_THEIR_GATE), run
    for how, error in zip(USES_THEIR_GATE, errors, strict=True):
        where = "helper.py" if how == "deeper" else f"uses_{how}.py"
        assert f"importing 'uses_{how}' needs your own 'gate' (gate/; {where}" in error, run
        assert "rename yours (or vendor it under another name)" in error, run
