"""Truth on every platform: device-to-host on CPU, threads, strict boundaries, callbacks,
fresh inputs and the platform itself, through the real CLI on this CPU-only machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, line_of, make_repo, run_gate

STEPS = """
import threading

import jax
import jax.numpy as jnp
import numpy as np

import metrics
from metrics import fetch

CACHED = jax.device_put(np.ones(4, np.float32))
np.asarray(CACHED)  # its host copy may now exist


@jax.jit
def double(x):
    return x * 2.0


def inputs():
    return (jax.device_put(np.arange(4, dtype=np.float32)),)


def cached_inputs():
    return (CACHED,)


def prints(x):
    y = double(x)
    print(y)  # print fetches
    return y


def floats(x):
    y = double(x)
    total = float(y.sum())  # float fetches
    return y, total


def numpy_view(x):
    y = double(x)
    host = np.asarray(y)  # asarray fetches
    return y, host.shape[0]


def in_a_thread(x):
    y = double(x)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(y + np.ones(4, np.float32)))  # thread
    worker.start()
    worker.join()
    return y


@jax.jit
def debug_printing(x):
    jax.debug.print("x is {x}", x=x)  # debug print
    return x * 2.0


def get_in_boundary(x):
    y = double(x)
    metrics.fetch(y)
    fetch(double(y))  # a new array: the same one again would be read from its host copy
    return y


def get_outside_boundary(x):
    y = double(x)
    jax.device_get(y)  # explicit, no boundary
    return y


def clean(x):
    return double(x)
"""

METRICS = """
import jax


def fetch(x):
    return jax.device_get(x)
"""


def policy(*regions: tuple[str, str], header: str = "", extra: str = "") -> str:
    body = "".join(
        f"  - name: {name}\n    step: steps:{step}\n    setup: steps:inputs\n{extra}"
        for name, step in regions
    )
    return f"version: 1\n{header}{FAST_DEFAULTS}regions:\n{body}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": STEPS, "metrics.py": METRICS})


def failure_message(run: GateRun, case: str) -> str:
    failure = run.testcase(case).find("failure")
    assert failure is not None, run
    return failure.get("message", "")


def test_device_to_host_fetches_fail_at_their_lines_on_cpu(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                ("prints", "prints"), ("floats", "floats"), ("numpy_view", "numpy_view")
            )
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    steps = repo / "steps.py"
    for case, needle in (
        ("prints", "print fetches"),
        ("floats", "float fetches"),
        ("numpy_view", "asarray fetches"),
    ):
        message = failure_message(run, f"{case}: transfers")
        assert message.startswith("implicit device-to-host transfer float32"), message
        assert f"steps.py:{line_of(steps, needle)}" in message
    out = run.testcase("prints: transfers").findtext("system-out") or ""
    assert "device-to-host: gate detector" in out
    assert "Platform: cpu" in out


def test_a_clean_step_says_what_checked_each_direction(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(("clean", "clean"))})
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    suite = run.junit().find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["clean.checked_by.device-to-host"] == "gate detector"
    assert properties["clean.checked_by.host-to-device"] == "jax guard"
    assert properties["platform"].startswith("cpu")
    assert run.stdout.startswith("platform: cpu")
    assert "NOT CHECKED" not in run.stdout


def test_device_get_passes_in_a_boundary_and_fails_outside_under_disallow_explicit(
    repo: Path,
) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                ("inside", "get_in_boundary"),
                ("outside", "get_outside_boundary"),
                extra="    guard: disallow_explicit\n    boundaries: [metrics:fetch]\n",
            )
        },
    )
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    assert run.testcase("inside: transfers").find("failure") is None, run
    message = failure_message(run, "outside: transfers")
    line = line_of(repo / "steps.py", "explicit, no boundary")
    assert message.startswith("explicit device-to-host transfer float32[4] outside a declared")
    assert f"steps.py:{line}" in message
    regions = json.loads((repo / "reports/map.json").read_text())["suites"][0]["regions"]
    inside = next(r for r in regions if r["name"] == "inside")
    in_boundary = [t for t in inside["transfers"] if t["boundary"] == "metrics:fetch"]
    # Both call styles, module.fn and `from module import fn`, reach the boundary.
    assert len(in_boundary) == 1
    assert in_boundary[0]["kind"] == "explicit"
    assert in_boundary[0]["per_step"] == 2
    assert in_boundary[0]["failing"] is False


def test_a_transfer_in_a_thread_the_step_starts_fails_at_its_line(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(("threaded", "in_a_thread"))})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "threaded: transfers")
    line = line_of(repo / "steps.py", "# thread")
    assert f"steps.py:{line}" in message
    assert "host-to-device" in message
    assert "in thread" in message


def test_a_debug_print_inside_jit_is_reported_at_its_line(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(("debugging", "debug_printing"))})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "debugging: transfers")
    line = line_of(repo / "steps.py", "# debug print")
    assert message.startswith(
        f"2 transfers at 1 line: implicit device-to-host transfer at steps.py:{line}, 1x per step"
    )
    # The callback's result going back to the device is charged to the same line.
    assert message.endswith(f"also host-to-device at steps.py:{line}")
    body = run.testcase("debugging: transfers").find("failure").text or ""  # type: ignore[union-attr]
    assert "host callback jax.debug.print" in body


def test_setup_returning_cached_arrays_is_warned_about(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(("cached", "clean")).replace(
                "setup: steps:inputs", "setup: steps:cached_inputs"
            )
        },
    )
    run = run_gate(repo, "run")
    assert "handed back the same array objects as the last run" in run.stdout, run
    out = run.testcase("cached: transfers").findtext("system-out") or ""
    assert "build new arrays in setup" in out


@pytest.mark.parametrize("how", ["flag", "policy"])
def test_requiring_a_gpu_on_this_cpu_machine_fails_clearly(repo: Path, how: str) -> None:
    header = "platform: gpu\n" if how == "policy" else ""
    make_repo(repo, {"policies/p.yaml": policy(("clean", "clean"), header=header)})
    args = ("run", "--require-platform", "gpu") if how == "flag" else ("run",)
    env = {} if how == "flag" else {"JAX_PLATFORMS": None}
    run = run_gate(repo, *args, env=env)
    assert run.returncode == 1, run
    error = run.testcase("clean: transfers").find("error")
    assert error is not None, run
    message = error.get("message", "")
    assert message.startswith("wrong platform: this region requires gpu, but JAX runs on cpu")
    if how == "flag":
        # The tests pin JAX_PLATFORMS=cpu, and the gate names that first.
        assert "likely cause: JAX_PLATFORMS=cpu keeps JAX off the gpu; unset it" in message
    else:
        assert "likely cause: a CPU-only jaxlib" in message
