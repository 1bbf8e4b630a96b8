"""The CI-log summary and the hints it shows."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gate.guard_levels import Direction, GuardLevel, GuardSpec
from gate.hints import hint_for
from gate.report_terminal import format_duration, format_summary
from gate.results import (
    BoundaryCost,
    CheckName,
    CheckOutcome,
    ErrorKind,
    Phase,
    RegionError,
    RegionResult,
    RunResult,
    SourceLocation,
    SuiteResult,
    TimingStats,
    Transfer,
)

COUNT_LINE = re.compile(r"\d+ passed, \d+ failed")
H2D_HINT_START = "put inputs on the device"


def transfer(
    direction: Direction = Direction.HOST_TO_DEVICE,
    *,
    line: int = 12,
    failing: bool = True,
    explicit: bool = False,
    boundary: str | None = None,
    phase: Phase = Phase.FIRST_CALL,
) -> Transfer:
    return Transfer(
        direction=direction,
        explicit=explicit,
        dtype="float32",
        shape=(8,),
        location=SourceLocation("examples/bad.py", line, "train_step"),
        phase=phase,
        failing=failing,
        message="Disallowed transfer",
        boundary=boundary,
    )


def region(name: str, **changes: object) -> RegionResult:
    base = RegionResult(
        suite="train",
        name=name,
        policy_path="policies/train.yaml",
        policy_line=7,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        timing=TimingStats(20, 0.0011, 0.0012, 0.00123, 0.0013, 0.0021),
        boundaries=(BoundaryCost("pkg.io:save", 20, 0.0031, 0.000155),),
        wall_s=0.5,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def run_of(*regions: RegionResult) -> RunResult:
    return RunResult((SuiteResult("train", "policies/train.yaml", regions),))


MIXED = run_of(
    region("ok", transfers=(transfer(failing=False),)),
    region(
        "bad",
        transfers=(
            transfer(line=12),
            transfer(Direction.DEVICE_TO_HOST, line=14, phase=Phase.STEADY_STATE),
        ),
    ),
    region(
        "broken",
        error=RegionError(
            ErrorKind.SETUP,
            "ValueError: boom",
            "Traceback ...",
            SourceLocation("examples/setup.py", 3, "make_batch"),
        ),
    ),
    region(
        "wrong",
        has_checks=True,
        checks=(CheckOutcome(CheckName.REFERENCE, False, "max abs diff 0.3 > 1e-05"),),
    ),
)


def test_one_line_per_region_then_findings_then_the_count() -> None:
    lines = format_summary(MIXED).splitlines()
    assert lines[0].startswith("PASS  train.ok    ")
    assert "0 failing transfers (+1 logged)" in lines[0]
    assert "median 1.23 ms" in lines[0]
    assert "boundaries 155 µs/step" in lines[0]
    assert lines[1].startswith("FAIL  train.bad   ")
    assert "2 failing transfers" in lines[1]
    assert lines[2] == "ERROR train.broken  setup raised: ValueError: boom"
    assert lines[3].startswith("FAIL  train.wrong ")
    assert "checks failed: reference" in lines[3]
    assert lines[-1] == "1 passed, 3 failed"


def test_findings_say_where_what_when_and_the_fix() -> None:
    text = format_summary(MIXED)
    assert (
        "  examples/bad.py:12: implicit host-to-device float32[8] (first call) — "
        + hint_for(transfer())
    ) in text.splitlines()
    assert "  examples/bad.py:14: implicit device-to-host float32[8] (steady state) — " in text
    assert "  examples/setup.py:3: setup raised: ValueError: boom" in text.splitlines()
    assert (
        "  policies/train.yaml:7: result check failed: reference: max abs diff 0.3 > 1e-05"
        in text.splitlines()
    )
    # A passing region's logged transfer is not a finding.
    assert "train.ok:" not in text


def test_explicit_finding_says_it_was_outside_a_boundary() -> None:
    finding = transfer(Direction.DEVICE_TO_HOST, explicit=True)
    text = format_summary(run_of(region("x", transfers=(finding,))))
    assert "explicit device-to-host float32[8] outside a declared boundary (first call) — " in text
    assert "boundaries:" in text


@pytest.mark.parametrize(
    "run",
    [RunResult(()), run_of(), run_of(region("ok")), MIXED],
    ids=["no suites", "no regions", "one pass", "mixed"],
)
@pytest.mark.parametrize("color", [False, True])
def test_last_line_is_exactly_the_count(run: RunResult, color: bool) -> None:
    last = format_summary(run, color=color).splitlines()[-1]
    assert COUNT_LINE.fullmatch(last)
    passed = sum(r.passed for r in run.regions)
    assert last == f"{passed} passed, {len(run.regions) - passed} failed"


def test_no_colour_unless_asked() -> None:
    assert "\x1b" not in format_summary(MIXED)
    coloured = format_summary(MIXED, color=True)
    assert "\x1b[32mPASS\x1b[0m  train.ok" in coloured
    assert "\x1b[31mFAIL\x1b[0m  train.bad" in coloured
    assert "\x1b[1;31mERROR\x1b[0m train.broken" in coloured


def test_multi_line_error_message_stays_on_one_line() -> None:
    error = RegionError(ErrorKind.STEP, "KeyError:\n  'x'", "tb")
    lines = format_summary(run_of(region("e", error=error))).splitlines()
    assert lines[0] == "ERROR train.e  step raised: KeyError: 'x'"
    assert "  policies/train.yaml:7: step raised: KeyError: 'x'" in lines


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (1.5, "1.50 s"),
        (123.4, "123 s"),
        (0.00123, "1.23 ms"),
        (0.0123, "12.3 ms"),
        (0.000155, "155 µs"),
        (0.0009997, "1.00 ms"),
        (2e-9, "2.00 ns"),
    ],
)
def test_durations_are_human_friendly(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# --- hints ----------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", list(Direction))
def test_every_direction_has_a_one_line_hint(direction: Direction) -> None:
    hint = hint_for(transfer(direction))
    assert hint
    assert "\n" not in hint


def test_hints_name_the_usual_fix() -> None:
    assert "jax.device_put" in hint_for(transfer(Direction.HOST_TO_DEVICE))
    assert hint_for(transfer(Direction.HOST_TO_DEVICE)).startswith(H2D_HINT_START)
    assert "jax.device_get" in hint_for(transfer(Direction.DEVICE_TO_HOST))
    assert "sharding" in hint_for(transfer(Direction.DEVICE_TO_DEVICE))
    assert "boundaries:" in hint_for(transfer(explicit=True))
    assert "boundaries:" not in hint_for(transfer(explicit=True, boundary="pkg.io:save"))
