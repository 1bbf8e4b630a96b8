"""The ``transfer_gate`` fixture in a user's own test suite: a real pytest run, in a subprocess.

Each inner pytest runs in a process of its own (``runpytest_subprocess``, with a timeout), so
the JAX it starts and the regions it runs leave nothing behind in this one.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from result_samples import FAILED_CHECK, SETUP_ERROR, at, region, transfer

from gate.results.records import Recompile, RegionResult

pytest_plugins = ["pytester"]

# The inner test module. Line numbers matter: the failure must name the `float(loss)` line.
TESTS = """\
import jax
import jax.numpy as jnp


@jax.jit
def loss_fn(x):
    return jnp.sum(x * x)


def make_inputs():
    return (jnp.ones(8),)


def leaky_step(x):
    loss = loss_fn(x)
    print(float(loss))
    return loss


def fetch_metrics(loss):
    return jax.device_get(loss)


def clean_step(x):
    loss = loss_fn(x)
    fetch_metrics(loss)
    return loss


def test_leaky(transfer_gate):
    transfer_gate.check(leaky_step, setup=make_inputs)


def test_clean(transfer_gate):
    result = transfer_gate.check(
        clean_step, setup=make_inputs, guard="disallow_explicit", boundaries=[fetch_metrics]
    )
    assert result.passed
    assert [b.name for b in result.boundaries] == ["test_steps:fetch_metrics"]
"""
FLOAT_LINE = TESTS.splitlines().index("    print(float(loss))") + 1
SETUP_LINE = TESTS.splitlines().index("def make_inputs():") + 1
TIMEOUT_S = 240

# A second module: its lambda step takes two arguments, the setup it borrows gives one.
MORE = """\
from test_steps import make_inputs


def test_misfit(transfer_gate):
    transfer_gate.check(
        lambda x, y: x + y,
        setup=make_inputs,
    )
"""
LAMBDA_LINE = MORE.splitlines().index("        lambda x, y: x + y,") + 1


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # On CPU, as the suite runs the gate everywhere; the gate's detector sees device-to-host there.
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    # Wide enough that pytest's one-line summary keeps what the failure's first line says.
    monkeypatch.setenv("COLUMNS", "200")
    pytester.makepyfile(test_steps=TESTS, test_more=MORE)
    return pytester


def test_a_leaky_step_fails_at_its_line_and_a_clean_one_passes(inner: pytest.Pytester) -> None:
    result = inner.runpytest_subprocess(
        "-p", "no:cacheprovider", "test_steps.py", timeout=TIMEOUT_S
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FAIL  test_steps.leaky_step  1 failing line*",
            f"*test_steps.py:{FLOAT_LINE}: implicit device-to-host float32[]*print(float(loss))",
            "*fix: float(), int(), bool()*",
            "platform: *",
            # pytest's one-line summary shows the failure's first line only: the verdict and where.
            "FAILED test_steps.py::test_leaky - Failed: transfer-gate: FAIL"
            f" test_steps.py:{FLOAT_LINE}: implicit device-to-host float32[]*",
        ]
    )
    # The run's count line would read as pytest's own, and say less.
    result.stdout.no_fnmatch_line("*0 passed, 1 failed*")


def test_a_misfit_names_each_callable_where_it_is_defined(inner: pytest.Pytester) -> None:
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "test_more.py", timeout=TIMEOUT_S)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"  test_more.py:{LAMBDA_LINE}: setup and step don't fit:"
            f" setup test_steps:make_inputs (test_steps.py:{SETUP_LINE})"
            " returned 1 value; step test_more:test_misfit.<locals>.<lambda>"
            f" (test_more.py:{LAMBDA_LINE}) takes 2 (x, y); make setup return what the step takes",
            # Cut to the terminal's width, the one-line summary still says where and why.
            "FAILED test_more.py::test_misfit - Failed: transfer-gate: ERROR"
            f" test_more.py:{LAMBDA_LINE}: setup and step don't fit:"
            f" setup test_steps:make_inputs (test_steps.py:{SETUP_LINE}) returned 1 value; *",
        ]
    )


def test_the_failure_is_in_pytests_junit_report(inner: pytest.Pytester) -> None:
    result = inner.runpytest_subprocess(
        "-p", "no:cacheprovider", "--junitxml=report.xml", "test_steps.py", timeout=TIMEOUT_S
    )
    result.assert_outcomes(passed=1, failed=1)
    cases = {
        case.get("name"): case for case in ET.parse(inner.path / "report.xml").iter("testcase")
    }
    assert cases["test_clean"].find("failure") is None
    failure = cases["test_leaky"].find("failure")
    assert failure is not None
    assert f"test_steps.py:{FLOAT_LINE}: implicit device-to-host" in (failure.text or "")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"guard": "dissallow"}, "guard is 'dissallow'; use one of allow, log, disallow"),
        ({"guard": {"host_to_dev": "log"}}, "guard has unknown direction 'host_to_dev'"),
        ({"recompiles": "never"}, "recompiles is 'never'; use one of fail, warn, allow"),
        ({"repeats": 0}, "repeats is 0; pass an int of at least 1"),
        ({"checks": {"finit": True}}, "checks has unknown key 'finit'"),
    ],
)
def test_a_wrong_argument_is_one_line_naming_it(options: dict[str, object], message: str) -> None:
    import gate

    with pytest.raises(ValueError, match="^" + re.escape(message)):
        gate.check_region(abs, **options)  # type: ignore[arg-type]


def test_a_boundary_must_be_a_named_function() -> None:
    import gate

    with pytest.raises(TypeError, match="is not a named plain Python function; pass the `def`"):
        gate.check_region(abs, boundaries=[lambda: None])


# --- format_failure on hand-made results: what comes first, what comes last ----------------------

PLATFORM = "cpu (cpu x1), jax 0.10.2, jaxlib 0.10.2"


def test_a_failure_starts_with_the_verdict_and_its_first_line_and_ends_with_the_platform() -> None:
    import gate

    leaky = region("step", transfers=(transfer(source="x = np.ones(8)"),), platform=PLATFORM)
    lines = gate.format_failure(leaky).splitlines()
    assert lines[0] == (
        "transfer-gate: FAIL examples/bad.py:12: implicit host-to-device float32[8],"
        " 1x on the first call   x = np.ones(8)"
    )
    assert lines[1].startswith("FAIL  train.step  1 failing line")
    assert "  fix: a NumPy array mixed with device arrays" in "\n".join(lines)
    assert lines[-1] == f"platform: {PLATFORM}"
    assert not any(re.fullmatch(r"\d+ passed, \d+ failed", line) for line in lines)


@pytest.mark.parametrize(
    ("result", "first"),
    [
        (
            region("e", error=SETUP_ERROR),
            "ERROR examples/setup.py:3: setup raised: ValueError: boom",
        ),
        # A warning (recompiles: warn) fails nothing: the failing check comes first.
        (
            region(
                "c",
                has_checks=True,
                checks=(FAILED_CHECK,),
                recompiles=(Recompile("jit(f)", at(20), 2, 3, None, failing=False),),
            ),
            "FAIL policies/train.yaml:7: result check failed: reference: max abs diff 0.3 > 1e-05",
        ),
        (
            region("r", recompiles=(Recompile("jit(f)", at(20), 2, 3, "x: f32[2]", failing=True),)),
            "FAIL examples/bad.py:20: jit(f) compiled again 2x in 3 runs after warm-up: x: f32[2]",
        ),
    ],
)
def test_the_first_line_names_what_fails_the_region(result: RegionResult, first: str) -> None:
    import gate

    assert gate.format_failure(result).splitlines()[0] == f"transfer-gate: {first}"


def test_a_wrapped_callable_is_named_where_the_function_inside_is_defined() -> None:
    import functools

    from gate.api import _ref

    def inner(x: int) -> int:
        return x

    @functools.wraps(inner)  # as jax.jit does: __wrapped__ leads to the `def`
    def outer(*args: int) -> int:
        return inner(*args)

    ref = _ref(outer, "step", Path.cwd())
    line = inner.__code__.co_firstlineno
    assert (ref.spec.split(":")[1], ref.line) == (inner.__qualname__, 0)
    assert ref.defined_at is not None
    assert ref.defined_at.endswith(f"test_pytest_plugin.py:{line}")
