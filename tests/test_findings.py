"""Transfers grouped by the line that made them, in the order every reporter shows them."""

from __future__ import annotations

from dataclasses import fields, replace

import msgspec
import pytest
from result_samples import region, run_of, transfer

from gate.levels import Direction
from gate.results.baseline import (
    Accepted,
    accept_base,
    accepted_from,
    apply_baseline,
    entries,
    entry_fingerprint,
)
from gate.results.findings import UNDESCRIBED, Finding, group
from gate.results.line_map import parse_diff
from gate.results.placement import Placement
from gate.results.records import Phase, Site, Transfer
from gate.user_code import SourceLocation


def only(findings: tuple[Finding, ...]) -> Finding:
    [finding] = findings
    return finding


# Each part of a `Site`, changed: a transfer that differs from `transfer()` in that part alone.
OTHER_SITE = {
    "direction": transfer(Direction.DEVICE_TO_HOST),
    "explicit": transfer(explicit=True),
    "location": transfer(path="examples/other.py"),
    "boundary": transfer(boundary="examples.bad:fetch"),
    "thread": transfer(thread="loader"),
    "dtype": transfer(dtype="int32"),
    "shape": transfer(shape=(8, 2)),  # a feature dimension: another array
    "destination": replace(transfer(), destination=Placement("P('data')", 8, 8)),
}


def _visible(entry: Accepted) -> dict[str, object]:
    """What an entry shows a reviewer about which transfer it is: all but counts and hash."""
    shown = msgspec.structs.asdict(entry)
    return {k: v for k, v in shown.items() if k not in ("fingerprint", "per_step", "first_call")}


def test_every_part_of_a_site_shows_in_its_baseline_entry() -> None:
    # A part no entry shows would make two findings share one entry: accepting one accepts both.
    assert set(OTHER_SITE) == {field.name for field in fields(Site)}
    [usual] = entries("r", group([transfer()])).values()
    for part, other in OTHER_SITE.items():
        [entry] = entries("r", group([other])).values()
        assert _visible(entry) != _visible(usual), part
        assert entry.fingerprint != usual.fingerprint, part


def test_a_findings_fingerprint_is_that_of_the_entry_that_shows_it() -> None:
    # Every part set at once, a named argument, and two identical lines told apart by order.
    sent = replace(
        transfer(thread="loader", boundary="examples.bad:fetch", shape=(4, 3), line=20),
        argument="x",
        destination=Placement("P('data', 'model')", 8, 8),
    )
    again = replace(sent, location=SourceLocation("examples/bad.py", 30, "train_step"))
    findings = group([*OTHER_SITE.values(), sent, again])
    shown = entries("r", findings)
    assert len({entry.fingerprint for entry in shown.values()}) == len(findings)
    for entry in shown.values():
        assert entry.fingerprint == entry_fingerprint(entry), entry
    assert sorted(e.occurrence for e in shown.values() if e.array == "x float32[*,3]") == [1, 2]
    # What a reader of the file sees changes the fingerprint, whichever field it is.
    [entry] = [e for e in shown.values() if e.occurrence == 2]
    for name, value in _visible(entry).items():
        if isinstance(value, str) and value:
            edited = msgspec.structs.replace(entry, **{name: value + "x"})
        elif name == "occurrence":
            edited = msgspec.structs.replace(entry, occurrence=1)
        else:
            continue
        assert entry_fingerprint(edited) != entry.fingerprint, name


def test_no_transfers_no_findings() -> None:
    assert group([]) == ()


def test_one_first_call_transfer() -> None:
    finding = only(group([transfer()]))
    assert (finding.first_call, finding.per_step) == (1, 0)
    assert finding.counts() == "1x on the first call"
    assert finding.what() == "host-to-device float32[8]"
    assert finding.where() == "examples/bad.py:12"
    assert finding.scope() == ""
    assert finding.headline() == (
        "implicit host-to-device transfer float32[8] at examples/bad.py:12, 1x on the first call"
    )


def test_a_line_in_a_loop_counts_per_step() -> None:
    finding = only(group([transfer(phase=Phase.STEADY_STATE, count=3)]))
    assert (finding.first_call, finding.per_step) == (0, 3)
    assert finding.counts() == "3x per step"
    assert finding.headline() == (
        "implicit host-to-device transfer float32[8] at examples/bad.py:12, 3x per step"
    )


def test_first_call_and_steady_state_at_one_line_are_one_finding() -> None:
    findings = group(
        [
            transfer(Direction.DEVICE_TO_HOST),
            transfer(Direction.DEVICE_TO_HOST, phase=Phase.STEADY_STATE, count=3),
        ]
    )
    finding = only(findings)
    assert (finding.first_call, finding.per_step) == (1, 3)
    assert finding.counts() == "3x per step, 1x on the first call"
    assert finding.headline() == (
        "implicit device-to-host transfer float32[8] at examples/bad.py:12, "
        "3x per step, 1x on the first call"
    )


def test_the_guards_steady_state_sighting_does_not_add_to_the_maps_count() -> None:
    # The map counts a line 3x per run; JAX's own guarded run sees it once more.
    # Per step is the most seen in one run, not the sum of the two sightings.
    guarded = transfer(phase=Phase.STEADY_STATE, count=1, dtype=None, shape=None)
    mapped = transfer(phase=Phase.STEADY_STATE, count=3)
    for order in ([guarded, mapped], [mapped, guarded]):
        finding = only(group(order))
        assert finding.per_step == 3
        assert finding.counts() == "3x per step"


@pytest.mark.parametrize("shaped_first", [True, False])
def test_dtype_and_shape_come_from_whichever_transfer_has_them(shaped_first: bool) -> None:
    # A steady-state guard line often has no aval in JAX's message.
    bare = transfer(phase=Phase.STEADY_STATE, dtype=None, shape=None, message="guard text")
    shaped = transfer(dtype="bfloat16", shape=(2, 3), message="map text")
    members = [shaped, bare] if shaped_first else [bare, shaped]
    finding = only(group(members))
    assert (finding.dtype, finding.shape) == ("bfloat16", (2, 3))
    assert finding.what() == "host-to-device bfloat16[2,3]"
    assert finding.sample_with_shape().describe() == "host-to-device bfloat16[2,3]"
    assert finding.headline() == (
        "implicit host-to-device transfer bfloat16[2,3] at examples/bad.py:12, "
        "1x per step, 1x on the first call"
    )


def test_no_dtype_anywhere_names_only_the_direction() -> None:
    finding = only(group([transfer(dtype=None, shape=None, line=5)]))
    assert finding.what() == "host-to-device"
    assert finding.headline() == (
        "implicit host-to-device transfer at examples/bad.py:5, 1x on the first call"
    )


def test_unknown_location() -> None:
    bare = Transfer(Direction.HOST_TO_DEVICE, False, None, None, None, Phase.FIRST_CALL, True, "")
    finding = only(group([bare]))
    assert finding.where() == "an unknown line"
    assert finding.headline() == (
        "implicit host-to-device transfer at an unknown line, 1x on the first call"
    )


def test_source_and_failing_come_from_any_grouped_transfer() -> None:
    findings = group(
        [
            transfer(phase=Phase.FIRST_CALL, failing=False),
            transfer(phase=Phase.STEADY_STATE, source="y = x + np.ones(8)"),
        ]
    )
    finding = only(findings)
    assert finding.source == "y = x + np.ones(8)"
    assert finding.failing


@pytest.mark.parametrize(
    "other",
    [
        {"direction": Direction.DEVICE_TO_HOST},
        {"explicit": True},
        {"boundary": "pkg.io:save"},
        {"thread": "worker"},
        {"line": 13},
        {"path": "examples/other.py"},
    ],
    ids=["direction", "explicit", "boundary", "thread", "line", "path"],
)
def test_a_different_direction_kind_scope_or_line_is_another_finding(
    other: dict[str, object],
) -> None:
    findings = group([transfer(), transfer(**other)])  # type: ignore[arg-type]
    assert len(findings) == 2


def test_failing_first_then_every_step_by_count_then_first_call_only_by_line() -> None:
    allowed_hot = transfer(line=1, phase=Phase.STEADY_STATE, count=9, failing=False)
    first_call_twice = transfer(line=2, count=2)  # e.g. TrainState.create
    first_only = transfer(line=3)  # e.g. optax init
    once_per_step = transfer(line=4, phase=Phase.STEADY_STATE, count=1)
    thrice_per_step = transfer(line=5, phase=Phase.STEADY_STATE, count=3)
    findings = group([allowed_hot, first_only, first_call_twice, once_per_step, thrice_per_step])
    assert [f.where() for f in findings] == [
        "examples/bad.py:5",
        "examples/bad.py:4",
        # One-time lines (initialisers) after every per-step line, by file and line:
        # how often the first call moved them does not make them more urgent.
        "examples/bad.py:2",
        "examples/bad.py:3",
        "examples/bad.py:1",
    ]
    assert [f.failing for f in findings] == [True, True, True, True, False]
    assert [f.every_step for f in findings] == [True, True, False, False, True]


def test_ties_are_ordered_by_path_then_line_then_direction() -> None:
    findings = group(
        [
            transfer(path="b.py", line=9),
            transfer(Direction.DEVICE_TO_HOST, path="a.py", line=9),
            transfer(path="a.py", line=9),
            transfer(path="b.py", line=2),
            Transfer(Direction.HOST_TO_DEVICE, False, None, None, None, Phase.FIRST_CALL, True, ""),
        ]
    )
    assert [(f.where(), f.direction) for f in findings] == [
        ("a.py:9", Direction.DEVICE_TO_HOST),
        ("a.py:9", Direction.HOST_TO_DEVICE),
        ("b.py:2", Direction.HOST_TO_DEVICE),
        ("b.py:9", Direction.HOST_TO_DEVICE),
        ("an unknown line", Direction.HOST_TO_DEVICE),
    ]


@pytest.mark.parametrize(
    ("changes", "scope", "headline"),
    [
        (
            {"thread": "worker"},
            "in thread worker",
            "implicit device-to-host transfer float32[8] in thread worker "
            "at examples/bad.py:12, 1x per step",
        ),
        (
            {"explicit": True},
            "outside a declared boundary",
            "explicit device-to-host transfer float32[8] outside a declared boundary "
            "at examples/bad.py:12, 1x per step",
        ),
        (
            {"explicit": True, "boundary": "pkg.io:save"},
            "in boundary pkg.io:save",
            "explicit device-to-host transfer float32[8] in boundary pkg.io:save "
            "at examples/bad.py:12, 1x per step",
        ),
        (
            {"boundary": "pkg.io:save", "thread": "worker"},
            "in boundary pkg.io:save in thread worker",
            "implicit device-to-host transfer float32[8] in boundary pkg.io:save "
            "in thread worker at examples/bad.py:12, 1x per step",
        ),
        (
            {"explicit": True, "thread": "worker"},
            "outside a declared boundary in thread worker",
            "explicit device-to-host transfer float32[8] outside a declared boundary "
            "in thread worker at examples/bad.py:12, 1x per step",
        ),
    ],
    ids=["thread", "explicit outside", "explicit inside", "boundary and thread", "explicit thread"],
)
def test_scope_names_the_boundary_and_the_thread(
    changes: dict[str, object], scope: str, headline: str
) -> None:
    finding = only(
        group([transfer(Direction.DEVICE_TO_HOST, phase=Phase.STEADY_STATE, **changes)])  # type: ignore[arg-type]
    )
    assert finding.scope() == scope
    assert finding.headline() == headline
    assert finding.kind == ("explicit" if changes.get("explicit") else "implicit")


# --- one finding per array ----------------------------------------------------------------------

SGD = "return sgd_update(params, x, y, LR)"


def three_arrays(phase: Phase = Phase.FIRST_CALL) -> list[Transfer]:
    """``sgd_update(params, x, y, LR)``: three host values moved by one call, in JAX's order."""
    return [
        replace(
            transfer(phase=phase, dtype=dtype, shape=shape, source=SGD),
            argument=argument,
            jitted_call="sgd_update",
        )
        for argument, dtype, shape in [
            ("x", "float32", (32, 16, 16, 1)),
            ("y", "int32", (32,)),
            ("lr", "float32", ()),
        ]
    ]


def test_each_array_one_call_moves_is_its_own_finding_with_its_own_count() -> None:
    findings = group([*three_arrays(), *three_arrays(Phase.STEADY_STATE)])
    assert [(f.dtype, f.shape) for f in findings] == [
        ("float32", (32, 16, 16, 1)),
        ("int32", (32,)),
        ("float32", ()),
    ]
    assert [(f.first_call, f.per_step) for f in findings] == [(1, 1)] * 3
    assert [f.sample_with_shape().nbytes for f in findings] == [32768, 128, 4]
    assert [f.headline() for f in findings] == [
        "implicit host-to-device transfer of argument 'x' float32[32,16,16,1] "
        "at examples/bad.py:12, 1x per step, 1x on the first call",
        "implicit host-to-device transfer of argument 'y' int32[32] "
        "at examples/bad.py:12, 1x per step, 1x on the first call",
        "implicit host-to-device transfer of argument 'lr' float32[] "
        "at examples/bad.py:12, 1x per step, 1x on the first call",
    ]
    assert findings[1].what() == "host-to-device argument 'y' int32[32]"
    assert {f.sample.jitted_call for f in findings} == {"sgd_update"}


def test_the_finding_is_keyed_by_the_one_site_record() -> None:
    [finding] = group([transfer(dtype="int32", shape=(32,))])
    assert finding.site == Site(
        Direction.HOST_TO_DEVICE, False, finding.location, None, None, "int32", (32,)
    )
    assert finding.site == finding.sample.site
    assert finding.site.place == replace(finding.site, dtype=None, shape=None)


def test_an_array_the_fast_path_did_not_describe_says_so_and_stays_apart() -> None:
    x, y, _ = three_arrays()
    bare = replace(
        transfer(phase=Phase.STEADY_STATE, dtype=None, shape=None, source=SGD), undescribed=True
    )
    findings = group([x, bare])
    assert len(findings) == 2
    undescribed = next(f for f in findings if f.dtype is None)
    assert undescribed.what() == f"host-to-device {UNDESCRIBED}"
    assert undescribed.headline() == (
        f"implicit host-to-device transfer of {UNDESCRIBED} at examples/bad.py:12, 1x per step"
    )
    # Even where only one array is known at that line: the runner said it is not that one.
    assert len(group([x, y, bare])) == 3


def test_a_sighting_without_an_array_joins_only_the_one_array_of_its_line() -> None:
    x, y, _ = three_arrays()
    guarded = transfer(phase=Phase.STEADY_STATE, dtype=None, shape=None)
    # Two arrays at the line: which one JAX's guard saw is unknown, so it joins neither.
    findings = group([x, y, guarded])
    assert [(f.dtype, f.first_call, f.per_step) for f in findings] == [
        (None, 0, 1),
        ("float32", 1, 0),
        ("int32", 1, 0),
    ]
    assert findings[0].what() == "host-to-device"


def test_two_arguments_sharing_one_array_site_name_neither() -> None:
    a = replace(transfer(), argument="a")
    b = replace(transfer(), argument="b")
    [finding] = group([a, b])
    assert finding.first_call == 2
    assert finding.argument is None
    assert finding.what() == "host-to-device float32[8]"


def test_an_uncommitted_device_to_device_move_says_it_happens_every_step() -> None:
    [finding] = group([transfer(Direction.DEVICE_TO_DEVICE)])
    assert finding.counts() == "every step; JAX checks it on the first call only"
    assert finding.every_step
    assert finding.headline().endswith("every step; JAX checks it on the first call only")
    # It ranks with the per-step lines, before one-time ones.
    order = group([transfer(line=1), transfer(Direction.DEVICE_TO_DEVICE, line=9)])
    assert [f.direction for f in order] == [Direction.DEVICE_TO_DEVICE, Direction.HOST_TO_DEVICE]
    # Explicit ones (jax.device_put) really happen when JAX says, and seen per step is per step.
    [explicit] = group([transfer(Direction.DEVICE_TO_DEVICE, explicit=True)])
    assert explicit.counts() == "1x on the first call"
    [steady] = group([transfer(Direction.DEVICE_TO_DEVICE, phase=Phase.STEADY_STATE)])
    assert steady.counts() == "1x per step"


def test_host_use_is_kept_from_the_detectors_sighting() -> None:
    fetch = replace(transfer(Direction.DEVICE_TO_HOST), host_use="__float__")
    [finding] = group([fetch])
    assert finding.sample.host_use == "__float__"


def test_a_warm_move_takes_the_array_the_first_call_described_at_its_place_or_none() -> None:
    # JAX's fast path logs warm moves with an empty description, in the order
    # the first call described them; the runner fills them in by position, per
    # run of the line in the step, and only where the run moved as many values.
    from gate.region.descriptions import LineRun, SightingMemory
    from gate.witness.observed import Observed

    where = transfer().location
    place = Site(Direction.HOST_TO_DEVICE, False, where, None, None, None, None)
    memory = SightingMemory()

    def seen(index: int, dtype: str | None, shape: tuple[int, ...] | None) -> Observed:
        return Observed(
            Direction.HOST_TO_DEVICE, dtype, shape, where, False, None, "MainThread", 1, index
        )

    def described(number: int, moves: list[Observed]) -> list[tuple[object, object]]:
        line_run = LineRun(number, len(moves))
        found = [memory.described_as(place, line_run, m) for m in moves]
        return [(d.dtype, d.shape) for d in found]

    first = [seen(0, "float32", (32, 16, 16, 1)), seen(1, "int32", (32,)), seen(2, "float32", ())]
    assert described(0, first) == [("float32", (32, 16, 16, 1)), ("int32", (32,)), ("float32", ())]
    # The line's second run in the step (a loop) moved other arrays.
    assert described(1, [seen(0, "float32", (8, 5))]) == [("float32", (8, 5))]
    warm = [seen(i, None, None) for i in range(3)]
    assert described(0, warm) == [("float32", (32, 16, 16, 1)), ("int32", (32,)), ("float32", ())]
    assert described(1, warm[:1]) == [("float32", (8, 5))]
    # A run of the line that moved another number of values (a one-time upload the
    # first call made beside the per-step one, say) borrows nothing: it stays undescribed.
    assert described(0, [seen(i, None, None) for i in range(4)]) == [(None, None)] * 4
    assert described(0, warm[:1]) == [(None, None)]
    # A run the first call did not describe (a loop's later turns, already warm)
    # takes the nearest earlier described run of the same size...
    assert described(2, warm[:1]) == [("float32", (8, 5))]
    assert described(3, warm) == [("float32", (32, 16, 16, 1)), ("int32", (32,)), ("float32", ())]
    # ...and none of another size.
    assert described(2, warm[:2]) == [(None, None)] * 2


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_an_undescribed_guard_fetch_is_the_detectors_only_array_at_its_line(
    platform: str,
) -> None:
    # On GPU both witnesses see device-to-host; a guard line JAX left empty
    # must not become a second finding beside the detector's described one.
    from collections import Counter

    from gate.region.sightings import merge_witnesses

    where = transfer().location
    place = Site(Direction.DEVICE_TO_HOST, False, where, None, None, None, None)
    loss = replace(place, dtype="float32", shape=())
    merged, disagreements = merge_witnesses(Counter({place: 1}), Counter({loss: 1}), platform)
    assert merged == Counter({loss: 1})
    assert disagreements == set()
    # Two arrays fetched at that line: which one it was is unknown; it stays apart.
    other = replace(place, dtype="int32", shape=(4,))
    apart, _ = merge_witnesses(Counter({place: 1}), Counter({loss: 1, other: 1}), platform)
    assert apart[place] == 1


# --- threads a step starts anew each run ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Thread-12", "thread"),
        ("Thread-12 (worker)", "worker"),
        ("ThreadPoolExecutor-3_0", "ThreadPoolExecutor-*_*"),
        ("ThreadPoolExecutor-14_2", "ThreadPoolExecutor-*_*"),
        ("loader_0", "loader_*"),  # ThreadPoolExecutor(thread_name_prefix="loader")
        ("asyncio_0", "asyncio_*"),  # asyncio's default executor
        ("Dummy-4", "Dummy-*"),
        ("metrics-logger", "metrics-logger"),
        ("uploader", "uploader"),
        ("worker-1", "worker-1"),
    ],
)
def test_a_threads_label_drops_the_numbers_python_made_up(name: str, label: str) -> None:
    from gate.region.thread_names import thread_label

    assert thread_label(name) == label


def fetches_by_thread(runs: list[list[str]]) -> list[tuple[Site, int]]:
    """The sites and per-step counts of mapped runs whose guard logged one fetch per thread
    name given, all at one line."""
    from gate.region.descriptions import SightingMemory
    from gate.region.sightings import PhaseTally
    from gate.witness.observed import Observed

    where = transfer().location
    tally = PhaseTally("MainThread", None, "cpu", SightingMemory(), set())
    for threads in runs:
        seen = [
            Observed(Direction.DEVICE_TO_HOST, "float32", (), where, False, None, name, i, 0)
            for i, name in enumerate(threads)
        ]
        tally.add_run(seen, None, {})
    return [(site, count) for site, _, count in tally.sites()]


def test_a_fresh_pool_each_run_is_one_site_counted_per_step() -> None:
    # `with ThreadPoolExecutor(1) as ex: ex.submit(...)` in the step: a new name each run.
    runs = [[f"ThreadPoolExecutor-{n}_0"] for n in range(4)]
    [(site, count)] = fetches_by_thread(runs)
    assert (site.thread, count) == ("ThreadPoolExecutor-*_*", 1)
    # Two workers of one pool, each fetching once per step: twice per step, not once.
    runs = [[f"ThreadPoolExecutor-{n}_0", f"ThreadPoolExecutor-{n}_1"] for n in range(3)]
    assert [(s.thread, c) for s, c in fetches_by_thread(runs)] == [("ThreadPoolExecutor-*_*", 2)]
    runs = [[f"Thread-{n} (log)"] for n in range(3)]
    assert [(s.thread, c) for s, c in fetches_by_thread(runs)] == [("log", 1)]


def test_threads_the_user_named_apart_stay_apart_in_name_order() -> None:
    runs = [["uploader", "metrics-logger"], ["metrics-logger", "uploader"]]
    assert sorted((s.thread, c) for s, c in fetches_by_thread(runs)) == [
        ("metrics-logger", 1),
        ("uploader", 1),
    ]
    # Whichever thread ran first, the findings come in one order: the step's own, then by name.
    line = [transfer(thread=t) for t in ("uploader", None, "metrics-logger")]
    for transfers in (line, line[::-1]):
        assert [f.thread for f in group(transfers)] == [None, "metrics-logger", "uploader"]


def test_a_transfer_moved_to_another_file_is_not_new_against_the_base_or_the_baseline() -> None:
    # The same function and line text, moved from pkg/core.py to pkg/util.py.
    line = "return x * 0.5"
    base = region(transfers=(transfer(path="pkg/core.py", line=12, source=line),))
    moved = transfer(path="pkg/util.py", line=40, source=line)
    head = region(transfers=(moved,))
    # Git's line map: pkg/core.py deleted, pkg/util.py new (not yet tracked).
    diff = (
        "diff --git a/pkg/core.py b/pkg/core.py\ndeleted file mode 100644\n"
        "--- a/pkg/core.py\n+++ /dev/null\n@@ -1,20 +0,0 @@\n"
    )
    judged, kept = accept_base(head, base, parse_diff(diff, ("pkg/util.py",)))
    assert kept == 1
    assert judged.passed
    assert any(
        n.startswith("moved since the base, not new: implicit host-to-device transfer")
        and "at pkg/util.py:40" in n
        and n.endswith("(the base has it at pkg/core.py:12, train_step: return x * 0.5)")
        for n in judged.notes
    ), judged.notes
    # Against the stored baseline: still accepted, and its entry is not "no longer seen".
    entries = accepted_from(run_of(base))
    [again] = apply_baseline(run_of(head), entries, "transfer-gate baseline").regions
    assert again.passed
    assert again.fixed == ()
    assert any(n.startswith("moved since the baseline, not new:") for n in again.notes)
    # Other text, or another function, at the new place is new.
    for other in (
        transfer(path="pkg/util.py", line=40, source="return x * 0.25"),
        replace(moved, location=SourceLocation("pkg/util.py", 40, "halve")),
    ):
        [new] = apply_baseline(
            run_of(region(transfers=(other,))), entries, "transfer-gate baseline"
        ).regions
        assert not new.passed
        assert any(n.startswith("new since the baseline:") for n in new.notes)
