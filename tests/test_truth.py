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


def put_after_boundary(x):
    y = double(x)
    z = jax.device_put(np.asarray(fetch(y)) + 1)  # explicit put, after the boundary returned
    return z


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
    # What the host did with the value, where it can be known.
    assert "seen by: the gate's detector: printed or turned into a string" in out
    floats = run.testcase("floats: transfers").findtext("system-out") or ""
    assert "seen by: the gate's detector: converted with float()" in floats
    numpy = run.testcase("numpy_view: transfers").findtext("system-out") or ""
    assert "seen by: the gate's detector: read by NumPy" in numpy
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


def test_an_explicit_transfer_on_the_line_of_a_boundary_call_is_not_inside_it(
    repo: Path,
) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                ("after", "put_after_boundary"),
                extra="    guard: disallow_explicit\n    boundaries: [metrics:fetch]\n",
            )
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "after: transfers")
    line = line_of(repo / "steps.py", "explicit put, after the boundary returned")
    assert message.startswith(
        f"explicit host-to-device transfer float32[4] outside a declared boundary "
        f"at steps.py:{line}"
    )


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
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    message = failure_message(run, "debugging: transfers")
    line = line_of(repo / "steps.py", "# debug print")
    assert message == (
        f"implicit device-to-host transfer at steps.py:{line}, 1x per step, 1x on the first call"
    )
    body = run.testcase("debugging: transfers").find("failure").text or ""  # type: ignore[union-attr]
    assert "host callback jax.debug.print" in body
    # JAX moves the callback's operands with its own jax.device_put: explicit, as
    # JAX's guard sees it, so `disallow` lets it pass and only the callback fails.
    (region,) = json.loads((repo / "reports/map.json").read_text())["suites"][0]["regions"]
    operands = [t for t in region["transfers"] if t["direction"] == "host-to-device"]
    assert [(t["kind"], t["failing"], t["line"]) for t in operands] == [("explicit", False, line)]


def test_the_callback_can_be_allowed_by_the_policy(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                ("debugging", "debug_printing"),
                extra="    guard: {device_to_host: log}\n",
            )
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    assert "0 failing lines (+2 allowed)" in run.stdout


def test_a_thread_left_running_is_an_error_not_a_pass(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "bg.py": """
                import threading
                import time

                import jax
                import numpy as np


                def inputs():
                    return (jax.device_put(np.ones(4, np.float32)),)


                def step(x):
                    stop = time.monotonic() + 8
                    threading.Thread(target=lambda: time.sleep(max(0, stop - time.monotonic())),
                                     name="metrics-logger", daemon=True).start()
                    return x
            """,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n"
                "  - name: bg\n    step: bg:step\n    setup: bg:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    error = run.testcase("bg: transfers").find("error")
    assert error is not None, run
    assert "left thread metrics-logger running" in error.get("message", "")


def test_a_late_fetch_in_a_background_thread_is_caught(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "late.py": """
                import threading
                import time

                import jax
                import numpy as np


                def inputs():
                    return (jax.device_put(np.ones(4, np.float32)),)


                def log(value):
                    time.sleep(0.05)
                    print(float(value.sum()))  # fetched after the step returned


                def step(x):
                    y = x * x
                    threading.Thread(target=log, args=(y,), daemon=True).start()
                    return y
            """,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n"
                "  - name: late\n    step: late:step\n    setup: late:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "late: transfers")
    line = line_of(repo / "late.py", "fetched after the step returned")
    assert f"implicit device-to-host transfer float32[] in thread log at late.py:{line}" in message
    assert "Traceback" not in run.stderr


def test_a_fetch_in_a_fresh_pool_each_step_is_one_finding_per_step(tmp_path: Path) -> None:
    # A new pool per call: its worker is ThreadPoolExecutor-N_0 with a new N each run.
    repo = make_repo(
        tmp_path,
        {
            "pooled.py": """
                import concurrent.futures

                import jax
                import numpy as np


                def inputs():
                    return (jax.device_put(np.ones(4, np.float32)),)


                def step(x):
                    y = x * x
                    with concurrent.futures.ThreadPoolExecutor(1) as pool:
                        pool.submit(lambda: float(y.sum())).result()  # fetched in the pool
                    return y
            """,
            "policies/p.yaml": (
                "version: 1\ndefaults: {warmup: 1, guarded_runs: 1, repeats: 4}\nregions:\n"
                "  - name: pooled\n    step: pooled:step\n    setup: pooled:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    line = line_of(repo / "pooled.py", "fetched in the pool")
    assert f"pooled.py:{line}: implicit device-to-host float32[] in thread " in run.stdout, run
    assert "1 failing line  " in run.stdout, run  # not "(5 arrays)": one per run
    [region] = json.loads((repo / "reports/map.json").read_text())["suites"][0]["regions"]
    at_line = [t for t in region["transfers"] if t["line"] == line]
    assert [(t["thread"], t["per_step"], t["failing"]) for t in at_line] == [
        ("ThreadPoolExecutor-*_*", 1, True)
    ], run


def test_jaxs_refusal_in_a_pool_thread_is_the_maps_finding_not_a_second_one(
    tmp_path: Path,
) -> None:
    # JAX's own verdict (the run under `disallow`) refuses the eager index in the pool's
    # thread; the refusal reaches the step through the future and knows no thread. It is the
    # same transfer the map charged to that thread, not a third finding "1x per step".
    repo = make_repo(
        tmp_path,
        {
            "pooled.py": """
                import concurrent.futures

                import jax
                import numpy as np


                def inputs():
                    return (jax.device_put(np.ones(4, np.float32)),)


                def step(y):
                    with concurrent.futures.ThreadPoolExecutor(2) as pool:
                        list(pool.map(lambda i: float(y[i]), range(2)))  # indexed in the pool
                    return y * 2.0
            """,
            "policies/p.yaml": (
                "version: 1\ndefaults: {warmup: 1, guarded_runs: 1, repeats: 2}\nregions:\n"
                "  - name: pooled\n    step: pooled:step\n    setup: pooled:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    line = line_of(repo / "pooled.py", "indexed in the pool")
    [region] = json.loads((repo / "reports/map.json").read_text())["suites"][0]["regions"]
    at_line = sorted(
        (t["direction"], t["thread"], t["per_step"])
        for t in region["transfers"]
        if t["line"] == line
    )
    assert at_line == [
        ("device-to-host", "ThreadPoolExecutor-*_*", 2),
        ("host-to-device", "ThreadPoolExecutor-*_*", 2),
    ], run


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


def test_a_disallowed_direction_nothing_could_check_is_an_error_not_a_pass(repo: Path) -> None:
    # Simulate a JAX whose arrays lack the hook the detector needs: on CPU
    # nothing then sees device-to-host, and the policy disallows it.
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(("clean", "clean"))
            + "  - name: accepted\n    step: steps:clean\n    setup: steps:inputs\n"
            "    guard: {device_to_host: allow}\n",
            "inject/sitecustomize.py": """
                import gate.witness.detector
                import gate.witness.fetches

                def missing():
                    raise gate.witness.fetches.DetectorUnavailable("injected: no ArrayImpl._value")

                gate.witness.detector._find_hooks = missing
            """,
        },
    )
    run = run_gate(repo, "run", env={"PYTHONPATH": str(repo / "inject")})
    assert run.returncode == 1, run
    error = run.testcase("clean: transfers").find("error")
    assert error is not None, run
    assert error.get("message", "") == (
        "not checked on this platform: device-to-host transfers could not be checked on "
        "cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2 (injected: no ArrayImpl._value), and the "
        "policy disallows them; run where they can be checked (another platform, or a JAX "
        "this transfer-gate reaches), or accept the gap with `guard: {device_to_host: allow}`"
    ).replace("jax 0.10.2, jaxlib 0.10.2", _versions())
    accepted = run.testcase("accepted: transfers")
    assert accepted.find("error") is None, run
    assert accepted.find("failure") is None, run
    assert "device-to-host: not checked" in (accepted.findtext("system-out") or "")


def _versions() -> str:
    import jax
    import jaxlib.version

    return f"jax {jax.__version__}, jaxlib {jaxlib.version.__version__}"


def test_a_step_cannot_switch_the_guard_off_for_itself(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "loose.py": """
                import jax
                import numpy as np


                @jax.jit
                def double(x):
                    return x * 2.0


                def inputs():
                    return (jax.device_put(np.ones(4, np.float32)),)


                def step(x):
                    with jax.transfer_guard("allow"):  # loosened by the step
                        y = double(np.ones(4, np.float32))  # still a NumPy batch
                    with jax.transfer_guard_host_to_device("allow"):
                        z = y + 1.0  # and a Python scalar
                    return y, z
            """,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n"
                "  - name: loose\n    step: loose:step\n    setup: loose:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "loose: transfers")
    assert f"loose.py:{line_of(repo / 'loose.py', 'still a NumPy batch')}" in message
    assert f"loose.py:{line_of(repo / 'loose.py', 'and a Python scalar')}" in message
    out = run.testcase("loose: transfers").findtext("system-out") or ""
    assert f"loose.py:{line_of(repo / 'loose.py', 'loosened by the step')}: the step calls" in out


def test_a_jitted_steps_numpy_input_is_not_charged_to_its_debug_print(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "cb.py": """
                import jax
                import numpy as np


                def numpy_batch():
                    return (np.ones(8, np.float32),)


                @jax.jit
                def step(x):
                    y = x * 2.0
                    jax.debug.print("y0={}", y[0])  # the callback
                    return y
            """,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n"
                "  - name: cb\n    step: cb:step\n    setup: cb:numpy_batch\n"
                "    guard: {device_to_host: log}\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "cb: transfers")
    line = line_of(repo / "cb.py", "def step(x):")
    assert message == (
        f"implicit host-to-device transfer of argument 'x' float32[8] at cb.py:{line}, "
        "1x per step, 1x on the first call"
    )


QUEUE_LOGGER = """
import queue
import threading
import time

import jax
import numpy as np

work = queue.Queue()


def log_forever():
    while True:
        value = work.get()
        time.sleep(0.05)
        print("loss", float(value))  # fetched by a thread that outlives every step


threading.Thread(target=log_forever, name="metrics", daemon=True).start()


def inputs():
    return (jax.device_put(np.ones(4, np.float32)),)


def step(x):
    y = (x * x).sum()
    work.put(y)
    return y
"""


def test_work_handed_to_a_long_lived_thread_is_still_seen(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "qlog.py": QUEUE_LOGGER,
            "policies/p.yaml": (
                f"version: 1\n{FAST_DEFAULTS}regions:\n"
                "  - name: q\n    step: qlog:step\n    setup: qlog:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = failure_message(run, "q: transfers")
    line = line_of(repo / "qlog.py", "fetched by a thread that outlives")
    assert f"implicit device-to-host transfer float32[] in thread metrics at qlog.py:{line}" in (
        message
    )
