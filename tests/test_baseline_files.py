"""The stored baseline as a file people edit: every bad value refused, every older version read
or refused whole, and `baseline` saying what it accepts, its two parts re-recorded apart.

Through the real CLI on throwaway repos. The bad files in ``baseline-files/bad/`` are the
mistakes of issue 29 (and a few more), each a case; the files in ``baseline-files/history/``
were written by each version of the gate, at the commit their name gives, from
``history/steps.py``'s ``leaky`` region (one host-to-device transfer a step).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TESTS, make_repo, run_gate

from gate.results.baseline_file import load_baseline

FILES = TESTS / "baseline-files"
BASELINE = "policies/transfer-gate-baseline.json"
REGENERATE = "regenerate it with `transfer-gate baseline`"
KEY = f"correct that key, or {REGENERATE}"

# What each bad file is refused with, after its path: the key in the user's terms, what was
# expected, what was found, the fix.
BAD = {
    "accepted_mapping.json": f"accepted: expected a list, got {{}}; {KEY}",
    "accepted_missing.json": f'missing key "accepted"; {KEY}',
    "direction_sideways.json": 'accepted[0].direction: expected one of "host-to-device", '
    f'"device-to-host", "device-to-device", got "sideways"; {KEY}',
    "fingerprint_number.json": f"accepted[0].fingerprint: expected a string, got 12345; {KEY}",
    # The accepted line's fingerprint on an entry that shows another line (issue 54).
    "fingerprint_of_another_line.json": "accepted[0]: fingerprint 880b2bb13f3ab1bd is not that "
    "of the transfer the entry shows (p.leaky: implicit host-to-device float32[*,4] in steps.py "
    f"(leaky): return add_one(x)); an entry accepts only what it shows: {REGENERATE}",
    "flops_string.json": 'timing["p.leaky"].cost.functions[0].figures.flops: expected a number '
    f'or null, got "lots"; {KEY}',
    "median_s_1e999.json": 'timing["p.leaky"].median_s: expected a finite number, got '
    f"Infinity; {KEY}",
    "median_s_missing.json": f'timing["p.leaky"]: missing key "median_s"; {KEY}',
    "median_s_nan.json": f'timing["p.leaky"].median_s: expected a finite number, got NaN; {KEY}',
    "median_s_negative.json": 'timing["p.leaky"].median_s: expected a number >= 0.0, got -1.0; '
    f"{KEY}",
    "median_s_string.json": f'timing["p.leaky"].median_s: expected a number, got "fast"; {KEY}',
    "not_utf8.json": f"not UTF-8 text (byte 253); save it as UTF-8, or {REGENERATE}",
    "per_step_negative.json": f"accepted[0].per_step: expected a whole number >= 0, got -3; {KEY}",
    "per_step_string.json": f'accepted[0].per_step: expected a whole number, got "many"; {KEY}',
    "samples_infinity.json": 'timing["p.leaky"].samples[1]: expected a finite number, got '
    f"Infinity; {KEY}",
    "samples_null.json": f'timing["p.leaky"].samples: expected a list, got null; {KEY}',
    "top_level_list.json": f"not a transfer-gate baseline (a JSON list); {REGENERATE}",
    "top_unknown.json": f'unknown key "acepted"; {KEY}',
    "truncated.json": f"the file ends early (was it cut short?); {REGENERATE}",
    "unknown_key.json": f'timing["p.leaky"].machine: unknown key "gpu"; {KEY}',
    "version_99.json": "transfer-gate baseline version 99 was written by a newer transfer-gate "
    f"(this one reads up to 4); upgrade the gate, or {REGENERATE}",
}
# Lines that name one: a syntax error is at a line, the rest at a key.
AT_LINE = {"not_utf8.json": 1, "truncated.json": 37}

POLICY = """
version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 5}
regions:
  - name: leaky
    step: steps:leaky
    setup: steps:setup
"""
# The step marks that it ran: a refused baseline must leave nothing run.
MARKED = """
import pathlib
pathlib.Path("ran").touch()
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    steps = (FILES / "history" / "steps.py").read_text(encoding="utf-8")
    return make_repo(tmp_path, {"steps.py": steps, "policies/p.yaml": POLICY})


def test_every_bad_file_has_its_expected_refusal() -> None:
    assert sorted(p.name for p in (FILES / "bad").iterdir()) == sorted(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_baseline_is_refused_before_anything_runs_in_one_line(repo: Path, name: str) -> None:
    (repo / "steps.py").write_text((repo / "steps.py").read_text() + MARKED)
    shutil.copy(FILES / "bad" / name, repo / BASELINE)
    done = run_gate(repo, "run")
    assert done.returncode == 2, done
    at = f":{AT_LINE[name]}" if name in AT_LINE else ""
    line = f"{BASELINE}{at}: {BAD[name]}"
    assert done.stderr.splitlines()[-1:] == [f"error: {line}"], done
    assert "Traceback" not in done.stderr
    assert not (repo / "ran").exists()
    # The report still says why, as a `baseline` error at the file.
    error = done.testcase("baseline").find("error")
    assert error is not None
    assert error.get("message") == f"unusable baseline: {line}"


def test_baseline_with_a_bad_file_keeps_nothing_of_it_only_when_it_rewrites_all(
    repo: Path,
) -> None:
    shutil.copy(FILES / "bad" / "per_step_negative.json", repo / BASELINE)
    refused = run_gate(repo, "baseline", "--timing-only")
    assert refused.returncode == 2, refused
    assert refused.stderr.splitlines() == [
        f"error: {BASELINE}: {BAD['per_step_negative.json']} (--region, --timing-only and "
        "--transfers-only keep the rest of the file, so it must be readable)"
    ]
    # What the refusal tells: regenerate it, all of it.
    replaced = run_gate(repo, "baseline")
    assert replaced.returncode == 0, replaced
    assert f"warning: replacing an unreadable baseline: {BASELINE}: " in replaced.stderr
    assert load_baseline(repo / BASELINE).accepted[0].per_step == 1


# --- the versions the gate has written -----------------------------------------------------------

HISTORY = sorted(p.name for p in (FILES / "history").glob("*.json"))
NO_MACHINE = "the baseline's timing does not say which machine measured it (a version 3 file)"
NO_TIMING = {
    "v2-4c30bf7-old-format-name.json": "the baseline has no timing",
    "v2-f0f4bed.json": "the baseline has no timing",
    "v3-28e9012-timing.json": NO_MACHINE,
    "v3-13af373-cost.json": NO_MACHINE,
    "v3-b65d195-collectives.json": NO_MACHINE,
    "v3-a269845-destinations.json": NO_MACHINE,
    "v4-machine.json": None,
}


def test_a_fixture_of_every_version_the_gate_has_written() -> None:
    versions = {json.loads((FILES / "history" / n).read_text())["version"] for n in HISTORY}
    assert versions == {1, 2, 3, 4}
    assert sorted(NO_TIMING) == [n for n in HISTORY if not n.startswith("v1-")]


@pytest.mark.parametrize("name", [n for n in HISTORY if not n.startswith("v1-")])
def test_an_older_baseline_is_read_whole_and_still_accepts_what_it_accepted(
    repo: Path, name: str
) -> None:
    stored = load_baseline(FILES / "history" / name)
    [entry] = stored.accepted
    assert (entry.region, entry.fingerprint, entry.per_step) == ("p.leaky", "880b2bb13f3ab1bd", 1)
    assert stored.no_timing == NO_TIMING[name]
    assert bool(stored.timing) == (NO_TIMING[name] is None)
    shutil.copy(FILES / "history" / name, repo / BASELINE)
    # `timing: off`: what this machine's timing is against the file's is not the question here.
    policy = (repo / "policies" / "p.yaml").read_text()
    (repo / "policies" / "p.yaml").write_text(policy.replace("repeats: 5}", "timing: off}"))
    done = run_gate(repo, "run")
    assert done.returncode == 0, done
    assert "baseline: policies/transfer-gate-baseline.json (1 accepted)" in done.stdout


def test_a_version_1_baseline_is_refused_with_regenerate(repo: Path) -> None:
    shutil.copy(FILES / "history" / "v1-956c8da.json", repo / BASELINE)
    done = run_gate(repo, "run")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: {BASELINE}: transfer-gate baseline version 1 predates per-array fingerprints "
        f"(one finding per array moved) and cannot be read; {REGENERATE}"
    ]


def test_a_version_3_timing_is_not_compared_and_the_note_says_how_to_record_it(
    repo: Path,
) -> None:
    shutil.copy(FILES / "history" / "v3-a269845-destinations.json", repo / BASELINE)
    done = run_gate(repo, "run")
    assert done.returncode == 0, done
    assert (
        f"note: timing not compared: {NO_MACHINE}; record it on this machine with "
        f"`transfer-gate baseline --baseline {BASELINE} --region p.leaky --timing-only`"
    ) in done.stdout


# --- `baseline` says what it accepts; timing and transfers apart ----------------------------------

SECOND_LEAK = """

def leaky(x):
    batch = np.ones((8, 4), np.float32)
    add_one(np.ones((4,), np.float32))
    return add_one(x) + add_one(batch)
"""


def _said(stdout: str) -> list[str]:
    """``baseline``'s lines but the warning a machine's load may add: step times too noisy
    to store silently (tests/test_baseline_noise.py); this test is about the transfers."""
    return [line for line in stdout.splitlines() if not line.startswith("  warning: ")]


def _file(repo: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((repo / BASELINE).read_text())
    return document


def test_baseline_lists_what_it_accepts_and_records_timing_and_transfers_apart(
    repo: Path,
) -> None:
    first = run_gate(repo, "baseline")
    assert first.returncode == 0, first
    assert _said(first.stdout) == [
        f"baseline: {BASELINE}: 1 accepted transfer line in 1 of 1 region run, step times of "
        "1 region",
        "  accepted: p.leaky: new since the baseline file: implicit host-to-device transfer "
        "float32[8,4] at steps.py:17, 1x per step, 1x on the first call",
    ]
    before = _file(repo)
    # A second leak, then a timing re-recorded alone: the leak is listed, not accepted.
    (repo / "steps.py").write_text((repo / "steps.py").read_text() + textwrap.dedent(SECOND_LEAK))
    timing = run_gate(repo, "baseline", "--timing-only")
    assert timing.returncode == 0, timing
    lines = _said(timing.stdout)
    assert lines[0] == f"baseline: {BASELINE}: step times of 1 region (transfers as they were)"
    assert lines[1].startswith(
        "  not accepted (--timing-only): p.leaky: new since the baseline file: implicit "
        "host-to-device transfer float32[4] at steps.py:"
    )
    assert lines[-1] == (
        f"  to accept them: `transfer-gate baseline --baseline {BASELINE} --transfers-only` "
        "(with --region to pick)"
    )
    after = _file(repo)
    assert after["accepted"] == before["accepted"]
    assert after["timing"]["p.leaky"]["samples"] != before["timing"]["p.leaky"]["samples"]
    failing = run_gate(repo, "run")
    assert failing.returncode == 1, failing
    accept = (
        f"note: next step: `transfer-gate baseline --baseline {BASELINE} --region p.leaky "
        "--transfers-only` accepts every transfer this region makes now, listing each it adds; "
        "it leaves the region's stored timing and every other region as they are"
    )
    assert accept in failing.stdout
    failure = failing.testcase("leaky: transfers").find("failure")
    assert failure is not None
    assert (failure.text or "").rstrip().endswith(accept.removeprefix("note: "))
    # The transfers alone: the new one listed as accepted, the timing kept to the digit.
    transfers = run_gate(repo, *accept.split("`")[1].split()[1:])
    assert transfers.returncode == 0, transfers
    assert _said(transfers.stdout)[0] == (
        f"baseline: {BASELINE}: 2 accepted transfer lines in 1 of 1 region run "
        "(step times as they were)"
    )
    assert [line.split(": ", 2)[:2] for line in _said(transfers.stdout)[1:]] == [
        ["  accepted", "p.leaky"]
    ]
    assert _file(repo)["timing"] == after["timing"]
    assert len(_file(repo)["accepted"]) == 2
    assert run_gate(repo, "run").returncode == 0
