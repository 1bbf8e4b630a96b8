"""The CI-log summary and the hints it shows."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from result_samples import FAILED_CHECK, SETUP_ERROR, at, region, run_of, transfer

from gate.levels import Direction
from gate.report.terminal import format_summary
from gate.results.errors import ErrorKind, RegionError
from gate.results.hints import hint_for
from gate.results.records import Phase, Recompile, RunResult
from gate.text import duration_text

COUNT_LINE = re.compile(r"\d+ passed, \d+ failed")
H2D_HINT_START = "put inputs on the device"


MIXED = run_of(
    region("ok", transfers=(transfer(failing=False),)),
    region(
        "bad",
        transfers=(
            transfer(line=12),
            transfer(Direction.DEVICE_TO_HOST, line=14, phase=Phase.STEADY_STATE),
        ),
    ),
    region("broken", error=SETUP_ERROR),
    region("wrong", has_checks=True, checks=(FAILED_CHECK,)),
)


def test_one_line_per_region_then_findings_then_the_count() -> None:
    lines = format_summary(MIXED).splitlines()
    assert lines[0].startswith("PASS  train.ok    ")
    assert lines[0] == (
        "PASS  train.ok      0 failing lines (+1 allowed)  median 1.23 ms  boundaries 155 µs/step"
    )
    assert lines[1] == "FAIL  train.bad     2 failing lines  median 1.23 ms  boundaries 155 µs/step"
    assert lines[2] == "ERROR train.broken  setup raised: ValueError: boom"
    assert lines[3].startswith("FAIL  train.wrong ")
    assert "checks failed: reference" in lines[3]
    assert lines[-1] == "1 passed, 3 failed"


def test_findings_say_where_what_how_often_then_the_fixes() -> None:
    text = format_summary(MIXED)
    lines = text.splitlines()
    start = lines.index("train.bad:")
    # Most frequent first: line 14 happens every step, line 12 only on the first call.
    assert lines[start : start + 5] == [
        "train.bad:",
        "  examples/bad.py:14: implicit device-to-host float32[8], 1x per step",
        "  examples/bad.py:12: implicit host-to-device float32[8], 1x on the first call",
        "  fix: " + hint_for(transfer(Direction.DEVICE_TO_HOST)),
        "  fix: " + hint_for(transfer()),
    ]
    assert lines[start + 5] == "train.broken:"
    assert "  examples/setup.py:3: setup raised: ValueError: boom" in lines
    assert (
        "  policies/train.yaml:7: result check failed: reference: max abs diff 0.3 > 1e-05"
        in text.splitlines()
    )
    # A passing region's logged transfer is not a finding.
    assert "train.ok:" not in text


def test_explicit_finding_says_it_was_outside_a_boundary() -> None:
    finding = transfer(Direction.DEVICE_TO_HOST, explicit=True)
    text = format_summary(run_of(region("x", transfers=(finding,))))
    assert (
        "  examples/bad.py:12: explicit device-to-host float32[8] outside a declared boundary, "
        "1x on the first call"
    ) in text.splitlines()
    assert "  fix: " + hint_for(finding) in text.splitlines()
    assert "boundaries:" in text


def test_region_line_counts_failing_and_allowed_lines() -> None:
    transfers = (
        transfer(line=12),
        transfer(line=12, phase=Phase.STEADY_STATE),
        transfer(line=14, failing=False),
        transfer(Direction.DEVICE_TO_HOST, line=14, failing=False),
    )
    text = format_summary(run_of(region("x", transfers=transfers)))
    assert text.splitlines()[0] == (
        "FAIL  train.x  1 failing line (+2 allowed)  median 1.23 ms  boundaries 155 µs/step"
    )
    # Allowed lines are counted but not listed.
    assert "examples/bad.py:14" not in text


def test_first_call_and_steady_state_at_one_line_are_one_finding() -> None:
    transfers = (
        transfer(source="y = x + np.ones(8)"),
        # JAX's steady-state guard message often has no aval: the dtype comes from the other.
        transfer(phase=Phase.STEADY_STATE, count=3, dtype=None, shape=None),
    )
    lines = format_summary(run_of(region("x", transfers=transfers))).splitlines()
    assert lines[0].startswith("FAIL  train.x  1 failing line  ")
    assert lines[2:5] == [
        "train.x:",
        "  examples/bad.py:12: implicit host-to-device float32[8], "
        "3x per step, 1x on the first call   y = x + np.ones(8)",
        "  fix: " + hint_for(transfers[0]),
    ]


def test_most_per_step_first_and_one_fix_per_distinct_hint() -> None:
    transfers = (
        transfer(line=10),
        transfer(line=11, phase=Phase.STEADY_STATE, count=1),
        transfer(line=12, phase=Phase.STEADY_STATE, count=3),
        transfer(Direction.DEVICE_TO_HOST, line=13, failing=False, count=9),
    )
    lines = format_summary(run_of(region("x", transfers=transfers))).splitlines()
    assert lines[2:7] == [
        "train.x:",
        "  examples/bad.py:12: implicit host-to-device float32[8], 3x per step",
        "  examples/bad.py:11: implicit host-to-device float32[8], 1x per step",
        "  examples/bad.py:10: implicit host-to-device float32[8], 1x on the first call",
        "  fix: " + hint_for(transfer()),
    ]
    assert lines[7] == ""


def test_thread_scope_is_named() -> None:
    finding = transfer(Direction.DEVICE_TO_HOST, phase=Phase.STEADY_STATE, thread="worker")
    text = format_summary(run_of(region("x", transfers=(finding,))))
    assert (
        "  examples/bad.py:12: implicit device-to-host float32[8] in thread worker, 1x per step"
    ) in text.splitlines()


def test_notes_follow_the_fixes() -> None:
    notes = ("no transfer map", "second note")
    lines = format_summary(run_of(region("x", transfers=(transfer(),), notes=notes))).splitlines()
    assert lines[2:6] == [
        "train.x:",
        "  examples/bad.py:12: implicit host-to-device float32[8], 1x on the first call",
        "  fix: " + hint_for(transfer()),
        "  note: no transfer map",
    ]
    assert lines[6] == "  note: second note"
    assert lines[-1] == "0 passed, 1 failed"


def test_a_passing_region_with_notes_shows_them() -> None:
    lines = format_summary(run_of(region("ok", notes=("no transfer map",)))).splitlines()
    assert lines[0].startswith("PASS  train.ok  0 failing lines  ")
    assert lines[2:4] == ["train.ok:", "  note: no transfer map"]
    assert lines[-1] == "1 passed, 0 failed"


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
    assert duration_text(seconds) == text


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


def test_quiet_rows_are_aligned_on_the_rows_shown_not_the_hidden_ones() -> None:
    run = run_of(region("a_region_with_a_long_name"), region("b", transfers=(transfer(),)))
    [row] = [
        line for line in format_summary(run, quiet=True).splitlines() if line.startswith("FAIL")
    ]
    assert row.startswith("FAIL  train.b  1 failing line"), row


def test_a_failing_row_says_what_failed_never_0_failing_lines() -> None:
    recompile = Recompile("jit(step)", at(20), 24, 24, None, failing=True)
    old = replace(transfer(), failing=False, accepted=True, in_base=True)
    failed = region("x", transfers=(old,), recompiles=(recompile,), checks=(FAILED_CHECK,))
    row = format_summary(run_of(failed)).splitlines()[0]
    assert row.startswith(
        "FAIL  train.x  1 recompile, 1 result check  transfers: 1 already in the base  "
        "recompiled 24x  "
    ), row
    assert "0 failing lines" not in row
    # With a failing line too, the row names both.
    both = replace(failed, transfers=(transfer(),))
    row = format_summary(run_of(both)).splitlines()[0]
    assert row.startswith("FAIL  train.x  1 failing line, 1 recompile, 1 result check  "), row
