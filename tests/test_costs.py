"""The step's cost by XLA's accounting: every program it runs, counted; through the CLI and alone.

The hook (`gate.jaxhooks.executables`) reaches JAX internals; tests/jax_hooks.py lists the
tests here that exercise it, so they run again on the oldest and the newest JAX.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import msgspec
import pytest
from cli_helpers import FAST_DEFAULTS, make_repo, run_gate
from git_helpers import commit, init

from gate.jaxhooks.executables import every_execution_seen
from gate.jaxhooks.internals import InternalMissing, dispatch_internals
from gate.levels import GuardLevel, GuardSpec
from gate.policy.model import CostRule
from gate.report.comparison_text import comparison_lines
from gate.report.junit import render_junit
from gate.report.junit_cases import region_cases
from gate.results.comparison import BaseComparison, BaseStatus
from gate.results.costs import (
    METRICS,
    DevicePeak,
    FunctionCost,
    StepCost,
    compare_costs,
    step_cost,
)
from gate.results.records import RegionResult, RunResult, SuiteResult
from gate.results.timing_baseline import StoredCost
from gate.text import si_text
from gate.witness.costs import device_peaks, measure_step, memory_marks

STEPS = """
import jax
import jax.numpy as jnp


@jax.jit
def matmul(x):
    return x @ x


@jax.jit
def total(x):
    return jnp.sin(x).sum()


def batch():
    return (jnp.ones((32, 32), jnp.float32),)


def two_functions(x):
    y = matmul(x)
    y = matmul(y)
    return total(y)


def python_around_jit(x):
    y = matmul(x)
    for _ in range(3):  # eager ops: each one a compiled program of its own
        y = jnp.tanh(y)
    return y
"""


def _policy(*steps: str) -> str:
    regions = "".join(
        f"  - name: {step}\n    step: steps:{step}\n    setup: steps:batch\n" for step in steps
    )
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{regions}"


def _costs(repo: Path) -> dict[str, Any]:
    regions = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    return {r["name"]: r["cost"] for r in regions}


def test_each_function_is_counted_and_the_totals_are_their_sum(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {"steps.py": STEPS, "policies/p.yaml": _policy("two_functions", "python_around_jit")},
    )
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 0, run
    costs = _costs(repo)

    two = costs["two_functions"]
    assert two["measured"] is True
    assert two["note"] == ""
    functions = {f["name"]: f for f in two["functions"]}
    assert set(functions) == {"jit(matmul)", "jit(total)"}  # setup's ops are not the step's
    assert (functions["jit(matmul)"]["runs"], functions["jit(total)"]["runs"]) == (2, 1)
    # A 32x32 matmul is 2*32^3 flops, run twice; sin of 1024 values is 1024 transcendentals.
    assert functions["jit(matmul)"]["flops"] == 2 * 2 * 32**3
    assert functions["jit(total)"]["transcendentals"] == 32 * 32
    for metric in METRICS:
        given = [f[metric] for f in functions.values() if metric in f]
        assert two["totals"].get(metric) == (sum(given) if given else None), metric
    assert two["peak_memory"] is None  # the CPU reports no memory marks
    flops_column = f"{si_text(two['totals']['flops'], 'FLOP')}/step"
    assert flops_column == "132 kFLOP/step"
    (line,) = [line for line in run.stdout.splitlines() if "p.two_functions" in line]
    assert line.endswith(f"  {flops_column}"), run

    around = {f["name"]: f["runs"] for f in costs["python_around_jit"]["functions"]}
    assert around == {"jit(matmul)": 1, "jit(tanh)": 3}


def _square(x: jax.Array) -> jax.Array:
    return x @ x


def _square_twice(x: jax.Array) -> jax.Array:
    return (x @ x) @ x


def test_twice_the_matmul_work_is_exactly_twice_the_flops() -> None:
    base_fn, head_fn = _square, _square_twice
    head_fn.__name__ = base_fn.__name__ = "step"  # the same function, before and after a change
    base_step, head_step = jax.jit(base_fn), jax.jit(head_fn)
    x = jnp.ones((64, 64), jnp.float32)
    for step in (base_step, head_step):  # warm, as the cost run is
        step(x).block_until_ready()

    base = measure_step(lambda: x, lambda v: base_step(v).block_until_ready())
    head = measure_step(lambda: x, lambda v: head_step(v).block_until_ready())
    comparison = compare_costs(base, head, CostRule(max_increase=1.05))

    assert [(c.text(), c.failing) for c in comparison.changes] == [
        ("total: flops 5.24e5 → 1.05e6 (2.00x)", True),
        ("total: bytes_accessed 3.28e4 → 8.19e4 (2.50x)", True),
        ("total: temp_bytes 0 → 1.64e4", True),  # from nothing: no ratio, and still beyond
        ("jit(step): flops 5.24e5 → 1.05e6 (2.00x)", False),  # functions are listed, not gated
        ("jit(step): bytes_accessed 3.28e4 → 8.19e4 (2.50x)", False),
        ("jit(step): temp_bytes 0 → 1.64e4", False),
    ]
    (total_flops, step_flops) = [c for c in comparison.changes if c.metric == "flops"]
    assert total_flops.ratio == step_flops.ratio == 2.0  # exactly: no noise in these figures
    assert comparison.failing
    # Two functions of this file: the head's line is new, the base's gone; the larger leads.
    twice = _square_twice.__code__.co_firstlineno + 1
    assert comparison.headline().startswith(
        f"cost beyond 1.05x the base: new at tests/test_costs.py:{twice}: "
        "2x dot f32[64,64]·f32[64,64]: flops 1.05e6"
    )
    assert "; total: flops 5.24e5 → 1.05e6 (2.00x); " in comparison.headline()
    # Twice the work fails by default, the line whose flops grew first, and the message says
    # the one edit that accepts it; a bound the growth stays under reports only.
    default = compare_costs(base, head, CostRule(), region="grows", policy_line=4)
    assert [c.metric for c in default.changes if c.failing] == ["flops", "bytes_accessed"]
    assert default.headline().startswith(
        f"work beyond 1.5x the base: new at tests/test_costs.py:{twice}: "
        "2x dot f32[64,64]·f32[64,64]: flops 1.05e6"
    )
    assert default.headline().endswith(
        "; if every later change may do this too, raise the bound: "
        "`cost: {max_work_increase: 2.5}` in region grows "
        "(policy line 4)"
    )
    assert not compare_costs(base, head, CostRule(max_work_increase=2.5)).failing
    assert compare_costs(base, base, CostRule(max_increase=1.0)).changes == ()


def test_every_call_is_seen_and_the_fast_path_comes_back_after() -> None:
    double = jax.jit(lambda v: v * 2.0)
    aot = jax.jit(lambda v: v + 1.0).lower(jnp.ones((1, 4))).compile()
    mapped = jax.pmap(lambda v: v - 1.0)
    x = jnp.ones((1, 4))

    def step(v: jax.Array) -> jax.Array:
        return aot(aot(double(double(double(mapped(mapped(v)))))))

    step(x).block_until_ready()
    execute, pxla, _ = dispatch_internals()
    before = (execute.__dict__["__call__"], pxla.MeshExecutableFastpathData)
    with every_execution_seen() as log:
        step(x).block_until_ready()
    # Each program every time, in the order each first ran: pmap's two (it is built on jit, and
    # its second call takes the first's sharded output), jit's (3 runs), the AOT-compiled one's.
    assert [(e.name, e.runs) for e in log.executed()] == [
        ("jit(_fun)", 1),
        ("jit(_fun)", 1),
        ("jit(<lambda>)", 3),
        ("jit(<lambda>)", 2),
    ]
    assert (execute.__dict__["__call__"], pxla.MeshExecutableFastpathData) == before

    python_runs = []
    original = execute.__dict__["__call__"]

    def spy(self: Any, *args: Any) -> Any:
        python_runs.append(self.name)
        return original(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(execute, "__call__", spy)
        step(x).block_until_ready()
    # C++ ran them all again, from the first call after the block: the fast paths made before
    # it were never dropped, and what the block left on the slow path is not found outside.
    assert python_runs == []


def test_a_jax_without_the_hook_gives_a_note_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from jax._src.interpreters import pxla

    x = jnp.ones(4)
    # As if a JAX had moved it into C++: the hook refuses it rather than patch something else.
    monkeypatch.setattr(pxla, "MeshExecutableFastpathData", lambda *args: None)
    with pytest.raises(InternalMissing, match="MeshExecutableFastpathData"):
        dispatch_internals()
    ran = []
    cost = measure_step(lambda: x, ran.append)
    assert ran == []  # the step never ran half-hooked
    assert not cost.measured
    assert cost.functions == ()
    assert cost.totals == ()
    assert cost.note == (
        "cost not measured: pxla.MeshExecutableFastpathData is no longer a NamedTuple "
        f"(jax {jax.__version__})"
    )
    assert cost.headline() == ""
    reported = compare_costs(cost, cost, CostRule())
    assert not reported.compared
    assert not reported.failing
    assert reported.headline() == f"cost not compared: base: {cost.note}"
    # A bound nobody could check is not a pass: it is said, and it fails.
    bounded = compare_costs(cost, cost, CostRule(max_increase=1.0))
    assert bounded.unchecked == f"base: {cost.note}"
    assert bounded.failing
    assert bounded.headline() == (
        f"cost not checked against the base: base: {cost.note}, so cost.max_increase 1x "
        "cannot bound it"
    )


def test_restoring_refuses_to_clobber_a_patch_made_meanwhile() -> None:
    execute, _, _ = dispatch_internals()
    original = execute.__dict__["__call__"]
    theirs = object()
    with (
        pytest.raises(AssertionError, match=r"ExecuteReplicated\.__call__ was replaced"),
        every_execution_seen(),
    ):
        execute.__call__ = theirs
    assert execute.__dict__["__call__"] is theirs
    execute.__call__ = original


class _FakeDevice:
    platform, id = "cuda", 0

    def __init__(self, *marks: tuple[int, int]) -> None:
        self.marks = list(marks)

    def memory_stats(self) -> dict[str, int]:
        in_use, peak = self.marks.pop(0)
        return {"bytes_in_use": in_use, "peak_bytes_in_use": peak, "num_allocs": 3}


class _CpuDevice:
    platform, id = "cpu", 0

    def memory_stats(self) -> None:
        return None


def test_a_devices_peak_is_the_steps_only_when_the_step_raised_it() -> None:
    gpu = _FakeDevice((100, 500), (120, 900), (100, 900), (120, 900))
    raised = device_peaks(memory_marks([gpu, _CpuDevice()]), memory_marks([gpu]))
    assert raised == (DevicePeak("cuda:0", 900, 500, 100),)
    assert raised[0].set_by_step
    assert raised[0].text() == "cuda:0 peak 900 B"
    (kept,) = device_peaks(memory_marks([gpu]), memory_marks([gpu])) or ()
    assert not kept.set_by_step
    assert kept.text() == "cuda:0 peak ≤ 900 B"
    assert device_peaks(memory_marks([_CpuDevice()]), memory_marks([_CpuDevice()])) is None


def _region(cost: StepCost | None, base: BaseComparison | None = None) -> RegionResult:
    return RegionResult(
        suite="p",
        name="step",
        policy_path="policies/p.yaml",
        policy_line=4,
        guard=GuardSpec.uniform(GuardLevel.DISALLOW),
        cost=cost,
        base=base,
    )


def _cost(flops: float, runs: int = 1) -> StepCost:
    function = FunctionCost("jit(step)", runs, 1, (("flops", flops), ("temp_bytes", 64.0)))
    return step_cost((function,), None)


def test_a_new_program_leads_the_cost_line_and_figures_that_round_to_1x_are_not_listed() -> None:
    big = (("flops", 5.71e7), ("bytes_accessed", 3.0e6), ("argument_bytes", 2.56e4))
    base = step_cost((FunctionCost("jit(step)", 1, 1, big, where="train.py:30"),), None)
    isnan = FunctionCost(
        "jit(isnan)", 1, 1, (("flops", 1.0), ("bytes_accessed", 5.0)), "", "train.py:44"
    )
    head = step_cost((base.functions[0], isnan), None)
    comparison = compare_costs(base, head, CostRule())
    assert [p.text("base") for p in comparison.programs] == [
        "new program jit(isnan) at train.py:44"
    ]
    assert comparison.changed
    # The step's totals moved by a few flops: 1.00x, so not listed; the program's own figures
    # are what "new program" says.
    assert comparison.headline() == (
        "cost changed against the base: new program jit(isnan) at train.py:44"
    )
    assert comparison.listing() == [
        "new program jit(isnan) at train.py:44: runs 1, flops 1, bytes_accessed 5",
        "(2 figures within 0.5%, not listed)",
    ]
    # Gone, against the stored baseline: named with the line the baseline kept.
    gone = compare_costs(head, base, CostRule(), against="baseline")
    assert gone.headline() == (
        "cost changed against the baseline: program jit(isnan) gone (baseline: train.py:44)"
    )
    # The stored baseline keeps the line: written and read back, the same cost.
    stored = msgspec.json.decode(msgspec.json.encode(StoredCost.of(head)), type=StoredCost)
    assert stored.step_cost() == head
    # Only figures within 0.5%: nothing a reader need look at, and no cost line in the reports.
    nudged = step_cost(
        (FunctionCost("jit(step)", 1, 1, (("flops", 5.7101e7), *big[1:]), where="train.py:30"),),
        None,
    )
    quiet = compare_costs(base, nudged, CostRule())
    assert quiet.changes
    assert not quiet.changed
    assert quiet.headline() == "cost unchanged against the base, to within 0.5%"
    result = _region(nudged, BaseComparison("b", BaseStatus.COMPARED, cost=quiet))
    assert not [label for label, _ in comparison_lines(result) if label == "cost vs base"]
    # A figure beyond a rule is always listed, however it rounds.
    strict = compare_costs(base, nudged, CostRule(max_increase=1.0))
    assert strict.failing
    assert strict.changed
    assert strict.headline() == (
        "cost beyond 1x the base: total: flops 5.71e7 → 5.71e7 (1.00x); "
        "if every later change may do this too, raise the bound: `cost: {max_increase: 1.01}` "
        "in the region"
    )


def test_a_total_one_side_lacks_cannot_be_bounded_and_is_an_error_case() -> None:
    with_transcendentals = step_cost(
        (FunctionCost("jit(step)", 1, 1, (("flops", 10.0), ("transcendentals", 4.0))),), None
    )
    without = step_cost((FunctionCost("jit(step)", 1, 1, (("flops", 10.0),)),), None)
    bounded = compare_costs(with_transcendentals, without, CostRule(max_increase=1.05))
    assert bounded.unchecked == (
        "total transcendentals is absent in the head (XLA gave it on one side only)"
    )
    assert bounded.failing
    assert not compare_costs(with_transcendentals, without, CostRule()).failing  # listed only
    base = BaseComparison("HEAD~1 (1a2b3c4)", BaseStatus.COMPARED, cost=bounded)
    (case,) = [c for c in region_cases(_region(without, base)) if c.name == "step: cost"]
    assert case.outcome is not None
    assert (case.outcome.tag, case.outcome.kind) == ("error", "cost-not-checked")
    assert case.outcome.message.startswith("cost not checked against the base: total transc")


def test_the_junit_cost_case_appears_only_against_a_base_and_fails_naming_the_change() -> None:
    plain = _region(_cost(2.1e6))
    assert region_cases(plain) == region_cases(dataclasses.replace(plain, cost=None))
    bytes_with = render_junit(RunResult((SuiteResult("p", "policies/p.yaml", (plain,)),)))
    bytes_without = render_junit(
        RunResult((SuiteResult("p", "policies/p.yaml", (dataclasses.replace(plain, cost=None),)),))
    )
    assert bytes_with == bytes_without  # a clean region's report is what it was

    comparison = compare_costs(_cost(2.1e6), _cost(4.2e6, runs=2), CostRule(max_increase=1.05))
    base = BaseComparison("HEAD~1 (1a2b3c4)", BaseStatus.COMPARED, cost=comparison)
    compared = _region(_cost(4.2e6, runs=2), base)
    assert compared.comparison_failed
    assert not compared.passed
    (case,) = [c for c in region_cases(compared) if c.name == "step: cost"]
    assert case.outcome is not None
    assert case.outcome.kind == "cost"
    assert case.outcome.message == (
        "cost beyond 1.05x the base: total: flops 2.10e6 → 4.20e6 (2.00x); "
        "jit(step): flops 2.10e6 → 4.20e6 (2.00x); if every later change may do this too, raise "
        "the bound: "
        "`cost: {max_work_increase: 2, max_increase: 2}` in the region"
    )
    assert "- jit(step): runs 1 → 2 (2.00x)" in case.outcome.body

    report_only = compare_costs(_cost(2.1e6), _cost(4.2e6), CostRule(max_work_increase=2.0))
    quiet = _region(_cost(4.2e6), BaseComparison("b", BaseStatus.COMPARED, cost=report_only))
    (case,) = [c for c in region_cases(quiet) if c.name == "step: cost"]
    assert case.outcome is None
    assert "total: flops 2.10e6 → 4.20e6 (2.00x)" in case.stdout
    assert quiet.passed


BASE_TREE = """
import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    return x @ x


@jax.jit
def same(x):
    return x @ x


def batch():
    return (jnp.ones((64, 64), jnp.float32),)
"""

COST_POLICY = f"""
version: 1
{FAST_DEFAULTS.strip()}
regions:
  - {{name: grows, step: "steps:step", setup: "steps:batch", timing: off,
     cost: {{max_increase: 1.05}}}}
  - {{name: same, step: "steps:same", setup: "steps:batch", timing: off}}
"""


def test_a_head_doing_twice_the_flops_fails_its_cost_against_the_base(tmp_path: Path) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": BASE_TREE, "policies/p.yaml": COST_POLICY}, "base")
    make_repo(
        repo, {"steps.py": BASE_TREE.replace("    return x @ x\n", "    return (x @ x) @ x\n", 1)}
    )
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run

    failure = run.testcase("grows: cost").find("failure")
    assert failure is not None, run
    assert failure.get("type") == "cost"
    # The line whose work grew leads, with its ops; the totals the rule failed follow.
    message = failure.get("message", "")
    assert message.startswith(
        "cost beyond 1.05x the base: steps.py:7 (changed line): 2x dot f32[64,64]·f32[64,64]: "
        "flops 5.24e5 → 1.05e6 (2.00x); bytes_accessed "
    ), run
    assert "; total: flops 5.24e5 → 1.05e6 (2.00x); " in message, run
    assert "- jit(step): flops 5.24e5 → 1.05e6 (2.00x)" in (failure.text or ""), run
    unchanged = run.testcase("same: cost")
    assert unchanged.find("failure") is None, run
    assert "cost unchanged against the base" in (unchanged.findtext("system-out") or ""), run

    regions = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    grows = next(r for r in regions if r["name"] == "grows")
    flops = [c for c in grows["base"]["cost"]["changes"] if c["metric"] == "flops"]
    assert [(c["function"], c["ratio"], c["failing"]) for c in flops] == [
        (None, 2.0, True),
        ("jit(step)", 2.0, False),
    ]
    assert grows["cost"]["totals"]["flops"] == 2 * 2 * 64**3


def test_a_program_new_in_the_head_is_named_with_its_line_on_a_passing_region(
    tmp_path: Path,
) -> None:
    repo = init(tmp_path / "repo")
    # The eager isnan reads the output again: 1.75x the toy step's bytes, accepted here.
    policy = COST_POLICY.replace("cost: {max_increase: 1.05}", "cost: {max_work_increase: 2}")
    policy = policy.replace('step: "steps:step"', 'step: "steps:checked"')
    checked = BASE_TREE + "\n\ndef checked(x):\n    y = step(x)\n    return y\n"
    commit(repo, {"steps.py": checked, "policies/p.yaml": policy}, "base")
    new_line = "    bad = jnp.isnan(y)  # a new eager program, checking what the step gives\n"
    head = checked.replace("    return y\n", f"{new_line}    del bad\n    return y\n")
    make_repo(repo, {"steps.py": head})
    run = run_gate(repo, "run", "--base", "HEAD", "--region", "grows")
    assert run.returncode == 0, run
    # A cost change that fails nothing: in the reports, on the terminal only under -v.
    assert "cost vs base" not in run.stdout + run.stderr, run
    assert "cost changed" in (run.testcase("grows: cost").findtext("system-out") or ""), run
    run = run_gate(repo, "run", "--base", "HEAD", "--region", "grows", "-v")
    assert run.returncode == 0, run
    line = (repo / "steps.py").read_text().splitlines().index(new_line.rstrip("\n")) + 1
    headline = f"cost changed against the base: new program jit(isnan) at steps.py:{line}"
    (cost_line,) = [entry for entry in run.stdout.splitlines() if "cost vs base:" in entry]
    # What changed leads; the totals it moved follow.
    assert cost_line.strip().startswith(f"cost vs base: {headline}; total: "), run
    listing = run.testcase("grows: cost").findtext("system-out") or ""
    assert listing.startswith(f"{headline}; total: "), listing
    program = f"- new program jit(isnan) at steps.py:{line}: runs 1, flops "
    assert f"\n{program}" in listing, listing
    assert "jit(isnan): flops" not in listing, listing  # said once, on the program's line
    assert "(1.00x)" not in listing, listing


def _memory(argument: float, temp: float) -> tuple[tuple[str, float], ...]:
    return (("argument_bytes", argument), ("output_bytes", 0.0), ("temp_bytes", temp))


def _step_fn(programs: int) -> FunctionCost:
    each = tuple(_memory(168.0, 864.0) for _ in range(programs))
    return FunctionCost(
        "jit(step)",
        runs=2,
        programs=programs,
        figures=(
            ("flops", 100.0),
            ("argument_bytes", 168.0 * programs),
            ("temp_bytes", 864.0 * programs),
        ),
        per_program=each,
    )


def test_a_second_program_is_said_with_each_programs_memory_never_as_one_grown() -> None:
    # optax 7c49fcfd: jit(step) compiled twice (a weak type flipped); its memory summed over
    # the two programs read as "argument_bytes 168 → 336 (2.00x)", one program doubled.
    base, head = step_cost((_step_fn(1),), None), step_cost((_step_fn(2),), None)
    comparison = compare_costs(base, head, CostRule())
    [count] = comparison.counts
    assert count.text("base") == (
        "jit(step): 2 programs where the base had 1 program (each: argument 168 B, temp 864 B; "
        "argument 168 B, temp 864 B; base: argument 168 B, temp 864 B)"
    )
    listing = comparison.listing()
    assert listing[0] == count.text("base")
    assert not any(line.startswith("jit(step): argument_bytes") for line in listing), listing
    assert not any(line.startswith("jit(step): temp_bytes") for line in listing), listing
    assert comparison.headline().startswith(
        "cost changed against the base: jit(step): 2 programs where the base had 1 program"
    )
    # The step's totals stay totals (what all its programs need), said as such.
    assert "total: argument_bytes 168 → 336 (2.00x)" in listing
