"""Result checks never pass on a value they could not read: every floating dtype JAX has,
reference files that keep bfloat16 as bfloat16, and a custom check's NumPy ``False``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, make_repo, run_gate

from gate.region.checks import check_finite, check_reference, custom_verdict, write_reference

# Every floating dtype this JAX has, by family; the float8 list is whatever jnp offers (the fnuz
# kinds included), so a new one is covered the day JAX adds it.
LOW_PRECISION = [
    name
    for name in dir(jnp)
    if name.startswith(("float8_", "float6_", "float4_")) or name == "bfloat16"
]


def _bad(dtype: Any) -> np.ndarray[Any, Any]:
    """``[1, NaN, Inf, -Inf]`` as ``dtype`` has them (a format without NaN or Inf saturates)."""
    return np.array([1.0, np.nan, np.inf, -np.inf], np.float32).astype(dtype)


def test_the_float8_families_and_bfloat16_are_all_known_here() -> None:
    # A guard on the list itself: the families the issue names must be present on every JAX
    # that CI tests, or the tests below would check less than they say.
    assert {
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
    } <= set(LOW_PRECISION)


@pytest.mark.parametrize("name", LOW_PRECISION)
def test_finite_checks_every_low_precision_float(name: str) -> None:
    dtype = jnp.dtype(name)
    values = _bad(dtype)
    unreadable = int(np.count_nonzero(~np.isfinite(values.astype(np.float32))))
    outcome = check_finite([("['loss']", values)])
    if unreadable:
        # A NaN or Inf this format can hold fails: np.issubdtype(bfloat16, np.inexact) is False,
        # so a check that asked NumPy whether the leaf is floating passed it.
        assert not outcome.passed, outcome
        assert outcome.detail == f"['loss'] ({name}): {unreadable} of 4 values are NaN or Inf"
    else:
        # float4/float6 have neither NaN nor Inf (they saturate): checked, and finite.
        assert outcome.passed, outcome
        assert f"({name} checked)" in outcome.detail


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64, np.complex128])
def test_finite_checks_numpys_own_floats_and_complex(dtype: Any) -> None:
    values = np.array([1.0, np.nan], dtype)
    if np.iscomplexobj(values):
        values = np.array([complex(1.0, np.inf), complex(np.nan, 0.0), 1.0], dtype)
    outcome = check_finite([("", values)])
    assert not outcome.passed
    assert (
        outcome.detail == f"output ({values.dtype}): 2 of {values.size} values are NaN or Inf"
        if np.iscomplexobj(values)
        else f"output ({values.dtype}): 1 of 2 values are NaN or Inf"
    )


def test_finite_says_which_dtypes_it_checked_and_passes_integers() -> None:
    leaves = [("['n']", np.arange(3)), ("['w']", np.ones(2, jnp.bfloat16))]
    outcome = check_finite(leaves)
    assert outcome.passed
    assert outcome.detail == "all 2 output leaves are finite (bfloat16 checked)"
    only_ints = check_finite([("", np.arange(3))])
    assert only_ints.detail == "all 1 output leaves are finite (none is floating)"


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (True, True),
        (None, True),
        (np.True_, True),
        (np.array(True), True),
        (np.array([True]), True),
        (jnp.array(True), True),
        (False, False),
        (np.False_, False),  # what np.all(np.isfinite(out)) returns: `is False` never matched
        (np.array(False), False),
        (jnp.array(False), False),
        (np.array([True, False]), None),  # an unreduced array says neither
        (1, None),
        (0.0, None),
        ("ok", None),
        ([True], None),
    ],
)
def test_a_custom_checks_answer(answer: object, verdict: bool | None) -> None:
    assert custom_verdict(answer) is verdict


def test_a_bfloat16_reference_round_trips_and_compares_in_float32(tmp_path: Path) -> None:
    reference = tmp_path / "refs" / "bf16.npz"
    values = np.array([0.1, 1.5, -2.25], np.float32).astype(jnp.bfloat16)
    leaves = [("['logits']", values), ("['step']", np.array(3, np.int32))]
    write_reference(reference, leaves)
    with np.load(reference) as data:
        assert all(data[name].dtype.kind != "V" for name in data.files)  # not np.savez's |V2
    same = check_reference(leaves, reference, rtol=0.0, atol=0.0)
    assert same.passed, same
    # One bfloat16 step away from 1.5 is 1.5078125: beyond atol 1e-3, within 1e-2.
    nudged = [("['logits']", np.array([0.1, 1.5078125, -2.25], np.float32).astype(jnp.bfloat16))]
    nudged.append(leaves[1])
    assert not check_reference(nudged, reference, rtol=0.0, atol=1e-3).passed
    assert check_reference(nudged, reference, rtol=0.0, atol=1e-2).passed


def test_a_reference_matches_leaves_by_path(tmp_path: Path) -> None:
    reference = tmp_path / "ref.npz"
    write_reference(reference, [("['b']", np.ones(2, np.float32)), ("['w']", np.zeros(2))])
    renamed = check_reference(
        [("['b']", np.ones(2, np.float32)), ("['v']", np.zeros(2))], reference, 0.0, 0.0
    )
    assert not renamed.passed
    assert renamed.detail == (
        "['v']: a leaf the reference does not have; "
        "['w']: the reference has this leaf, the outputs do not"
    )


def test_an_old_reference_without_paths_is_compared_by_position_or_refused(tmp_path: Path) -> None:
    old = tmp_path / "old.npz"
    np.savez(old, np.ones(2, np.float32), np.zeros(3))
    assert check_reference([("a", np.ones(2, np.float32)), ("b", np.zeros(3))], old, 0, 0).passed
    fewer = check_reference([("a", np.ones(2, np.float32))], old, 0, 0)
    assert fewer.detail == (
        "the outputs have 1 array leaves, the reference 2; "
        "regenerate it with `transfer-gate run --write-references`"
    )
    # What np.savez made of a bfloat16 leaf: raw bytes, which can never compare.
    raw = tmp_path / "raw.npz"
    np.savez(raw, np.ones(2, jnp.bfloat16))
    unreadable = check_reference([("", np.ones(2, jnp.bfloat16))], raw, 0, 0)
    assert not unreadable.passed
    assert "as raw |V2 bytes" in unreadable.detail
    assert "regenerate it with `transfer-gate run --write-references`" in unreadable.detail


STEPS = """
import jax
import jax.numpy as jnp
import numpy as np


def make():
    return (jax.device_put(np.linspace(-1.0, 1.0, 64, dtype=np.float32)),)


@jax.jit
def bf16_log(x):
    return jnp.log(x.astype(jnp.bfloat16))  # 32 negative inputs: 32 NaNs


@jax.jit
def f8_overflow(x):
    return (x * 1e6).astype(jnp.float8_e5m2)  # beyond e5m2's range: Inf


@jax.jit
def bf16_clean(x):
    return (x * 3.0).astype(jnp.bfloat16)


@jax.jit
def bf16_other(x):
    return (x * 3.5).astype(jnp.bfloat16)


def numpy_false(out):
    return np.all(out > 100)  # np.bool_(False)


def numpy_true(out):
    return np.all(np.isfinite(out.astype(np.float32)))


def unreduced(out):
    return out > 0  # an array of 64 answers
"""


def _region(name: str, step: str, checks: str) -> str:
    return (
        f"  - name: {name}\n    step: steps:{step}\n    setup: steps:make\n    checks: {checks}\n"
    )


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GateRun]:
    """One run of every region below, through the real CLI."""
    repo = tmp_path_factory.mktemp("checks")
    regions = "".join(
        [
            _region("bf16_nan", "bf16_log", "{finite: true}"),
            _region("f8_inf", "f8_overflow", "{finite: true}"),
            _region("bf16_finite", "bf16_clean", "{finite: true}"),
            _region("np_false", "bf16_clean", "{custom: 'steps:numpy_false'}"),
            _region("np_true", "bf16_clean", "{custom: 'steps:numpy_true'}"),
            _region("unreduced", "bf16_clean", "{custom: 'steps:unreduced'}"),
        ]
    )
    make_repo(
        repo,
        {"steps.py": STEPS, "policies/p.yaml": f"version: 1\n{FAST_DEFAULTS}regions:\n{regions}"},
    )
    return repo, run_gate(repo, "run")


def _outcome(run: GateRun, region: str) -> tuple[str, str, str]:
    case = run.testcase(f"{region}: result checks")
    for tag in ("failure", "error"):
        found = case.find(tag)
        if found is not None:
            return tag, found.get("message", ""), found.text or ""
    return "passed", "", case.findtext("system-out") or ""


def test_a_bfloat16_nan_and_a_float8_inf_fail_finite(checked: tuple[Path, GateRun]) -> None:
    _, run = checked
    assert run.returncode == 1, run
    tag, _, body = _outcome(run, "bf16_nan")
    assert tag == "failure", run
    assert "(bfloat16): 32 of 64 values are NaN or Inf" in body  # the dtype, named
    tag, _, body = _outcome(run, "f8_inf")
    assert tag == "failure", run
    assert "values are NaN or Inf" in body
    tag, _, out = _outcome(run, "bf16_finite")
    assert tag == "passed", run
    assert "(bfloat16 checked)" in out


def test_a_custom_check_returning_numpys_false_fails(checked: tuple[Path, GateRun]) -> None:
    _, run = checked
    tag, _, body = _outcome(run, "np_false")
    assert tag == "failure", run
    assert "steps:numpy_false returned False (numpy.bool" in body
    assert _outcome(run, "np_true")[0] == "passed", run


def test_a_custom_check_answering_neither_is_an_error_naming_its_type(
    checked: tuple[Path, GateRun],
) -> None:
    repo, run = checked
    case = run.testcase("unreduced: transfers")
    error = case.find("error")
    assert error is not None, run
    message = error.get("message", "")
    assert "custom check steps:unreduced returned numpy.ndarray of shape (64,)" in message
    assert "return True or None to pass and False to fail" in message
    # At the check's own definition, where the fix goes.
    line = (repo / "steps.py").read_text().splitlines().index("def unreduced(out):") + 1
    assert case.get("file") == "steps.py"
    assert case.get("line") == str(line)


def test_write_references_keeps_a_bfloat16_output_comparable(tmp_path: Path) -> None:
    checks = "{reference: refs/bf16.npz, rtol: 0.0, atol: 0.0}"
    make_repo(
        tmp_path,
        {
            "steps.py": STEPS,
            "policies/p.yaml": f"version: 1\n{FAST_DEFAULTS}regions:\n"
            + _region("bf16", "bf16_clean", checks),
        },
    )
    written = run_gate(tmp_path, "run", "--write-references")
    assert written.returncode == 0, written
    compared = run_gate(tmp_path, "run")
    assert compared.returncode == 0, compared
    assert "1 leaf matches bf16.npz" in (
        compared.testcase("bf16: result checks").findtext("system-out") or ""
    )
    (tmp_path / "policies/p.yaml").write_text(
        f"version: 1\n{FAST_DEFAULTS}regions:\n" + _region("bf16", "bf16_other", checks)
    )
    differs = run_gate(tmp_path, "run")
    assert differs.returncode == 1, differs
    assert _outcome(differs, "bf16")[0] == "failure", differs
