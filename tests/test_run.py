"""`transfer-gate run` end to end, on throwaway repos, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, line_of, make_repo, run_gate

STEPS = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def device_batch():
    return (jax.device_put(np.ones((8, 4), np.float32)),)


def numpy_batch():
    return (np.ones((8, 4), np.float32),)


def clean_step(x):
    return double(x)


def numpy_step(x):
    return double(x)  # the NumPy batch is copied to the device here


def scalar_step(x):
    y = double(x)
    return y * 0.5  # eager op with a Python scalar


def raising_step(x):
    raise ValueError("the step broke")


@jax.jit
def nan_step(x):
    return x * jnp.nan  # a constant inside jit: no transfer, just a bad result
"""


def policy(*regions: str, header: str = "") -> str:
    body = "".join(regions)
    return f"version: 1\n{header}{FAST_DEFAULTS}regions:\n{body}"


def region(name: str, step: str, setup: str = "steps:device_batch", extra: str = "") -> str:
    return f"  - name: {name}\n    step: steps:{step}\n    setup: {setup}\n{extra}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": STEPS})


def test_numpy_batch_fails_at_its_line(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(region("np", "numpy_step", "steps:numpy_batch"))})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    case = run.testcase("np: transfers")
    failure = case.find("failure")
    assert failure is not None, run
    line = line_of(repo / "steps.py", "copied to the device here")
    message = failure.get("message", "")
    assert "host-to-device" in message
    assert "float32[8,4]" in message
    assert f"steps.py:{line}" in message
    assert case.get("file") == "steps.py"
    assert case.get("line") == str(line)
    assert case.get("classname") == "p.np"
    assert f"steps.py:{line}" in run.stdout


def test_a_jitted_step_fed_a_numpy_batch_is_charged_to_the_step(repo: Path) -> None:
    # No line of the user's runs while JAX moves a jitted step's arguments:
    # the transfer is charged to the step's `def`, never to "an unknown line".
    make_repo(repo, {"policies/p.yaml": policy(region("jit", "double", "steps:numpy_batch"))})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    failure = run.testcase("jit: transfers").find("failure")
    assert failure is not None, run
    line = line_of(repo / "steps.py", "def double(x):")
    assert failure.get("message", "") == (
        f"implicit host-to-device transfer of argument 'x' float32[8,4] at steps.py:{line}, "
        "1x per step, 1x on the first call"
    )
    assert "while calling the step with setup's outputs" in (failure.text or "")


def test_clean_region_passes_with_timing(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(region("clean", "clean_step"))})
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    case = run.testcase("clean: transfers")
    assert case.find("failure") is None
    assert case.find("error") is None
    out = case.findtext("system-out") or ""
    assert "median" in out, out
    assert "1 passed, 0 failed" in run.stdout


def test_python_scalar_in_eager_op_fails(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy(region("scalar", "scalar_step"))})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    failure = run.testcase("scalar: transfers").find("failure")
    assert failure is not None, run
    line = line_of(repo / "steps.py", "eager op with a Python scalar")
    assert f"steps.py:{line}" in failure.get("message", "")
    assert "float32[]" in failure.get("message", "")


D2D = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def add(x, y):
    return x + y


def inputs():
    committed = jax.device_put(np.ones(4, np.float32), jax.devices()[1])
    uncommitted = jnp.ones(4)  # made without a device: JAX may move it
    return uncommitted, committed


def step(uncommitted, committed):
    return add(uncommitted, committed)  # moved to device 1 implicitly
"""


def test_uncommitted_device_to_device_move_is_caught(tmp_path: Path) -> None:
    # JAX checks this move only on a call's slow path; with warm-up before the
    # guarded runs it would pass silently, so the first call must be guarded.
    repo = make_repo(
        tmp_path,
        {
            "d2d.py": D2D,
            "policies/p.yaml": policy("  - name: d2d\n    step: d2d:step\n    setup: d2d:inputs\n"),
        },
    )
    run = run_gate(repo, "run", "--json", "reports/map.json", devices=2)
    assert run.returncode == 1, run
    failure = run.testcase("d2d: transfers").find("failure")
    assert failure is not None, run
    line = line_of(repo / "d2d.py", "moved to device 1 implicitly")
    assert "device-to-device" in failure.get("message", "")
    assert f"d2d.py:{line}" in failure.get("message", "")
    assert "first call" in failure.get("message", "")
    # Copied every step, though JAX sees it only on the first call: never "0x per step".
    assert failure.get("message", "").endswith("every step; JAX checks it on the first call only")
    # The JSON says it too, so a tool reading per_step (0 here) is not misled.
    [moved] = json.loads((repo / "reports/map.json").read_text())["suites"][0]["regions"][0][
        "transfers"
    ]
    assert (moved["direction"], moved["per_step"], moved["every_step"]) == (
        "device-to-device",
        0,
        True,
    )


def test_a_policys_env_reaches_the_worker_before_jax_loads(tmp_path: Path) -> None:
    # The harness gives the gate one CPU device; the policy asks for two, and
    # the device-to-device move needs them: the env was set before jax loaded.
    repo = make_repo(
        tmp_path,
        {
            "d2d.py": D2D,
            "policies/p.yaml": (
                "version: 1\nenv:\n  XLA_FLAGS: --xla_force_host_platform_device_count=2\n"
                f"{FAST_DEFAULTS}regions:\n  - name: d2d\n    step: d2d:step\n"
                "    setup: d2d:inputs\n"
            ),
        },
    )
    run = run_gate(repo, "run", devices=1)
    assert run.returncode == 1, run
    failure = run.testcase("d2d: transfers").find("failure")
    assert failure is not None, run
    assert "device-to-device" in failure.get("message", "")


BOUNDARY = """
import jax
import numpy as np

import metrics
from metrics import upload


def host_batch():
    return (np.arange(6, dtype=np.float32),)


def via_module(x):
    return metrics.upload(x)


def via_from_import(x):
    return upload(x)


def outside_boundary(x):
    return jax.device_put(x)  # explicit, but not in a declared boundary
"""

METRICS = """
import jax


def upload(x):
    return jax.device_put(x)
"""


@pytest.mark.parametrize("step", ["via_module", "via_from_import"])
def test_boundary_is_honoured_under_both_import_styles(tmp_path: Path, step: str) -> None:
    repo = make_repo(
        tmp_path,
        {
            "metrics.py": METRICS,
            "bsteps.py": BOUNDARY,
            "policies/p.yaml": policy(
                f"  - name: b\n    step: bsteps:{step}\n    setup: bsteps:host_batch\n"
                "    guard: disallow_explicit\n    boundaries: [metrics:upload]\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    out = run.testcase("b: transfers").findtext("system-out") or ""
    assert "metrics:upload" in out, out


def test_explicit_transfer_outside_boundary_fails_under_disallow_explicit(
    tmp_path: Path,
) -> None:
    repo = make_repo(
        tmp_path,
        {
            "metrics.py": METRICS,
            "bsteps.py": BOUNDARY,
            "policies/p.yaml": policy(
                "  - name: b\n    step: bsteps:outside_boundary\n    setup: bsteps:host_batch\n"
                "    guard: disallow_explicit\n    boundaries: [metrics:upload]\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    message = run.testcase("b: transfers").find("failure").get("message", "")  # type: ignore[union-attr]
    line = line_of(repo / "bsteps.py", "explicit, but not in a declared boundary")
    assert "explicit host-to-device" in message
    assert f"bsteps.py:{line}" in message


def test_a_boundary_the_step_never_calls_is_a_note_and_the_region_still_judged(
    tmp_path: Path,
) -> None:
    # After a refactor the policy names a boundary the step no longer reaches.
    repo = make_repo(
        tmp_path,
        {
            "metrics.py": METRICS,
            "bsteps.py": BOUNDARY + "\n\ndef clean(x):\n    return x\n",
            "policies/p.yaml": policy(
                "  - name: stale\n    step: bsteps:clean\n    setup: bsteps:host_batch\n"
                "    boundaries: [metrics:upload]\n"
                "  - name: used\n    step: bsteps:via_module\n    setup: bsteps:host_batch\n"
                "    guard: disallow_explicit\n    boundaries: [metrics:upload]\n"
            ),
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    note = "note: boundary metrics:upload was not called in any timed run"
    assert [line.strip().startswith(note) for line in run.stdout.splitlines()].count(True) == 1
    stale = run.stdout.split("p.stale:", 1)[1]
    assert note in stale.split("\n\n", 1)[0], run


def test_raising_step_is_an_error_and_others_still_run(repo: Path) -> None:
    make_repo(
        repo,
        {"policies/p.yaml": policy(region("boom", "raising_step"), region("clean", "clean_step"))},
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    error = run.testcase("boom: transfers").find("error")
    assert error is not None, run
    assert "ValueError: the step broke" in error.get("message", "")
    assert "raise ValueError" in (error.text or "")
    clean = run.testcase("clean: transfers")
    assert clean.find("failure") is None
    assert clean.find("error") is None


def test_failing_result_check(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": policy(
                region("nan", "nan_step", extra="    checks: {finite: true}\n"),
            )
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    assert run.testcase("nan: transfers").find("failure") is None
    failure = run.testcase("nan: result checks").find("failure")
    assert failure is not None, run
    assert "finite" in failure.get("message", "")
    assert "32 of 32 values are NaN or Inf" in (failure.text or "")


def test_write_references_then_compare(repo: Path) -> None:
    checks = "    checks: {reference: refs/clean.npz, rtol: 0.0, atol: 0.0}\n"
    make_repo(repo, {"policies/p.yaml": policy(region("clean", "clean_step", extra=checks))})
    missing = run_gate(repo, "run")
    assert missing.returncode == 2, missing
    assert "create it with `transfer-gate run --write-references`" in missing.stderr
    written = run_gate(repo, "run", "--write-references")
    assert written.returncode == 0, written
    assert (repo / "policies/refs/clean.npz").is_file()
    assert "\nwrote policies/refs/clean.npz (p.clean)\n" in written.stdout
    compared = run_gate(repo, "run")
    assert compared.returncode == 0, compared
    out = compared.testcase("clean: result checks").findtext("system-out") or ""
    assert "1 leaf matches clean.npz within" in out
    # A different step against the same reference: the comparison bites.
    (repo / "policies/p.yaml").write_text(policy(region("clean", "scalar_step", extra=checks)))
    differs = run_gate(repo, "run", "--region", "clean")
    failure = differs.testcase("clean: result checks").find("failure")
    assert failure is not None, differs
    assert "32 of 32 values differ" in (failure.text or "")


MISFITS = """
import functools

import jax
import numpy as np


def _array():
    return jax.device_put(np.ones(4, np.float32))


def three():
    return _array(), _array(), _array()


def keyed():
    return {"params": _array(), "x": _array(), "y": _array()}


def train(params, x, y, lr):
    return params * x * y * lr


@jax.jit
def jitted(params, x, y, lr):
    return params * x * y * lr


def passes_through(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@passes_through
def wrapped(params, x, y, lr):
    return params * x * y * lr


def with_default(params, x, y, lr=0.5):
    return params * x * y * lr


def _combine(a, b):
    return a * b


def called_correctly(params, x, y):
    return _combine(params, x, y)  # the step's own TypeError
"""

# name -> (step, setup, the <error>'s type, text in its message)
MISFIT_CASES = {
    "too_few": ("train", "three", "misfit", "returned 3 values; step misfits:train"),
    "jitted": ("jitted", "three", "misfit", "returned 3 values; step misfits:jitted"),
    "wrapped": ("wrapped", "three", "misfit", "returned 3 values; step misfits:wrapped"),
    "dict": (
        "jitted",
        "keyed",
        "misfit",
        "returned a dict (keys: params, x, y): missing 'lr'; step misfits:jitted",
    ),
    "inner_type_error": (
        "called_correctly",
        "three",
        "step",
        "TypeError: _combine() takes 2 positional arguments but 3 were given",
    ),
}


@pytest.fixture(scope="module")
def misfit_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GateRun]:
    """One run of every misfit region, next to a region whose step has a default."""
    repo = tmp_path_factory.mktemp("misfits")
    entries = "".join(
        f"  - name: {name}\n    step: misfits:{step}\n    setup: misfits:{setup}\n"
        for name, (step, setup, *_) in MISFIT_CASES.items()
    )
    entries += "  - name: fits\n    step: misfits:with_default\n    setup: misfits:three\n"
    make_repo(repo, {"misfits.py": MISFITS, "policies/p.yaml": policy(entries)})
    return repo, run_gate(repo, "run")


@pytest.mark.parametrize("name", list(MISFIT_CASES))
def test_setup_and_step_that_do_not_fit_are_named_as_such(
    misfit_run: tuple[Path, GateRun], name: str
) -> None:
    repo, run = misfit_run
    _, _, kind, text = MISFIT_CASES[name]
    assert run.returncode == 1, run
    error = run.testcase(f"{name}: transfers").find("error")
    assert error is not None, run
    assert error.get("type") == kind, run
    message = error.get("message", "")
    assert text in message, run
    if kind == "misfit":
        policy_file = repo / "policies/p.yaml"
        step_line = line_of(policy_file, f"- name: {name}") + 1
        # Both policy lines: the setup's and the step's.
        assert f"(policies/p.yaml:{step_line + 1}) returned" in message, run
        assert f"(policies/p.yaml:{step_line}) takes" in message, run
        assert "The step was not called." in (error.text or ""), run
    assert run.testcase("fits: transfers").find("error") is None, run


def test_a_step_reading_through_the_buffer_protocol_is_told_why_it_raised(tmp_path: Path) -> None:
    # The detector switches the buffer export off while it watches, so
    # memoryview(x) raises under the gate where plain JAX on CPU would not.
    repo = make_repo(
        tmp_path,
        {
            "buf.py": """
                import jax.numpy as jnp
                import numpy as np

                def setup():
                    return (jnp.arange(4.0) + 1,)

                def step(x):
                    view = np.frombuffer(x, np.float32)
                    return x
            """,
            "policies/p.yaml": f"version: 1\n{FAST_DEFAULTS}regions:\n"
            "  - {name: buf, step: buf:step, setup: buf:setup}\n",
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    error = run.testcase("buf: transfers").find("error")
    assert error is not None, run
    message = error.get("message", "")
    assert message.startswith("step raised: TypeError: "), message
    assert "turns off device arrays' buffer export" in message, message
    assert "np.asarray(x)" in message, message
