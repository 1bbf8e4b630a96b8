"""Work by source line, and op time by line: through the CLI against the base and the stored
baseline, and the witnesses alone on programs whose work is known exactly.

Work by line is counted from the optimized programs' text (`gate.witness.line_work`), so it
is exact and the same on every platform: these tests pin figures. Op times come from JAX's
profiler (`gate.witness.op_times`); on the CPU its trace names every op, and a TPU's trace
(an "XLA Ops" thread) is planted here as a file, since no TPU is at hand.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from cli_helpers import FAST_DEFAULTS, line_of, make_repo, run_gate
from git_helpers import commit, init

from gate.policy.model import CostRule
from gate.results.costs import compare_costs, step_cost
from gate.results.line_times import LineTime, OpTimes, compare_line_times
from gate.results.line_work import LineWork, compare_lines
from gate.user_code import UserCode
from gate.witness import op_times as op_times_module
from gate.witness.hlo_text import parse_module
from gate.witness.line_work import line_table, program_ops
from gate.witness.op_times import TRACE_NAME, line_times, op_seconds, op_times

# One jitted step whose lines each do a known amount of work (64x64 float32 arrays).
BASE_TREE = """
import jax
import jax.numpy as jnp


@jax.jit
def step(x, w):
    h = x @ w
    u = jnp.tanh(w @ x)
    g = jnp.sort(h, axis=0)
    return h.sum() + u.sum() + g.sum()


def batch():
    return (jnp.ones((64, 64), jnp.float32), jnp.ones((64, 64), jnp.float32))
"""
# The head: the matmul line does twice the work, the tanh line is the same, the sort is gone
# and a max is new in its place.
HEAD_TREE = (
    BASE_TREE.replace("    h = x @ w\n", "    h = (x @ w) @ w\n")
    .replace("    g = jnp.sort(h, axis=0)\n", "    k = jnp.max(h, axis=1)\n")
    .replace("+ g.sum()", "+ k.sum()")
)

POLICY = f"""
version: 1
{FAST_DEFAULTS.strip()}
regions:
  - {{name: step, step: "steps:step", setup: "steps:batch", timing: off}}
"""


def _regions(repo: Path, report: str = "r.json") -> list[dict[str, Any]]:
    regions: list[dict[str, Any]] = json.loads((repo / report).read_text())["suites"][0]["regions"]
    return regions


def _region(repo: Path, report: str = "r.json") -> dict[str, Any]:
    (region,) = _regions(repo, report)
    return region


def test_lines_grown_new_and_gone_are_listed_against_the_base_and_the_unchanged_counted(
    tmp_path: Path,
) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": BASE_TREE, "policies/p.yaml": POLICY}, "base")
    make_repo(repo, {"steps.py": HEAD_TREE})
    # -v: a cost change that fails nothing is on the terminal only then.
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json", "-v")
    # Its results differ from the base's (that fails the run); its cost, with no rule, does not.
    assert run.testcase("step: cost").find("failure") is None, run

    steps = repo / "steps.py"
    matmul, new_max = line_of(steps, "(x @ w) @ w"), line_of(steps, "jnp.max")
    listing = run.testcase("step: cost").findtext("system-out") or ""
    entries = [line.removeprefix("- ") for line in listing.splitlines() if line.startswith("- ")]
    # The line that grew most leads, with its ops, both figures and what the change did to it.
    assert entries[0] == (
        f"steps.py:{matmul} (changed line): 2x dot f32[64,64]·f32[64,64]: flops 5.24e5 → "
        "1.05e6 (2.00x); bytes_accessed 4.92e4 → 9.83e4 (2.00x)"
    ), listing
    assert listing.startswith(f"cost changed against the base: {entries[0]}; total: "), listing
    # The reduce-window XLA split from the max's reduce has no line of its own; it is the
    # cost of the line whose data it reduces: nothing of this step is "(no source line)".
    assert "(no source line)" not in listing, listing
    # (How XLA splits the max's reduce differs between JAX versions: 0.10.1 reduces windows.)
    # (0.10.1 lists its reduce-window first, by weight: the reduce is among the line's ops.)
    assert any(
        e.startswith(f"new at steps.py:{new_max} (changed line): ") and " reduce f32[" in e
        for e in entries
    ), listing
    # The sort's line is gone: a max in its place is another line, not the sort grown.
    assert f"\n- gone: steps.py:{new_max} (changed line): sort f32[64,64]: flops 2.46e4, " in (
        listing
    ), listing
    # The tanh line does the same work: counted, not listed.
    assert "(1 line unchanged, not listed)" in entries, listing
    assert not any("tanh" in e for e in entries), listing

    region = _region(repo)
    lines = region["base"]["cost"]["lines"]
    codes = [c["code"] for c in lines["changes"]]
    assert set(codes) == {"changed"}, codes  # every line listed is one this change rewrote
    top = lines["changes"][0]
    assert (top["base"]["flops"], top["head"]["flops"]) == (2 * 64**3, 2 * 2 * 64**3)
    assert top["head"]["source"] == "h = (x @ w) @ w"
    assert lines["unchanged"] == 1
    # The head's own table: every line of the step, in file order, each with its ops.
    table = region["cost"]["lines"]
    tanh = next(w for w in table if w.get("source") == "u = jnp.tanh(w @ x)")
    assert (tanh["flops"], tanh["transcendentals"]) == (2 * 64**3, 64 * 64)
    assert [w["line"] for w in table if w["path"]] == sorted(w["line"] for w in table if w["path"])
    # The terminal shows the lines that changed most under the cost line.
    shown = [line.strip() for line in run.stdout.splitlines() if "cost vs base by line:" in line]
    assert shown[0] == f"cost vs base by line: {entries[0]}", run


def test_lines_compare_against_the_stored_baseline_which_keeps_the_table(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"steps.py": BASE_TREE, "policies/p.yaml": POLICY})
    recorded = run_gate(repo, "baseline")
    assert recorded.returncode == 0, recorded
    stored = json.loads((repo / "policies" / "transfer-gate-baseline.json").read_text())
    (entry,) = stored["timing"].values()
    kept = {(w["line"], w.get("source")): w.get("flops") for w in entry["cost"]["lines"]}
    assert kept[(line_of(repo / "steps.py", "h = x @ w"), "h = x @ w")] == 2 * 64**3
    assert kept[(line_of(repo / "steps.py", "jnp.sort"), "g = jnp.sort(h, axis=0)")] > 0

    make_repo(repo, {"steps.py": HEAD_TREE})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 0, run
    matmul = line_of(repo / "steps.py", "(x @ w) @ w")
    listing = run.testcase("step: cost vs baseline").findtext("system-out") or ""
    assert f"\n- steps.py:{matmul}: 2x dot f32[64,64]·f32[64,64]: flops 5.24e5 → 1.05e6" in (
        listing
    ), listing
    compared = _region(repo)["cost_vs_baseline"]["lines"]
    assert compared["changes"][0]["head"]["line"] == matmul


def test_a_baseline_without_a_line_table_says_so_and_compares_the_rest() -> None:
    line = LineWork("m.py", 3, "f", "y = x @ x", 10.0, 4.0, 0.0, ("dot f32[2,2]·f32[2,2]",), 1)
    head = step_cost((), None, lines=(line,))
    older = step_cost((), None)  # a baseline file from before the gate kept lines
    compared = compare_costs(older, head, CostRule(), against="baseline")
    assert compared.lines is None
    assert compared.listing() == [
        "lines not compared: the baseline has no line table; run `transfer-gate baseline` "
        "to record it"
    ]


def _work(line: int, source: str, flops: float) -> LineWork:
    return LineWork("m.py", line, "f", source, flops, 0.0, 0.0, ("dot f32[8,8]·f32[8,8]",), 1)


def test_changed_lines_lead_by_their_share_then_new_then_gone() -> None:
    base = [_work(1, "a", 100.0), _work(2, "b", 1000.0), _work(3, "c", 50.0), _work(4, "d", 7.0)]
    head = [_work(1, "a", 110.0), _work(2, "b", 3000.0), _work(4, "d", 7.0), _work(9, "e", 5.0)]
    compared = compare_lines(base, head)
    assert [c.text() for c in compared.changes] == [
        "m.py:2: dot f32[8,8]·f32[8,8]: flops 1000 → 3000 (3.00x)",
        "m.py:1: dot f32[8,8]·f32[8,8]: flops 100 → 110 (1.10x)",
        "new at m.py:9: dot f32[8,8]·f32[8,8]: flops 5",
        "gone: m.py:3: dot f32[8,8]·f32[8,8]: flops 50",
    ]
    assert compared.unchanged == 1
    assert compared.listing(most=2)[2:] == [
        "(+2 more lines changed)",
        "(1 line unchanged, not listed)",
    ]


def _ops_by_line(fn: Any, *args: Any) -> tuple[Any, list[LineWork]]:
    text = jax.jit(fn).lower(*args).compile().as_text()
    module = parse_module(text)
    user = UserCode(Path(__file__).parent)
    ops = list(program_ops(module, 1, user))
    return ops, list(line_table(ops, user))


def _chain(x: jax.Array) -> jax.Array:
    y = jnp.tanh(x)
    z = jnp.exp(y) * 3.0
    return z + 1.0


def test_an_op_inside_a_fusion_is_charged_to_its_own_line() -> None:
    ops, table = _ops_by_line(_chain, jnp.ones((32, 32)))
    first = _chain.__code__.co_firstlineno
    by_line = {w.line: w for w in table}
    tanh, exp, add = by_line[first + 1], by_line[first + 2], by_line[first + 3]
    assert tanh.transcendentals == exp.transcendentals == 32 * 32
    assert exp.flops == 32 * 32  # the multiply
    assert add.flops == 32 * 32
    # XLA fused the chain into one op, the profiler's one event: every line shares its name.
    tops = {op.top for op in ops if op.location is not None and op.location.line > first}
    assert len(tops) == 1, ops
    assert next(iter(tops)) != ops[0].name or len(ops) == 1
    # Only the fusion's input and output touch memory: 4 KiB read, 4 KiB written.
    assert sum(w.bytes_accessed for w in table) == 2 * 32 * 32 * 4


def _scanned(c: jax.Array, w: jax.Array) -> jax.Array:
    def body(carry: jax.Array, _: None) -> tuple[jax.Array, None]:
        return carry @ w, None

    out, _ = jax.lax.scan(body, c, None, length=7)
    return out


def test_a_scan_body_counts_its_trip_count_at_its_line() -> None:
    _, table = _ops_by_line(_scanned, jnp.ones((16, 16)), jnp.ones((16, 16)))
    body = _scanned.__code__.co_firstlineno + 2
    (line,) = [w for w in table if w.line == body]
    assert line.flops == 7 * 2 * 16**3
    # The body's copy of its carry is the compiler's, charged to the line it serves.
    assert line.ops[0] == "dot f32[16,16]·f32[16,16]", line


# JAX 0.12 may name an op's line in its metadata directly, without the stack-frame tables.
NEWER_FORM = """HloModule jit_f, entry_computation_layout={(f32[8,4]{1,0})->f32[8,8]{1,0}}

ENTRY %main (p: f32[8,4]) -> f32[8,8] {
  %p = f32[8,4]{1,0} parameter(0)
  ROOT %d = f32[8,8]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={1}, \
metadata={op_name="jit(f)/dot_general" source_file="REPO/m.py" source_line=12}
}
"""


def test_brackets_and_commas_inside_quotes_or_escaped_there_split_nothing() -> None:
    from gate.witness.hlo_text import parse_instruction, split_top

    assert split_top('a, f(b, c), "x, (y", d') == ["a", "f(b, c)", '"x, (y"', "d"]
    # An escaped quote stays inside its string; an escaped backslash ends before the quote.
    assert split_top(r'"a\", b", c') == [r'"a\", b"', "c"]
    assert split_top(r'"a\\", b') == [r'"a\\"', "b"]
    line = (
        "add.1 = f32[2]{0} add(f32[2]{0} p.0, f32[2]{0} p.1), "
        'metadata={op_name="jit(f)/add(\\"x)\\"" source_file="f.py"}'
    )
    parsed = parse_instruction(line)
    assert parsed is not None
    assert (parsed.opcode, parsed.operands) == ("add", ("p.0", "p.1"))
    assert parsed.attributes.startswith("metadata={")


def test_the_source_file_and_line_form_of_newer_jax_is_read(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("\n" * 20)
    module = parse_module(NEWER_FORM.replace("REPO", str(tmp_path)))
    (op,) = program_ops(module, 3, UserCode(tmp_path))
    assert op.location is not None
    assert (op.location.path, op.location.line) == ("m.py", 12)
    assert op.flops == 3 * 2 * 8 * 8 * 4
    assert op.bytes_accessed == 3 * (2 * 8 * 4 * 4 + 8 * 8 * 4)


# --- op time by line ----------------------------------------------------------------------------

# The new loop's work far above what it changes elsewhere: the sort below it reads its varied
# values, where the base's were all alike, and took ~0.9 ms longer on the 2-core machine,
# which against 40 turns of the loop (~1.2 ms) was "most" now and then under load.
SLOWER_HEAD = BASE_TREE.replace(
    "    h = x @ w\n",
    "    h = x @ w\n    for _ in range(200):\n        h = jnp.sin(h @ w)\n",
)
TIMED_POLICY = POLICY.replace("timing: off", "timing: {max_slowdown: 1.05}")


def test_a_slower_step_lists_the_lines_whose_op_time_grew_and_keeps_its_traces(
    tmp_path: Path,
) -> None:
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": BASE_TREE, "policies/p.yaml": TIMED_POLICY}, "base")
    make_repo(repo, {"steps.py": SLOWER_HEAD})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 1, run
    grown = line_of(repo / "steps.py", "jnp.sin(h @ w)")

    failure = run.testcase("step: timing").find("failure")
    assert failure is not None, run
    # The line whose op time grew most ends the message: the annotation a reviewer reads.
    assert f"; most at new at steps.py:{grown}: " in failure.get("message", ""), run
    body = failure.text or ""
    assert "Op time by line, base → head, from the profiler's traced runs:" in body, body
    assert f"\n- new at steps.py:{grown}: " in body, body
    by_line = [line.strip() for line in run.stdout.splitlines() if "slower by line:" in line]
    assert by_line[0].startswith(f"slower by line: new at steps.py:{grown}: "), run

    region = _region(repo)
    times = region["cost"]["times"]
    assert times["note"] == ""
    assert times["runs"] == 3
    assert times["lines"][0]["line"] == grown  # longest first
    # Both sides' traces are kept beside the reports, where the workflow uploads them.
    traces = repo / "reports" / "transfer-gate-traces"
    for kept in (times["trace"], region["base"]["cost"]["base_trace"]):
        assert Path(kept).parent.parent.parent.parent == traces.resolve()
        assert (Path(kept) / TRACE_NAME).is_file()
    assert op_seconds(Path(times["trace"]) / TRACE_NAME)  # its op events read back

    # An earlier run's traces are cleared; a run with nothing to compare its step time with
    # (no base, no stored step times) traces nothing.
    again = run_gate(repo, "run", "--json", "r.json")
    assert again.returncode == 0, again
    assert not traces.exists(), list(traces.iterdir())
    assert _region(repo)["cost"]["times"] is None


@pytest.mark.chips(1)
@pytest.mark.usefixtures("one_process_on_the_device")
def test_with_the_trees_apart_a_slower_step_still_lists_the_lines_whose_op_time_grew(
    tmp_path: Path,
) -> None:
    """On a device that admits one process (a TPU chip) the head's worker has let its region
    go by the time the base's run finds the step slower: the head runs it again, traced."""
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": BASE_TREE, "policies/p.yaml": TIMED_POLICY}, "base")
    make_repo(repo, {"steps.py": SLOWER_HEAD})
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json", timeout=300)
    assert run.returncode == 1, run
    grown = line_of(repo / "steps.py", "jnp.sin(h @ w)")
    region = _region(repo)
    assert "admits one process at a time" in region["base"]["apart"], region["base"]
    assert region["base"]["timing"]["verdict"] == "slower", region["base"]["timing"]
    assert region["cost"]["times"]["note"] == "", region["cost"]["times"]
    by_line = [line.strip() for line in run.stdout.splitlines() if "slower by line:" in line]
    assert by_line, run
    assert by_line[0].startswith(f"slower by line: new at steps.py:{grown}: "), run


def test_a_step_no_slower_than_the_base_is_not_traced(tmp_path: Path) -> None:
    """Against a base the traced runs are made only once the rounds found the step slower, the
    one verdict that lists lines: on a TPU a trace costs ~0.9 s a region and tree."""
    # compare: always, or the tree, the same as its base, would run once (its footprint).
    policy = POLICY.replace("timing: off", "timing: {max_slowdown: 3.0}, compare: always")
    repo = init(tmp_path / "repo")
    commit(repo, {"steps.py": BASE_TREE, "policies/p.yaml": policy}, "base")
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json")
    assert run.returncode == 0, run
    region = _region(repo)
    assert region["base"]["timing"]["verdict"] == "unchanged", run
    assert region["cost"]["times"] is None
    assert region["base"]["cost"]["base_trace"] is None
    assert not (repo / "reports" / "transfer-gate-traces").exists()


def test_a_region_whose_time_is_not_compared_is_not_traced(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"steps.py": BASE_TREE, "policies/p.yaml": POLICY})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 0, run
    assert _region(repo)["cost"]["times"] is None
    assert not (repo / "reports" / "transfer-gate-traces").exists()


def test_only_the_regions_whose_time_is_compared_are_traced(tmp_path: Path) -> None:
    """The traced runs cost a region ~0.3 s on the CPU and a trace's stop ~0.7 s on a TPU: a
    plain run pays them only for the regions whose step times the stored baseline keeps."""
    policy = TIMED_POLICY + TIMED_POLICY.split("regions:\n")[1].replace("name: step", "name: other")
    repo = make_repo(tmp_path / "repo", {"steps.py": BASE_TREE, "policies/p.yaml": policy})
    plain = run_gate(repo, "run", "--json", "r.json")
    assert plain.returncode == 0, plain
    assert [r["cost"]["times"] for r in _regions(repo)] == [None, None]
    recorded = run_gate(repo, "baseline", "--region", "p.step")
    assert recorded.returncode == 0, recorded
    compared = run_gate(repo, "run", "--json", "r.json")
    assert compared.returncode == 0, compared
    traced = {r["name"]: r["cost"]["times"] is not None for r in _regions(repo)}
    assert traced == {"step": True, "other": False}, compared
    without = run_gate(repo, "run", "--json", "r.json", "--no-timing-baseline")
    assert without.returncode == 0, without
    assert [r["cost"]["times"] for r in _regions(repo)] == [None, None]


def _trace(path: Path, events: list[dict[str, Any]]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        json.dump({"displayTimeUnit": "ns", "traceEvents": events}, stream)
    return path


def test_a_tpu_trace_is_read_from_its_xla_ops_thread(tmp_path: Path) -> None:
    # As JAX 0.10.2 writes it on a TPU v5e: the device's process, its "XLA Ops" thread.
    events = [
        {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "pid": 3, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}},
        {"ph": "M", "pid": 3, "tid": 1, "name": "thread_name", "args": {"name": "XLA Modules"}},
        {"ph": "X", "pid": 3, "tid": 1, "name": "jit_step(1)", "ts": 0, "dur": 900.0},
        {"ph": "X", "pid": 3, "tid": 2, "name": "fusion.3", "ts": 1, "dur": 300.0},
        {"ph": "X", "pid": 3, "tid": 2, "name": "fusion.3", "ts": 5, "dur": 300.0},
        {"ph": "X", "pid": 3, "tid": 2, "name": "copy.1", "ts": 9, "dur": 100.0},
        {"ph": "X", "pid": 7, "tid": 4, "name": "PjitFunction(step)", "ts": 0, "dur": 999.0},
    ]
    seconds = op_seconds(_trace(tmp_path / TRACE_NAME, events))
    assert seconds == pytest.approx({("", "fusion.3"): 600e-6, ("", "copy.1"): 100e-6})

    ops, _ = _ops_by_line(_chain, jnp.ones((8, 8)))
    fusion = ops[-1].top
    planted = {("", fusion): seconds[("", "fusion.3")], ("", "copy.1"): 100e-6}
    table = line_times(planted, ops, runs=2, user=UserCode(Path(__file__).parent))
    # The fusion's 300 µs a run, shared among its lines by their work; copy.1 is no op of
    # this program (another program's) and is left out.
    assert sum(t.seconds for t in table) == pytest.approx(300e-6)
    assert all(t.ops == (fusion,) for t in table)


def test_a_trace_without_op_times_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def planted(fresh: Any, call: Any, folder: Path, runs: int = 3) -> Path:
        _trace(folder / TRACE_NAME, [{"ph": "X", "pid": 1, "tid": 1, "name": "Await", "dur": 5}])
        return folder

    monkeypatch.setattr(op_times_module, "traced_runs", planted)
    times = op_times(lambda: None, lambda _: None, (), UserCode(tmp_path), platform="gpu", name="s")
    assert times.lines == ()
    assert times.note == "the gpu profiler's trace has no per-op times; work by line stands in"
    assert times.trace is None  # none kept where the run keeps none


def test_op_times_compare_by_line_the_grown_first() -> None:
    def timed(line: int, source: str, seconds: float) -> LineTime:
        return LineTime("m.py", line, "f", source, seconds, ("fusion",))

    base = OpTimes((timed(4, "a", 0.41e-3), timed(6, "b", 0.2e-3)), runs=3)
    head = OpTimes((timed(5, "a", 1.63e-3), timed(7, "b", 0.1e-3), timed(9, "c", 0.3e-3)), 3)
    compared = compare_line_times(base, head)
    assert compared is not None
    assert compared.grown() == [
        "m.py:5 (base: line 4): 410 µs → 1.63 ms",
        "new at m.py:9: 300 µs",
    ]
    noted = OpTimes((), 3, note="the gpu profiler's trace has no per-op times")
    assert compare_line_times(noted, head) is None


def _heavier(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x).sum()


def test_check_region_counts_work_by_line_and_traces_nothing() -> None:
    from gate.api import check_region

    result = check_region(jax.jit(_heavier), setup=lambda: (jnp.ones((16, 16)),), repeats=2)
    assert result.cost is not None
    assert result.cost.times is None  # nothing compares its step time: no traced runs
    (line,) = [w for w in result.cost.lines or () if w.line == _heavier.__code__.co_firstlineno + 1]
    # The dot's 2·16³, the sum's one per element, the tanh's transcendentals.
    assert (line.flops, line.transcendentals) == (2 * 16**3 + 16 * 16, 16 * 16)


def test_a_step_slower_than_the_stored_baseline_names_its_lines_from_the_stored_times(
    tmp_path: Path,
) -> None:
    policy = (
        "version: 1\ndefaults: {warmup: 1, guarded_runs: 1, repeats: 20}\nregions:\n"
        '  - {name: step, step: "steps:step", setup: "steps:batch",'
        " timing: {baseline_max_slowdown: 1.2}}\n"
    )
    repo = make_repo(tmp_path / "repo", {"steps.py": BASE_TREE, "policies/p.yaml": policy})
    recorded = run_gate(repo, "baseline")
    assert recorded.returncode == 0, recorded
    stored = json.loads((repo / "policies" / "transfer-gate-baseline.json").read_text())
    (entry,) = stored["timing"].values()
    assert entry["cost"]["times"]["runs"] == 3  # the times kept, not the trace
    assert entry["cost"]["times"]["lines"]
    assert not (repo / "reports" / "transfer-gate-traces").exists()

    # Far slower (two thousand matmuls in a loop), so that noise cannot leave it open.
    looped = "    h = jax.lax.fori_loop(0, 2000, lambda i, v: jnp.sin(v @ w), h)\n"
    make_repo(repo, {"steps.py": BASE_TREE.replace("    h = x @ w\n", f"    h = x @ w\n{looped}")})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 1, run.stdout
    grown = line_of(repo / "steps.py", "fori_loop")
    failure = run.testcase("step: timing vs baseline").find("failure")
    assert failure is not None, run
    assert f"; most at new at steps.py:{grown}: " in failure.get("message", ""), run
    assert "Op time by line, baseline → head, from the profiler's traced runs:" in (
        failure.text or ""
    ), run
    compared = _region(repo)["cost_vs_baseline"]["times"]
    assert compared["base_runs"] == compared["head_runs"] == 3
    assert compared["changes"][0]["head"]["line"] == grown


def test_a_step_slowed_outside_its_ops_names_no_line() -> None:
    from gate.report.comparison_text import most_grown, slower_lines
    from gate.results.comparison import TimingComparison, TimingVerdict
    from gate.results.costs import CostComparison

    def timed(seconds: float) -> OpTimes:
        return OpTimes((LineTime("m.py", 4, "f", "y = x @ x", seconds, ("fusion",)),), 3)

    def slower(base_s: float, head_s: float) -> TimingComparison:
        return TimingComparison(
            "base", TimingVerdict.SLOWER, base_s, head_s, head_s / base_s, 1.9, 2.1, 1e-4, 1.1,
            failing=True,
        )  # fmt: skip

    # A sleep made the step 3 ms slower; its one op moved by a microsecond of noise.
    noise = CostComparison("base", (), None, times=compare_line_times(timed(4e-6), timed(5e-6)))
    assert slower_lines(slower(3e-3, 6e-3), noise) == [
        "no line's op time grew by a tenth of the step's 3.00 ms in the traced runs: the time "
        "went outside the programs' ops (the host, dispatch, transfers)"
    ]
    assert most_grown(slower(3e-3, 6e-3), noise) == ""
    # The op did the growing: its line is named, both times.
    op = CostComparison("base", (), None, times=compare_line_times(timed(1e-3), timed(3.9e-3)))
    assert slower_lines(slower(3e-3, 6e-3), op) == ["m.py:4: 1.00 ms → 3.90 ms"]
    assert most_grown(slower(3e-3, 6e-3), op) == "; most at m.py:4: 1.00 ms → 3.90 ms"
