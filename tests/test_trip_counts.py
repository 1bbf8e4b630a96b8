"""A while loop's trip count, where XLA's backend config gives none: read from its counter.

XLA's TPU compiler writes no ``known_trip_count`` (jax 0.10.2, TPU v5e), so the gate read every
loop there as one run of its body: a ``fori_loop`` of 8 matmuls weighed 1/8 of the same loop
unrolled. The real TPU texts are planted in tests/planted/tpu-loops (its README says what each
is); this checks that collectives' multiplicities, work by line and the cost run's loops
(`gate.witness.costs.Loops`) all count their trips from the same reading
(`gate.witness.trip_counts`), and that a loop the data decides stays counted once, said so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from gate.user_code import UserCode
from gate.witness.collectives import multiplicities
from gate.witness.costs import Loops
from gate.witness.hlo_text import HloModule, parse_module
from gate.witness.line_work import OpWork, line_table, program_ops
from gate.witness.trip_counts import loops_not_counted, runs, trip_counts

PLANTED = Path(__file__).parent / "planted" / "tpu-loops"
DOT = 2 * 256**3  # one 256x256 matmul's flops
TANH = 256**2  # one tanh's transcendentals
UNKNOWN = "inside a loop whose trip count is unknown: counted once a run"


def _module(name: str, repo: Path | None = None) -> HloModule:
    text = (PLANTED / f"{name}.hlo").read_text(encoding="utf-8")
    if repo is not None:  # the probe's file, moved into a repository of the test's own
        text = text.replace("/work/main/", f"{repo}/")
    return parse_module(text)


def _ops(name: str, repo: Path) -> list[OpWork]:
    return list(program_ops(_module(name, repo), 1, UserCode(repo)))


def _body(module: HloModule, loop: str) -> str:
    (found,) = [i for body in module.computations.values() for i in body if i.name == loop]
    return (found.attribute("body") or "").lstrip("%")


@pytest.mark.parametrize(
    ("name", "trips", "bodies"),
    [
        ("fori_0_8", {"while": 8}, {"while": 8}),
        ("fori_3_11", {"while": 8}, {"while": 8}),  # JAX counts 3..11 from 0 to 8
        ("fori_unroll2", {"while": 4}, {"while": 4}),  # two bodies a trip
        ("scan_xs", {"while": 5}, {"while": 5}),
        # The inner loop's body runs 3 times in each of the outer's 4.
        ("nested", {"while.10": 4, "while.11": 3}, {"while.10": 4, "while.11": 12}),
        ("while_dynamic", {"while.5": None}, {"while.5": None}),  # the data decides
    ],
)
def test_each_tpu_loop_runs_its_body_its_trip_count(
    name: str, trips: dict[str, int | None], bodies: dict[str, int | None]
) -> None:
    module = _module(name)
    assert "known_trip_count" not in (PLANTED / f"{name}.hlo").read_text(encoding="utf-8")
    assert trip_counts(module) == trips
    times = multiplicities(module)
    for loop, count in bodies.items():
        expected = (count, "") if count is not None else (1, UNKNOWN)
        assert times[_body(module, loop)] == expected, loop


def test_work_by_line_counts_the_tpu_loops_body_each_trip(tmp_path: Path) -> None:
    ops = _ops("fori_0_8", tmp_path)
    (line,) = [w for w in line_table(ops, UserCode(tmp_path)) if w.line == 3]
    assert (line.path, line.flops, line.transcendentals) == (".hlo_probe.py", 8 * DOT, 8 * TANH)
    # XLA's cost analysis counts the body once: the gate adds the other 7 of 8 runs.
    (dot,) = [op for op in ops if op.kind.startswith("convolution")]
    assert dot.beyond_xla == 7 / 8


def test_rolled_and_unrolled_by_two_read_the_same_matmul_flops(tmp_path: Path) -> None:
    def matmuls(name: str) -> float:
        return sum(op.flops for op in _ops(name, tmp_path) if op.kind.startswith("convolution"))

    assert matmuls("fori_0_8") == matmuls("fori_unroll2") == 8 * DOT
    assert matmuls("scan_xs") == 5 * DOT
    assert matmuls("nested") == 12 * DOT


def test_the_cost_runs_loops_add_every_trip_but_the_one_xla_counts(tmp_path: Path) -> None:
    for name, trips in (("fori_0_8", 8), ("scan_xs", 5), ("nested", 12)):
        loops = Loops()
        module = _module(name, tmp_path)
        ops = list(program_ops(module, 1, UserCode(tmp_path)))
        loops.add(ops, loops_not_counted(module))
        assert loops.note() == "", name
        # The matmuls alone: what XLA counted once, its other runs added.
        added = sum(op.flops * op.beyond_xla for op in ops if op.kind.startswith("convolution"))
        assert added == pytest.approx((trips - 1) * DOT), name
        assert loops.work["flops"] >= added


def test_a_loop_the_data_decides_is_counted_once_and_said_so(tmp_path: Path) -> None:
    module = _module("while_dynamic", tmp_path)
    loops = Loops()
    loops.add(list(program_ops(module, 1, UserCode(tmp_path))), loops_not_counted(module))
    assert loops.note() == "1 loop whose trip count is unknown, counted once a run"
    assert loops.work == {}


def _fori(x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(3, 11, lambda i, h: jnp.tanh(h @ h), x)


def _unrolled_by_two(x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, 9, lambda i, h: jnp.tanh(h @ h), x, unroll=2)


def _scanned(x: jax.Array) -> jax.Array:
    out, _ = jax.lax.scan(lambda h, row: (jnp.tanh(h @ h) + row, None), x, jnp.ones((7, 8)))
    return out


def _nested(x: jax.Array) -> jax.Array:
    inner = lambda i, h: jax.lax.fori_loop(0, 3, lambda j, g: jnp.tanh(g @ g), h)  # noqa: E731
    return jax.lax.fori_loop(0, 4, inner, x)


def _backwards(x: jax.Array) -> jax.Array:
    out, _ = jax.lax.scan(lambda h, _: (jnp.tanh(h @ h), None), x, None, length=5, reverse=True)
    return out


@pytest.mark.parametrize("fn", [_fori, _unrolled_by_two, _scanned, _nested, _backwards])
def test_the_counter_reads_what_xla_counted_on_this_platform(fn: Any) -> None:
    """The CPU's programs say their counts: without them, the counters read the same."""
    text = jax.jit(fn).lower(jnp.ones((8, 8))).compile().as_text()
    counted = trip_counts(parse_module(text))
    assert counted
    assert None not in counted.values()
    unsaid = re.sub(r'"known_trip_count":\{"n":"\d+"\}', '"unsaid":{}', text)
    assert "known_trip_count" not in unsaid
    assert trip_counts(parse_module(unsaid)) == counted


# One loop, its counter's pieces planted: start, the step's op and constant, the direction,
# the bound, and which side of the comparison the counter is on.
LOOP = """HloModule jit_f, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%body (p: (s32[], f32[4], s32[])) -> (s32[], f32[4], s32[]) {
  %p = (s32[], f32[4]{0}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %step = s32[] STEP
  %next = s32[] OP(%i, %step)
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %y = f32[4]{0} tanh(%x)
  %kept = s32[] get-tuple-element(%p), index=2
  ROOT %t = (s32[], f32[4]{0}, s32[]) tuple(%next, %y, %kept)
}

%inner (a: s32[], b: s32[]) -> pred[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=DIR
}

%cond (q: (s32[], f32[4], s32[])) -> pred[] {
  %q = (s32[], f32[4]{0}, s32[]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] BOUND
  ROOT %lt = pred[] COMPARE
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x.1 = f32[4]{0} parameter(0)
  %start = s32[] constant(START)
  %start.1 = s32[] copy(%start)
  %kept.1 = s32[] constant(KEPT)
  %init = (s32[], f32[4]{0}, s32[]) tuple(%start.1, %x.1, %kept.1)
  %w = (s32[], f32[4]{0}, s32[]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[4]{0} get-tuple-element(%w), index=1
}
"""
PLAIN = "compare(%j, %n), direction=DIR"


def _loop(planted: tuple[Any, ...]) -> int | None:
    """``LOOP``'s trip count with ``(start, step, direction, bound[, compare[, op[, kept]]])``
    planted in it."""
    defaults = (PLAIN, "add", 0)
    start, step, direction, bound, compare, op, kept = planted + defaults[len(planted) - 4 :]
    text = (
        LOOP.replace("COMPARE", compare)
        .replace("START", str(start))
        .replace("STEP", step)
        .replace("OP", op)
        .replace("DIR", direction)
        .replace("BOUND", bound)
        .replace("KEPT", str(kept))
    )
    return trip_counts(parse_module(text))["w"]


KEPT = "get-tuple-element(%q), index=2"
INNER = "fusion(%j, %n), kind=kLoop, calls=%inner"


@pytest.mark.parametrize(
    ("loop", "trips"),
    [
        ((0, "constant(1)", "LT", "constant(8)"), 8),
        ((0, "constant(3)", "LT", "constant(8)"), 3),
        ((0, "constant(1)", "LE", "constant(8)"), 9),
        ((8, "constant(-1)", "GT", "constant(0)"), 8),
        ((8, "constant(2)", "GE", "constant(0)", PLAIN, "subtract"), 5),
        ((0, "constant(2)", "NE", "constant(10)"), 5),
        ((9, "constant(1)", "LT", "constant(8)"), 0),
        # The counter on the right: ``8 > i`` is ``i < 8``.
        ((0, "constant(1)", "GT", "constant(8)", "compare(%n, %j), direction=DIR"), 8),
        # The bound kept in the tuple, passed on unchanged: a constant all the same.
        ((0, "constant(1)", "LT", KEPT, PLAIN, "add", 6), 6),
        # The comparison inside a fusion, its operands the fusion's.
        ((0, "constant(1)", "LT", "constant(4)", INNER), 4),
        # Never stops, or stops only when the counter wraps: unknown.
        ((0, "constant(-1)", "LT", "constant(8)"), None),
        ((0, "constant(3)", "NE", "constant(8)"), None),
        # The counter against itself, a step or a bound the data gives: unknown.
        ((0, "constant(1)", "LT", "convert(%j)", INNER), None),
        ((0, "get-tuple-element(%p), index=1", "LT", "constant(8)"), None),
        ((0, "constant(1)", "LT", "reduce(%j), dimensions={}"), None),
        # A bound kept in the tuple that the body changes is no constant.
        ((0, "constant(1)", "LT", "get-tuple-element(%q), index=1"), None),
    ],
)
def test_a_counter_of_any_direction_and_step_gives_its_count(
    loop: tuple[Any, ...], trips: int | None
) -> None:
    assert _loop(loop) == trips


def test_the_backend_configs_count_comes_first() -> None:
    text = LOOP.replace("body=%body", 'body=%body, backend_config={"known_trip_count":{"n":"5"}}')
    text = text.replace("COMPARE", "reduce(%j), dimensions={}")
    assert trip_counts(parse_module(text)) == {"w": 5}


def test_runs_of_a_counted_loop() -> None:
    assert runs(3, 1, "LT", 11) == 8
    assert runs(0, 5, "LT", 1) == 1
    assert runs(0, 1, "EQ", 0) == 1
    assert runs(0, 1, "GT", 0) == 0
    assert runs(0, 1, "XX", 8) is None
    assert runs(0, 0, "NE", 8) is None
