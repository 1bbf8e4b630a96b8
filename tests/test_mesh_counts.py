"""Counting transfers, not guard lines, on a mesh; and fingerprinting where they landed.

JAX's guard logs a host value sent over N devices as N lines, each naming the whole array
and the destination (tests/guard-lines/). These tests feed the tally and the naming step
such lines directly, including the fast path's undescribed ones, which nothing but the
first call's description places; the real CLI runs are in tests/test_mesh_steps.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import msgspec
from result_samples import region, run_of, transfer

from gate.levels import Direction
from gate.region.descriptions import SightingMemory
from gate.region.sightings import PhaseTally
from gate.results.baseline import accepted_from, apply_baseline, fingerprints
from gate.results.findings import group
from gate.results.placement import Placement
from gate.results.records import Phase, RunResult, Transfer
from gate.witness.arguments import CallPlan, Moved
from gate.witness.observed import Observed, name_moves

H2D = Direction.HOST_TO_DEVICE
REPLICATED = Placement("P()", 8, 1, "'data': 8")
SPLIT = Placement("P('data')", 8, 8, "'data': 8")
WHERE = transfer().location


def lines(
    arrays: Sequence[tuple[str | None, tuple[int, ...] | None]],
    destination: Placement | None,
    *,
    segment: int = 1,
) -> list[Observed]:
    """One stretch's guard lines: each array sent to ``destination``, a line per device."""
    per = destination.devices if destination is not None and destination.devices else 1
    found = []
    for dtype, shape in arrays:
        for _ in range(per):
            found.append(
                Observed(H2D, dtype, shape, WHERE, False, None, "MainThread", segment, len(found))
            )
            if dtype is not None:
                found[-1] = replace(found[-1], destination=destination, lines_per_transfer=per)
    return found


def tally_of(*runs: list[Observed]) -> list[tuple[object, ...]]:
    tally = PhaseTally("MainThread", None, "cpu", SightingMemory(), set())
    for run in runs:
        tally.add_run(run, None, {})
    return [(s.dtype, s.shape, s.destination, count) for s, _, count in tally.sites()]


def test_a_value_sent_to_eight_devices_is_one_transfer_not_eight() -> None:
    batch = [("float32", (64, 16)), ("float32", (64, 1))]
    assert tally_of(lines(batch, REPLICATED)) == [
        ("float32", (64, 16), REPLICATED, 1),
        ("float32", (64, 1), REPLICATED, 1),
    ]
    # Two arguments of one array and destination: 16 lines, two transfers.
    twins = [("float32", (64, 16)), ("float32", (64, 16))]
    assert tally_of(lines(twins, SPLIT)) == [("float32", (64, 16), SPLIT, 2)]


def test_warm_lines_without_a_description_borrow_the_first_calls_destination() -> None:
    # JAX's C++ fast path may leave every line of a warm call empty: the first call's
    # description says which array each line moved, and over how many devices.
    first = lines([("float32", (64, 16))], REPLICATED)
    warm = [replace(seen, dtype=None, shape=None, destination=None) for seen in first]
    assert tally_of(first, warm) == [("float32", (64, 16), REPLICATED, 1)]
    # Without a first call to lean on, nothing says how many devices: each line counts.
    assert tally_of(warm) == [(None, None, None, 8)]


def test_a_calls_per_device_lines_are_grouped_before_its_arguments_are_named() -> None:
    moved = lines([("float32", (64, 16)), ("int32", (64,))], REPLICATED)
    plan = CallPlan(
        "train_step", (Moved("x", "float32", (64, 16)), Moved("labels", "int32", (64,)))
    )
    name_moves(moved, lambda _: plan)
    assert [seen.argument for seen in moved] == ["x"] * 8 + ["labels"] * 8
    # A plan of one move does not name 8 lines of two arrays.
    unnamed = lines([("float32", (64, 16)), ("int32", (64,))], REPLICATED)
    name_moves(unnamed, lambda _: CallPlan("f", (Moved("x", "float32", (64, 16)),)))
    assert {seen.argument for seen in unnamed} == {None}


def test_a_finding_on_a_mesh_says_where_it_went_and_the_bytes_that_landed() -> None:
    batch = replace(transfer(shape=(64, 16)), destination=REPLICATED)
    [finding] = group([batch])
    assert finding.what() == "host-to-device float32[64,16] (replicated to 8 devices, P())"
    assert batch.nbytes == 64 * 16 * 4
    assert batch.landed_bytes == 8 * 64 * 16 * 4
    assert replace(batch, destination=SPLIT).landed_bytes == 64 * 16 * 4
    # Sent replicated and sent split are two findings, each its own array.
    assert len(group([batch, replace(batch, destination=SPLIT)])) == 2


def _run(*transfers: Transfer) -> RunResult:
    return run_of(region(transfers=transfers))


def test_a_batch_that_went_split_and_now_goes_replicated_is_new_to_the_baseline() -> None:
    split = replace(transfer(shape=(64, 16), phase=Phase.STEADY_STATE), destination=SPLIT)
    accepted = accepted_from(_run(split))
    assert [entry.destination for entry in accepted] == ["P('data')"]
    [still] = apply_baseline(_run(split), accepted, "transfer-gate baseline").regions
    assert still.passed
    replicated = replace(split, destination=REPLICATED)
    [now] = apply_baseline(_run(replicated), accepted, "transfer-gate baseline").regions
    assert not now.passed
    assert any(note.startswith("new since the baseline") for note in now.notes)


def test_a_baseline_from_before_destinations_keeps_accepting_what_it_accepted() -> None:
    # An entry as an older gate wrote it (no "destination" key): its fingerprint left the
    # destination out, and it still accepts the same batch, wherever it lands.
    split = replace(transfer(shape=(64, 16), phase=Phase.STEADY_STATE), destination=SPLIT)
    [entry] = accepted_from(_run(split))
    [finding] = group([split])
    old = fingerprints("train.step", [finding], destinations=False)[finding]
    legacy = msgspec.structs.replace(entry, fingerprint=old, destination=None)
    [judged] = apply_baseline(_run(split), [legacy], "transfer-gate baseline").regions
    assert judged.passed
    assert judged.fixed == ()
    # On one device there is no destination, and the fingerprint is what it always was.
    single = transfer(shape=(64, 16))
    [finding] = group([single])
    assert fingerprints("r", [finding]) == fingerprints("r", [finding], destinations=False)
