"""Reading a step's collectives and donations from compiled program text, and comparing them.

Pure text and records: no JAX here. The texts below are cut down from what jax 0.10 and 0.12
print on 8 CPU devices (the real programs are read in tests/test_collectives_cli.py), keeping
every construct the reader must follow.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gate.jaxhooks.executables import Executed, StepMesh
from gate.policy.model import CollectiveRule, DonationRule
from gate.region.donations import judge_donations
from gate.report.communication_text import (
    COLLECTIVE_FIX,
    EXPLICIT_COLLECTIVE_FIX,
    collective_fix,
)
from gate.results.collective_changes import GONE, GROWN, MOVED, NEW, compare_communication
from gate.results.collectives import Collective, Communication, not_read
from gate.results.costs import FunctionCost, step_cost
from gate.results.donation_changes import compare_donations
from gate.results.donations import UnusedDonation
from gate.results.errors import ErrorKind
from gate.results.timing_baseline import StoredCollective, StoredCost
from gate.text import bytes_text
from gate.user_code import SourceLocation, UserCode
from gate.witness.collectives import multiplicities, program_collectives
from gate.witness.donations import header_donations, reused_donations
from gate.witness.hlo_text import parse_instruction, parse_module
from gate.witness.programs import read_programs
from gate.witness.replica_groups import axes_of_pairs, axes_over, expand, groups_value

USER = UserCode(Path("/repo"))
MESH = StepMesh(("data", "model"), (4, 2), tuple(range(8)))
# The same devices in another order: device i's coordinates move, the names must follow them.
SHUFFLED = StepMesh(("data", "model"), (4, 2), (7, 6, 5, 4, 3, 2, 1, 0))

# One module with every construct the reader follows (after jax 0.10's and 0.12's text):
# a merged tuple all-reduce whose parts carry their own lines, an all-gather without a
# frame (jax 0.12 names a parameter's only by the parameter), a permute in a loop of known
# trip count, an all-reduce in a loop of unknown count, an async all-gather pair, and a
# donation XLA did not use.
MODULE = r"""HloModule jit_step, is_scheduled=true, input_output_alias={ {0}: (1, {}, may-alias) }, buffer_donor={ (0, {}) }, entry_computation_layout={(f32[16,128]{1,0}, f32[4,64]{1,0})->(f32[64,128]{1,0}, f32[4,8]{1,0})}, num_partitions=8

FileNames
1 "/repo/model.py"
2 "/venv/lib/python3.11/site-packages/flax/linen/linear.py"

FunctionNames
1 "step"
2 "loss"
3 "__call__"

FileLocations
1 {file_name_id=1 function_name_id=1 line=20 end_line=20 column=4 end_column=4}
2 {file_name_id=1 function_name_id=2 line=12 end_line=12 column=8 end_column=8}
3 {file_name_id=1 function_name_id=2 line=13 end_line=13 column=8 end_column=8}
4 {file_name_id=2 function_name_id=3 line=99 end_line=99 column=4 end_column=4}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=2}
4 {file_location_id=4 parent_frame_id=1}
5 {file_location_id=4 parent_frame_id=4}


%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%body (p: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %p = (s32[], f32[4,8]{1,0}) parameter(0)
  %v = f32[4,8]{1,0} get-tuple-element(%p), index=1
  %moved = f32[4,8]{1,0} collective-permute(%v), channel_id=3, source_target_pairs={{0,2},{2,4},{4,6},{6,0},{1,3},{3,5},{5,7},{7,1}}, metadata={op_name="jit(step)/ppermute" stack_frame_id=3}
  ROOT %t = (s32[], f32[4,8]{1,0}) tuple(%i, %moved)
}

%cond (c: (s32[], f32[4,8])) -> pred[] {
  %c = (s32[], f32[4,8]{1,0}) parameter(0)
  ROOT %lt = pred[] constant(true)
}

%open_body (q: f32[4,8]) -> f32[4,8] {
  %q = f32[4,8]{1,0} parameter(0)
  ROOT %r = f32[4,8]{1,0} all-reduce(%q), channel_id=4, replica_groups=[4,2]<=[8], use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(step)/psum" stack_frame_id=5}
}

ENTRY %main (param: f32[16,128], param.1: f32[4,64]) -> (f32[64,128], f32[4,8]) {
  %param = f32[16,128]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}, metadata={op_name="params[\'w1\']"}
  %param.1 = f32[4,64]{1,0} parameter(1), sharding={devices=[8,1]<=[8]}, metadata={op_name="x"}
  %all-gather = f32[64,128]{1,0} all-gather(%param), channel_id=1, replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, dimensions={0}, use_global_device_ids=true, metadata={op_name="params[\'w1\']"}
  %fusion = f32[4,128]{1,0} fusion(%param.1, %all-gather), kind=kCustom, calls=%add, metadata={op_name="jit(step)/dot_general" stack_frame_id=2}
  %dot.3 = f32[128,64]{1,0} dot(%fusion, %param.1), metadata={op_name="jit(step)/dot_general" stack_frame_id=2}
  %dot.4 = f32[8,128]{1,0} dot(%fusion, %param.1), metadata={op_name="jit(step)/dot_general" stack_frame_id=3}
  %all-reduce.2 = (f32[128,64]{1,0}, f32[8,128]{1,0}) all-reduce(%dot.3, %dot.4), channel_id=2, replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(step)/transpose" stack_frame_id=2}
  %get-tuple-element = f32[128,64]{1,0} get-tuple-element(%all-reduce.2), index=0, metadata={op_name="jit(step)/transpose" stack_frame_id=2}
  %get-tuple-element.1 = f32[8,128]{1,0} get-tuple-element(%all-reduce.2), index=1, metadata={op_name="jit(step)/transpose" stack_frame_id=3}
  %init = (s32[], f32[4,8]{1,0}) tuple(%zero, %small)
  %while = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  %open = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond, body=%open_body
  %ags = (f32[4,64]{1,0}, f32[32,64]{1,0}) all-gather-start(%param.1), channel_id=5, replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(step)/all_gather" stack_frame_id=3}
  %agd = f32[32,64]{1,0} all-gather-done(%ags)
  ROOT %out = (f32[64,128]{1,0}, f32[4,8]{1,0}) tuple(%get-tuple-element, %moved)
}
"""  # noqa: E501


def _program(runs: int = 1, meshes: tuple[StepMesh, ...] = (MESH,)) -> Executed:
    return Executed("jit(step)", runs, None, tuple(range(8)), meshes)


def _inventory(runs: int = 1, meshes: tuple[StepMesh, ...] = (MESH,)) -> list[tuple[Any, ...]]:
    found = program_collectives(parse_module(MODULE), _program(runs, meshes), USER)
    return [
        (c.kind, c.buffer, c.axes, str(c.location), c.bytes, c.runs, c.uncounted) for c in found
    ]


def test_every_printed_form_of_replica_groups_is_the_same_groups() -> None:
    # jax 0.10 lists the groups, or names its own anonymous mesh; jax 0.12 prints an iota.
    columns = ((0, 2, 4, 6), (1, 3, 5, 7))
    rows = ((0, 1), (2, 3), (4, 5), (6, 7))
    assert expand("{{0,2,4,6},{1,3,5,7}}", 8) == columns
    assert expand("[2,4]<=[4,2]T(1,0)", 8) == columns
    assert expand("mesh['axis_0'=4,'axis_1'=2] {'axis_0'}", 8) == columns
    assert expand("[4,2]<=[8]", 8) == rows
    assert expand("mesh['data'=4,'model'=2] {'model'}", 8) == rows
    assert expand("{}", 8) == (tuple(range(8)),)  # every device in one group
    assert expand("mesh['data'=8] {'data'}", 8) == (tuple(range(8)),)
    # XLA's printer (mesh_and_axis.cc): a mesh that is no plain iota lists its device ids,
    # and a sub-axis reads 'a':(pre-size)size; a group then runs over that slice of the axis.
    assert expand("mesh['a'=4,'b'=2], device_ids=([4,2]<=[2,4]T(1,0)) {'b'}", 8) == (
        (0, 4), (1, 5), (2, 6), (3, 7),
    )  # fmt: skip
    assert expand("mesh['a'=4,'b'=2], device_ids=(7,6,5,4,3,2,1,0) {'b'}", 8) == (
        (7, 6), (5, 4), (3, 2), (1, 0),
    )  # fmt: skip
    assert expand("mesh['a'=4] {'a':(1)2}", 4) == ((0, 2), (1, 3))
    with pytest.raises(ValueError, match="form the gate does not read"):
        expand("<<some future form>>", 8)
    # The mesh form holds a top-level comma: the value is taken whole, not cut at it.
    line = "channel_id=1, replica_groups=mesh['a'=4,'b'=2], device_ids=(7,6,5,4,3,2,1,0) {'b'}, x=1"
    assert groups_value(line) == "mesh['a'=4,'b'=2], device_ids=(7,6,5,4,3,2,1,0) {'b'}"
    assert groups_value("channel_id=1, to_apply=%add") is None


def test_groups_are_named_after_the_steps_mesh_whatever_its_device_order() -> None:
    columns = ((0, 2, 4, 6), (1, 3, 5, 7))
    program = tuple(range(8))  # the program's device numbers are device ids 0..7 here
    assert axes_over(columns, program, [MESH]) == ("data",)
    assert axes_over(((0, 1), (2, 3), (4, 5), (6, 7)), program, [MESH]) == ("model",)
    assert axes_over((tuple(range(8)),), program, [MESH]) == ("data", "model")
    # Device 0 sits where device 7 sat: the same numbers are the same axis of that mesh.
    assert axes_over(columns, program, [SHUFFLED]) == ("data",)
    # A program whose device numbers map to other device ids: named through them.
    assert axes_over(((0, 1), (2, 3), (4, 5), (6, 7)), (7, 6, 5, 4, 3, 2, 1, 0), [MESH]) == (
        "model",
    )
    # Groups that are no full slice of any mesh: no name, the groups say it.
    assert axes_over(((0, 3), (1, 2), (4, 7), (5, 6)), program, [MESH]) is None
    assert axes_over(columns, program, []) is None
    ring = ((0, 2), (2, 4), (4, 6), (6, 0), (1, 3), (3, 5), (5, 7), (7, 1))
    assert axes_of_pairs(ring, program, [MESH]) == ("data",)


def test_every_collective_is_read_with_its_buffer_axes_line_and_runs() -> None:
    assert _inventory(runs=3) == [
        # The all-gather has no frame (as jax 0.12 prints a parameter's): its user's line.
        ("all-gather", "f32[64,128]", ("data",), "model.py:12", 32768, 3, ""),
        # One tuple all-reduce (the CPU compiler merges them) is one collective per part.
        ("all-reduce", "f32[128,64]", ("data",), "model.py:12", 32768, 3, ""),
        ("all-reduce", "f32[8,128]", ("data",), "model.py:13", 4096, 3, ""),
        # An async pair is one all-gather, counted at its start; the buffer is the gathered one.
        ("all-gather", "f32[16,64]", ("data",), "model.py:13", 4096, 3, ""),
        # A loop XLA counts (5 trips) runs its permute 5 times a run.
        ("collective-permute", "f32[4,8]", ("data",), "model.py:13", 128, 15, ""),
        # A loop it cannot count: once a run, and said. Its innermost frame is a library's
        # (flax): the line is the user's that called it.
        (
            "all-reduce", "f32[4,8]", ("model",), "model.py:13", 128, 3,
            "inside a loop whose trip count is unknown: counted once a run",
        ),
    ]  # fmt: skip
    # Without a mesh the same collectives name their device groups instead.
    assert [c[2] for c in _inventory(meshes=())] == [None] * 6
    found = program_collectives(parse_module(MODULE), _program(meshes=()), USER)
    assert found[1].over() == "over devices {0,2,4,6},{1,3,5,7}"


def test_the_stack_frame_table_names_the_innermost_frame_first() -> None:
    module = parse_module(MODULE)
    # Frame 3 is loss:13, called (parent_frame_id=2, so frame 1) from step:20.
    from gate.witness.hlo_text import stack

    frames = stack(module, 'op_name="x" stack_frame_id=3')
    assert [(f.function, f.line) for f in frames] == [("loss", 13), ("step", 20)]
    assert [f.line for f in stack(module, "stack_frame_id=4")] == [99]  # parent 1: none
    assert stack(module, 'source_file="/repo/old.py" source_line=7')[0].line == 7
    assert stack(module, None) == []


def test_an_instruction_line_is_split_past_tuple_shapes_and_comments() -> None:
    parsed = parse_instruction(
        "  ROOT %a2a = (f32[4,1,8]{2,1,0}, /*index=1*/f32[4,1,8]{2,1,0}) all-to-all(%s.1, "
        '/*index=1*/%s.2), channel_id=1, metadata={op_name="a, b" stack_frame_id=4}'
    )
    assert parsed is not None
    assert (parsed.name, parsed.opcode, parsed.operands) == ("a2a", "all-to-all", ("s.1", "s.2"))
    assert parsed.attribute("metadata") == '{op_name="a, b" stack_frame_id=4}'
    assert parse_instruction("FileNames") is None


def test_loops_and_async_pairs_are_counted_once_where_they_run() -> None:
    times = multiplicities(parse_module(MODULE))
    assert times["main"] == (1, "")
    assert times["body"] == (5, "")
    assert times["open_body"][0] == 1
    assert times["open_body"][1].startswith("inside a loop whose trip count is unknown")


def test_a_donation_xla_did_not_alias_is_named_by_its_path_and_aval() -> None:
    (lost,) = header_donations(parse_module(MODULE), _program())
    assert (lost.function, lost.argument, lost.aval, lost.seen_by) == (
        "jit(step)", "params['w1']", "float32[16,128]", "xla",
    )  # fmt: skip
    assert lost.per_device
    assert lost.text() == (
        "jit(step): donated argument 'params['w1']' float32[16,128] per device is not reused "
        "(XLA received it but aliased no output to it)"
    )


def test_a_donation_xla_aliased_is_read_as_reused_and_one_the_head_stopped_making_drops() -> None:
    (reused,) = reused_donations(parse_module(MODULE), _program())
    assert (reused.function, reused.argument, reused.aval) == ("jit(step)", "x", "float32[4,64]")
    # The head donates 'x' again (reused or not): nothing dropped. It donates neither: the
    # base's reused 'x' is dropped, and fails under fail_new as a lost one does.
    unused_x = UnusedDonation("jit(step)", "x", "float32[4,64]", "xla")
    kept = compare_donations(
        (), (unused_x,), DonationRule.FAIL_NEW, base_reused=(reused,), head_reused=()
    )
    assert kept is not None
    assert (kept.dropped, kept.failing) == ((), True)  # lost, not dropped
    dropped = compare_donations(
        (), (), DonationRule.FAIL_NEW, base_reused=(reused,), head_reused=()
    )
    assert dropped is not None
    assert (dropped.dropped, dropped.failing) == ((reused,), True)
    assert dropped.headline() == (
        "1 no longer donated: jit(step): 'x' float32[4,64] (base: reused)"
    )
    # A jitted function or argument renamed in the change: the same donation, by its aval.
    renamed = replace(reused, function="jit(update)", argument="inputs")
    moved = compare_donations(
        (), (), DonationRule.FAIL_NEW, base_reused=(reused,), head_reused=(renamed,)
    )
    assert moved is not None
    assert (moved.dropped, moved.failing) == ((), False)
    # A side whose reused donations were not read (an older baseline) drops nothing.
    unread = compare_donations((), (), DonationRule.FAIL_NEW, base_reused=None, head_reused=())
    assert unread is not None
    assert (unread.dropped, unread.failing) == ((), False)
    warned = compare_donations((), (), DonationRule.WARN, base_reused=(reused,), head_reused=())
    assert warned is not None
    assert not warned.failing


def _collective(kind: str, line: int, size: int, source: str = "y = f(x)") -> Collective:
    return Collective(
        kind=kind,
        function="jit(step)",
        buffer=f"f32[{size // 4}]",
        bytes=size,
        runs=1,
        axes=("data",),
        groups="{0,1,2,3,4,5,6,7}",
        location=SourceLocation("model.py", line, "loss"),
        source=source,
    )


BASE = Communication((_collective("all-reduce", 12, 4096),))


def test_a_new_collective_fails_under_fail_and_is_said_with_its_bytes_and_axis() -> None:
    gathered = _collective("all-gather", 42, 32768, "h = x @ w")
    head = Communication((*BASE.collectives, gathered))
    compared = compare_communication(BASE, head, CollectiveRule.FAIL, None)
    (new,) = compared.changes
    assert (new.change, new.failing) == (NEW, True)
    assert new.line("policies/p.yaml:3") == (
        "model.py:42: new all-gather f32[8192] over 'data', 32.8 kB/step/device (base: none)"
    )
    assert compared.failing
    warned = compare_communication(BASE, head, CollectiveRule.WARN, None)
    assert not warned.failing
    assert warned.changes[0].warning
    assert not compare_communication(BASE, head, CollectiveRule.ALLOW, None).failing
    # Gone is good news, listed and never failing; the same place moved down a line is the
    # same collective (its line's text is its identity).
    gone = compare_communication(head, BASE, CollectiveRule.FAIL, None)
    assert [(c.change, c.failing) for c in gone.changes] == [(GONE, False)]
    moved = Communication((_collective("all-reduce", 15, 4096),))
    assert compare_communication(BASE, moved, CollectiveRule.FAIL, None).changes == ()
    # A second all-reduce at the same line (a psum of a psum) is a collective the base does
    # not run either: new, not merely grown.
    twice = Communication((*BASE.collectives, _collective("all-reduce", 12, 4096)))
    (again,) = compare_communication(BASE, twice, CollectiveRule.FAIL, None).changes
    assert (again.change, again.failing) == (NEW, True)
    assert again.text() == (
        "new all-reduce at this line: 2 where the base has 1 (2x all-reduce f32[1024] over "
        "'data'), 8.19 kB/step/device (base: 4.1 kB)"
    )


def test_the_same_collective_at_another_line_of_the_function_moved_and_does_not_fail() -> None:
    # flax 266052cb: `jax.pmap(lambda x: lax.pmean(x, 'x'), 'x')` taken from a function body
    # to module level; another line, another line text, the same pmean.
    there = _collective("all-reduce", 217, 4096, "avg = jax.pmap(lambda x: lax.pmean(x, 'x'))")
    here = _collective("all-reduce", 221, 4096, "cross_replica_mean = jax.pmap(lambda x: ...)")
    compared = compare_communication(Communication((there,)), Communication((here,)), *FAIL)
    (moved,) = compared.changes
    assert (moved.change, moved.failing, moved.warning) == (MOVED, False, False)
    assert not compared.failing
    assert moved.line("policies/p.yaml:3") == (
        "model.py:221: all-reduce f32[1024] over 'data' moved from model.py:217, not new "
        "(same kind, shapes and groups): 4.1 kB → 4.1 kB/step/device"
    )
    # A lambda taken out of a function body keeps its name, not its qualname.
    nested = Collective(
        **{**vars(there), "location": SourceLocation("t.py", 25, "sync.<locals>.<lambda>")}
    )
    top = Collective(**{**vars(here), "location": SourceLocation("t.py", 22, "<lambda>")})
    (lifted,) = compare_communication(
        Communication((nested,)), Communication((top,)), *FAIL
    ).changes
    assert lifted.change == MOVED
    # Other shapes, other groups or another function: new where it is, gone where it was.
    for other in (
        _collective("all-reduce", 221, 8192, "y = g(x)"),
        Collective(**{**vars(here), "axes": ("model",)}),
        Collective(**{**vars(here), "location": SourceLocation("model.py", 221, "update")}),
    ):
        changed = compare_communication(Communication((there,)), Communication((other,)), *FAIL)
        assert [(c.change, c.failing) for c in changed.changes] == [(NEW, True), (GONE, False)]
    # Two moved, one left behind: paired one to one, the rest stays new.
    two = Communication((here, _collective("all-reduce", 230, 4096, "z = h(x)")))
    paired = compare_communication(Communication((there,)), two, *FAIL)
    assert sorted(c.change for c in paired.changes) == [MOVED, NEW]


FAIL = (CollectiveRule.FAIL, None)


def test_communicated_bytes_are_bounded_by_cost_max_increase() -> None:
    grown = Communication((_collective("all-reduce", 12, 8192),))
    compared = compare_communication(BASE, grown, CollectiveRule.FAIL, 1.05)
    assert [c.change for c in compared.changes] == [GROWN]
    assert compared.bytes_failing
    assert compared.failing
    assert compared.headline().startswith(
        "comm beyond 1.05x the base: 4.1 kB → 8.19 kB/step/device (2.00x); all-reduce"
    )
    assert not compare_communication(BASE, grown, CollectiveRule.FAIL, None).failing


def test_an_inventory_nobody_could_take_is_never_a_pass_under_fail() -> None:
    unread = not_read("jit(step)'s compiled program could not be read: no hlo_modules()")
    blind = compare_communication(unread, BASE, CollectiveRule.FAIL, None)
    assert blind.unchecked == f"base: {unread.note}"
    assert blind.failing
    assert blind.headline().startswith("collectives not checked against the base: base: jit(")
    assert not compare_communication(unread, BASE, CollectiveRule.WARN, None).failing
    assert compare_communication(unread, BASE, CollectiveRule.WARN, 1.1).failing  # a bound
    # A head that runs no collective needs no base: nothing of it can be new.
    assert not compare_communication(None, Communication(), CollectiveRule.FAIL, 1.0).failing


def test_the_baseline_keeps_the_collectives_and_an_older_file_reads_back_without() -> None:
    function = FunctionCost("jit(step)", 1, 1, (("flops", 8.0),))
    head = Communication((_collective("all-gather", 42, 32768),))
    stored = msgspec.json.decode(
        msgspec.json.encode(StoredCost.of(step_cost((function,), None, comm=head))),
        type=StoredCost,
    )
    assert stored.step_cost().comm == head
    older = msgspec.structs.replace(stored, collectives=None)  # from before the inventory
    assert b"collectives" not in msgspec.json.encode(older)
    assert older.step_cost().comm is None
    with pytest.raises(msgspec.ValidationError, match="Invalid enum value 'all-sum'"):
        msgspec.convert({"kind": "all-sum"}, StoredCollective)
    assert bytes_text(41_500) == "41.5 kB"
    assert head.headline() == "comm 32.8 kB/step"


class _Blind:
    """A compiled program of a jaxlib that will not show its text."""

    def cost_analysis(self) -> dict[str, float]:
        return {}


def test_programs_that_cannot_be_read_leave_donations_unchecked_not_passed() -> None:
    comm, donations = read_programs([Executed("jit(step)", 1, _Blind())], USER)
    assert not comm.measured
    assert comm.note.startswith(
        "jit(step)'s compiled program could not be read: the executable has no hlo_modules() "
        "and no get_hlo_text()"
    )
    assert donations is None
    cost = step_cost((), None, comm=comm, donations=donations)
    failed = judge_donations(DonationRule.FAIL, cost, "cpu (cpu x1)")
    assert failed.error is not None
    assert failed.error.kind is ErrorKind.UNCHECKED
    assert failed.error.message.startswith(
        "unused donations could not be checked on cpu (cpu x1) (jit(step)'s compiled program"
    )
    assert failed.error.message.endswith("or accept the gap with `donation: warn`")
    warned = judge_donations(DonationRule.WARN, cost, "cpu (cpu x1)")
    assert (warned.error, warned.donations) == (None, ())
    assert warned.note is not None
    assert warned.note.endswith("this region's pass says nothing about them")
    assert judge_donations(DonationRule.ALLOW, cost, "cpu (cpu x1)") == type(warned)()
    # The default fails nothing here: the comparison with the base makes that check.
    assert judge_donations(DonationRule.FAIL_NEW, cost, "cpu (cpu x1)") == warned


def test_jaxs_warning_without_its_lowering_frame_still_gives_each_aval() -> None:
    from gate.jaxhooks.donation_warnings import WarnedDonation, _read

    message = (
        "Some donated buffers were not usable: float32[8,16], int32[3].\n"
        "See an explanation at https://docs.jax.dev/en/latest/faq.html#buffer-donation."
    )
    assert _read(message, None) == [
        WarnedDonation(None, None, "float32[8,16]"),
        WarnedDonation(None, None, "int32[3]"),
    ]


def _measured(*collectives: Collective, donations: tuple[Any, ...] = ()) -> Any:
    function = FunctionCost("jit(step)", 1, 1, (("flops", 8.0),))
    return step_cost((function,), None, comm=Communication(collectives), donations=donations)


def _planned(rule: CollectiveRule) -> Any:
    from result_samples import callable_ref

    from gate.levels import GuardLevel, GuardSpec
    from gate.policy.model import Checks, Region

    return Region(
        name="step", line=7, step=callable_ref("m:f"), setup=None, boundaries=(),
        guard=GuardSpec.uniform(GuardLevel.DISALLOW), warmup=1, guarded_runs=1, repeats=1,
        timeout_s=1.0, checks=Checks(False, None, 1e-5, 1e-8, None), collectives=rule,
    )  # fmt: skip


def test_the_stored_baseline_judges_a_new_collective_and_an_inventory_it_lacks() -> None:
    from result_samples import MACHINE, region, run_of

    from gate.compare.stored_baseline import compare_with_baseline
    from gate.results.baseline_file import StoredBaseline
    from gate.results.timing_baseline import retimed

    def run(cost: Any) -> Any:
        return run_of(region(machine=MACHINE, timing_samples=(1e-3,) * 5, cost=cost))

    stored = StoredBaseline(timing=retimed(run(_measured(*BASE.collectives)), {}))
    grown = _measured(*BASE.collectives, _collective("all-gather", 42, 32768, "h = x @ w"))
    rules = {"train.step": _planned(CollectiveRule.FAIL)}
    [judged] = compare_with_baseline(run(grown), stored, rules, "tg").regions
    assert judged.comm_vs_baseline is not None
    assert [c.text() for c in judged.comm_vs_baseline.changes] == [
        "new all-gather f32[8192] over 'data', 32.8 kB/step/device (baseline: none)"
    ]
    assert not judged.passed
    # A baseline recorded before the gate kept collectives: what it ran is unknown.
    older = StoredBaseline(timing=retimed(run(step_cost(_measured().functions, None)), {}))
    [blind] = compare_with_baseline(run(grown), older, rules, "tg").regions
    assert blind.comm_vs_baseline is not None
    assert blind.comm_vs_baseline.unchecked == (
        "baseline: no collectives stored for this region; run `transfer-gate baseline` to "
        "record them"
    )
    assert not blind.passed
    # ... which says nothing about a step that runs no collective, nor under `warn`.
    [single] = compare_with_baseline(run(_measured()), older, rules, "tg").regions
    assert single.passed
    assert single.comm_vs_baseline is not None
    assert single.comm_vs_baseline.changes == ()
    warn = {"train.step": _planned(CollectiveRule.WARN)}
    [noted] = compare_with_baseline(run(grown), older, warn, "tg").regions
    assert noted.passed
    assert noted.comm_vs_baseline is None
    assert noted.notes[-1].startswith("collectives not compared with the baseline: baseline: no")


def test_a_renamed_step_is_compared_under_the_heads_name() -> None:
    from result_samples import region

    from gate.compare.communication import compare_sides
    from gate.results.comparison import Renamed

    def named(function: str) -> Any:
        collective = Collective(
            **{**_collective("all-reduce", 12, 4096).__dict__, "function": function}
        )
        return region(cost=_measured(collective))

    renamed = (Renamed("step", "steps:clean", "steps:clean2"),)
    plan = _planned(CollectiveRule.FAIL)
    same = compare_sides(named("jit(clean)"), named("jit(clean2)"), plan, renamed)
    assert same.changes == ()
    assert compare_sides(named("jit(clean)"), named("jit(clean2)"), plan).failing


def test_a_step_without_collectives_keeps_its_junit_report_as_it_was() -> None:
    from result_samples import region

    from gate.report.junit_collectives import communication_cases
    from gate.results.comparison import BaseComparison, BaseStatus

    nothing = compare_communication(Communication(), Communication(), CollectiveRule.FAIL, None)
    single = region(
        cost=_measured(), base=BaseComparison("HEAD~1 (1a2b3c4)", BaseStatus.COMPARED, comm=nothing)
    )
    assert communication_cases(single) == []
    head = Communication((*BASE.collectives, _collective("all-gather", 42, 32768)))
    grown = compare_communication(BASE, head, CollectiveRule.WARN, None)
    warned = region(
        cost=_measured(*head.collectives),
        base=BaseComparison("HEAD~1 (1a2b3c4)", BaseStatus.COMPARED, comm=grown),
    )
    cases = communication_cases(warned)
    assert [(c.name, c.file, c.line, c.outcome) for c in cases] == [
        ("step: collectives", "policies/train.yaml", 7, None),
        # Under `warn` the new one has its testcase, at its line, passing: system-out says it.
        ("step: new all-gather over 'data' at model.py:42", "model.py", 42, None),
    ]
    assert cases[1].stdout.startswith(
        "model.py:42: warning (collectives: warn): new all-gather f32[8192] over 'data'"
    )


def _donation(argument: str | None, aval: str = "float32[8]", function: str = "jit(step)") -> Any:
    from gate.results.donations import XLA, UnusedDonation

    return UnusedDonation(function, argument, aval, XLA)


def test_a_donation_is_lost_where_the_base_reused_it_and_kept_where_both_left_it() -> None:
    from gate.results.donation_changes import compare_donations

    batch, w, b = _donation("x"), _donation("params['w']"), _donation("params['b']")
    # The head's w changed dtype and lost its donation; the batch was never reusable; the
    # base's b is reused now.
    head = (batch, _donation("params['w']", "bfloat16[8]"))
    compared = compare_donations((batch, b), head, DonationRule.FAIL_NEW)
    assert compared is not None
    assert [(d.argument, d.aval, d.failing) for d in compared.lost] == [
        ("params['w']", "bfloat16[8]", True)
    ]
    assert (compared.kept, compared.regained) == ((batch,), (b,))
    assert compared.failing
    assert compared.headline() == (
        "1 lost: jit(step): 'params['w']' bfloat16[8] (base: reused); "
        "1 reused now: jit(step): 'params['b']' float32[8] (base: unused); 1 unused in both"
    )
    # Lost against a base that left it unused too: the same donation (not its aval), kept.
    same = compare_donations((w,), head[1:], DonationRule.FAIL_NEW)
    assert same is not None
    assert (same.lost, same.kept) == ((), head[1:])
    # Two unused where the base had one of that identity: the second is lost.
    unnamed = _donation(None, "int32[3]")
    twice = compare_donations((unnamed,), (unnamed, unnamed), DonationRule.FAIL_NEW)
    assert twice is not None
    assert (len(twice.lost), len(twice.kept)) == (1, 1)
    # `warn` makes a lost one a warning, `fail` leaves failing to the region's own verdict,
    # `allow` compares nothing.
    warned = compare_donations((), head, DonationRule.WARN)
    assert warned is not None
    assert [(d.failing, d.warning) for d in warned.lost] == [(False, True)] * 2
    assert not warned.failing
    failing = compare_donations((), head, DonationRule.FAIL)
    assert failing is not None
    assert not failing.failing
    assert compare_donations((), head, DonationRule.ALLOW) is None


def test_a_side_whose_donations_were_not_read_fails_fail_new_unless_nothing_is_unused() -> None:
    from gate.results.donation_changes import compare_donations

    head = (_donation("x"),)
    why = "its cost run did not happen"
    gap = compare_donations(None, head, DonationRule.FAIL_NEW, missing=why)
    assert gap is not None
    assert gap.unchecked == "base: its cost run did not happen"
    assert gap.failing
    assert gap.headline() == (
        "donations not checked against the base: base: its cost run did not happen, "
        "so donation: fail_new cannot hold"
    )
    unread_head = compare_donations(head, None, DonationRule.FAIL_NEW)
    assert unread_head is not None
    assert unread_head.unchecked == "head: its compiled programs were not read"
    # Under `warn` the gap is said, not failed; a head that leaves nothing unused needs no base.
    noted = compare_donations(None, head, DonationRule.WARN)
    assert noted is not None
    assert not noted.failing
    assert noted.headline().startswith("donations not compared against the base: base: ")
    clean = compare_donations(None, (), DonationRule.FAIL_NEW)
    assert clean is not None
    assert (clean.compared, clean.failing) == (True, False)


def test_a_lost_donation_fails_the_base_comparison_and_reads_as_lost_in_every_report() -> None:
    from result_samples import region, run_of

    from gate.compare.communication import compare_sides
    from gate.report.junit_collectives import communication_cases
    from gate.report.terminal import format_summary
    from gate.results.comparison import BaseComparison, BaseStatus, Renamed

    def side(function: str, *arguments: str) -> Any:
        donations = tuple(_donation(a, function=function) for a in arguments)
        cost = step_cost((), None, comm=Communication(), donations=donations)
        return region(cost=cost, donations=donations)

    plan = _planned(CollectiveRule.FAIL)  # `donation:` left to its default, fail_new
    assert plan.donation is DonationRule.FAIL_NEW
    base, head = side("jit(clean)", "x"), side("jit(clean2)", "x", "w")
    renamed = (Renamed("step", "steps:clean", "steps:clean2"),)
    comm = compare_sides(base, head, plan, renamed)
    assert comm.donations is not None
    assert [d.argument for d in comm.donations.lost] == ["w"]  # the batch: the same program
    unrenamed = compare_sides(base, head, plan).donations
    assert unrenamed is not None
    assert [d.argument for d in unrenamed.lost] == ["x", "w"]
    assert comm.failing
    assert not comm.collectives_failing
    head = region(
        cost=head.cost,
        donations=head.donations,
        base=BaseComparison("HEAD~1 (1a2b3c4)", BaseStatus.COMPARED, comm=comm),
    )
    assert not head.passed
    summary = format_summary(run_of(head))
    assert (
        "policies/train.yaml:7: jit(clean2): donated argument 'w' float32[8] is not reused "
        "(XLA received it but aliased no output to it; base: reused)"
    ) in summary
    assert (
        "policies/train.yaml:7: note (donation: fail_new): jit(clean2): donated argument 'x' "
        "float32[8] is not reused (XLA received it but aliased no output to it; base: unused too)"
    ) in summary
    assert "  donations vs base: 1 lost: jit(clean2): 'w' float32[8] (base: reused); " in summary
    (case,) = [c for c in communication_cases(head) if c.name == "step: donation"]
    assert case.outcome is not None
    assert (case.outcome.tag, case.outcome.kind) == ("failure", "donation")


def test_the_stored_baseline_keeps_the_unused_donations_and_judges_a_lost_one() -> None:
    from result_samples import MACHINE, region, run_of

    from gate.compare.stored_baseline import compare_with_baseline
    from gate.results.baseline_file import StoredBaseline
    from gate.results.donations import JAX, UnusedDonation
    from gate.results.timing_baseline import retimed

    batch, w = _donation("x"), _donation("params['w']", "bfloat16[8]")
    jax_dropped = UnusedDonation("", None, "int32[3]", JAX)  # JAX's warning, without its frame
    recorded = _measured(donations=(batch, jax_dropped))
    # Kept in the file as read: each field, and None (not read) apart from () (none unused).
    kept = msgspec.json.decode(msgspec.json.encode(StoredCost.of(recorded)), type=StoredCost)
    assert kept.step_cost().donations == (batch, jax_dropped)
    assert StoredCost.of(_measured()).step_cost().donations == ()
    assert StoredCost.of(_measured(donations=None)).donations is None

    def run(cost: Any) -> Any:
        judged = cost.donations or ()
        return run_of(
            region(machine=MACHINE, timing_samples=(1e-3,) * 5, cost=cost, donations=judged)
        )

    stored = StoredBaseline(timing=retimed(run(recorded), {}))
    rules = {"train.step": _planned(CollectiveRule.FAIL)}  # `donation:` its default, fail_new
    [lost] = compare_with_baseline(
        run(_measured(donations=(batch, jax_dropped, w))), stored, rules, "tg"
    ).regions
    assert lost.comm_vs_baseline is not None
    donations = lost.comm_vs_baseline.donations
    assert donations is not None
    assert ([d.argument for d in donations.lost], donations.kept) == (
        ["params['w']"],
        (batch, jax_dropped),
    )
    assert not lost.passed
    assert any("unused donations as they are now" in note for note in lost.notes)
    # The same donations unused as when recorded: nothing lost, the region passes.
    [same] = compare_with_baseline(run(recorded), stored, rules, "tg").regions
    assert same.passed
    # A baseline recorded before the gate kept donations: under fail_new a step that leaves
    # one unused cannot be judged, so it fails saying how to record them; one that leaves
    # none unused needs nothing recorded.
    older = StoredBaseline(timing=retimed(run(_measured(donations=None)), {}))
    [blind] = compare_with_baseline(run(recorded), older, rules, "tg").regions
    assert blind.comm_vs_baseline is not None
    assert blind.comm_vs_baseline.donations is not None
    assert blind.comm_vs_baseline.donations.unchecked == (
        "baseline: no donations stored for this region; run `transfer-gate baseline` to record them"
    )
    assert not blind.passed
    [clean] = compare_with_baseline(run(_measured()), older, rules, "tg").regions
    assert clean.passed


def test_a_collective_written_in_the_code_gets_its_own_fix_not_the_shardings() -> None:
    def fix_for(collective: Collective) -> str:
        head = Communication((*BASE.collectives, collective))
        (new,) = compare_communication(BASE, head, CollectiveRule.FAIL, None).changes
        return collective_fix(new)

    pmean = _collective("all-reduce", 30, 4096, "grads = jax.lax.pmean(grads, axis_name='data')")
    assert fix_for(pmean) == EXPLICIT_COLLECTIVE_FIX
    # Named by JAX's op where the line's text does not say (a helper that calls psum).
    helper = replace(_collective("all-reduce", 31, 4096, "g = sync(g)"), op_name="jit(step)/psum")
    assert fix_for(helper) == EXPLICIT_COLLECTIVE_FIX
    # A sharding's collective: the op that needed it, at a line with no collective written.
    gathered = replace(
        _collective("all-gather", 42, 32768, "h = x @ w"), op_name="jit(step)/dot_general"
    )
    assert fix_for(gathered) == COLLECTIVE_FIX
    assert "PartitionSpec" not in EXPLICIT_COLLECTIVE_FIX
