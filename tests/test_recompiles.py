"""Compiling again after warm-up fails a region: through the real CLI, and the attribution alone."""

from __future__ import annotations

import functools
import json
import logging
import threading
import traceback
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, line_of, make_repo, run_gate

from gate.jaxhooks.changed_value import described, first_difference
from gate.jaxhooks.compiles import (
    EXPLAIN_FLAG,
    UNNAMED,
    CompileEvent,
    CompileWatch,
    compile_events_arrive,
    watching_compiles,
)
from gate.results.records import ProgramsCompiled
from gate.user_code import SourceLocation, UserCode
from gate.witness.recompiles import (
    attribute,
    explain,
    program_name,
    startup_recompiles,
    weak_types_only,
)

STEPS = """
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

_rows = itertools.count(200)
_scale = itertools.count(1)


@jax.jit
def double(x):
    return x * 2.0


@functools.partial(jax.jit, static_argnums=1)
def scale(x, n):
    return x * n


def growing_batch():
    return (jax.device_put(np.ones((next(_rows), 64), np.float32)),)


def device_batch():
    return (jax.device_put(np.ones((8, 4), np.float32)),)


def shape_step(x):
    return double(x)  # the shape call


def new_jit_step(x):
    return jax.jit(lambda v: v + 1.0)(x)  # the new jit


def static_step(x):
    return scale(x, next(_scale))  # the static call


def fixed_scale_step(x):
    return scale(x, 2)


def clean_step(x):
    return double(x)


@jax.jit
def update(w, best):
    return w * 0.5, jnp.minimum(best, jnp.sum(w))


def weak_state():
    # optax 7c49fcfd's shape: a weakly typed scalar in the state, strongly typed once updated.
    return jax.device_put(np.ones(8, np.float32)), jnp.array(jnp.inf)


def loop_step(w, best):
    for _ in range(2):
        w, best = update(w, best)  # the loop call
    return w
"""


def _policy(name: str, step: str, setup: str = "steps:device_batch", extra: str = "") -> str:
    region = f"  - name: {name}\n    step: steps:{step}\n    setup: {setup}\n{extra}"
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{region}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": STEPS})


def _json(repo: Path) -> dict:
    return json.loads((repo / "r.json").read_text())["suites"][0]["regions"][0]


# What changed comes from JAX's cache-miss log, whose wording is JAX's (tests/jax_hooks.py).
def test_a_shape_that_changes_per_call_fails_naming_the_line_and_the_change(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": _policy("shape", "shape_step", "steps:growing_batch")})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 1, run
    line = line_of(repo / "steps.py", "# the shape call")
    failure = run.testcase("shape: recompiles").find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(f"steps.py:{line}: jit(double) compiled again 4x in 4 runs"), message
    assert "x: float32[" in message, message
    assert ",64] before, float32[" in message, message
    assert run.testcase("shape: recompiles").get("line") == str(line)
    assert f"steps.py:{line}: jit(double) compiled again" in run.stdout, run
    assert "FAIL  p.shape  1 recompile  recompiled 4x" in run.stdout, run
    (found,) = _json(repo)["recompiles"]
    assert found["function"] == "jit(double)"
    assert found["failing"] is True
    assert (found["path"], found["line"], found["caller"]) == ("steps.py", line, "shape_step")
    assert found["count"] == 4
    assert found["runs"] == 4
    assert found["change"].startswith("x: float32[")


def test_a_weak_type_that_flips_in_the_first_call_fails_without_a_base(repo: Path) -> None:
    # The extra program falls inside the first call: no compile after warm-up to see.
    make_repo(repo, {"policies/p.yaml": _policy("weak", "loop_step", "steps:weak_state")})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 1, run
    line = line_of(repo / "steps.py", "# the loop call")
    testcase = run.testcase("weak: recompiles")
    assert testcase.get("line") == str(line)
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(
        f"steps.py:{line}: jit(update) compiled 2 programs in the first call and warm-up "
        "(2 calls) at the same shapes: best: float32[]{weak_type=True} before, "
        "float32[]{weak_type=False} now"
    ), message
    assert "FAIL  p.weak  1 recompile  recompiled 1x" in run.stdout, run
    (found,) = _json(repo)["recompiles"]
    assert (found["startup"], found["base_count"], found["count"]) == (True, None, 2)


def test_a_new_jit_per_call_fails(repo: Path, tmp_path: Path) -> None:
    make_repo(repo, {"policies/p.yaml": _policy("newjit", "new_jit_step")})
    summary = tmp_path / "summary.md"
    github = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    run = run_gate(repo, "run", env=github)
    assert run.returncode == 1, run
    failure = run.testcase("newjit: recompiles").find("failure")
    assert failure is not None, run
    line = line_of(repo / "steps.py", "# the new jit")
    message = failure.get("message", "")
    assert message.startswith(f"steps.py:{line}: jit(<lambda>) compiled again"), message
    assert "a new function object on every call" in message
    (annotation,) = [x for x in run.stdout.splitlines() if x.startswith("::error ")]
    assert annotation.startswith(
        f"::error file=steps.py,line={line},title=transfer-gate%3A p.newjit%3A compiled again "
        "after warm-up::jit(<lambda>) compiled again 4x"
    ), annotation
    assert "| `p.newjit` | **FAIL**: recompiles |" in summary.read_text()


def test_a_static_argument_that_changes_fails(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": _policy("static", "static_step")})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    failure = run.testcase("static: recompiles").find("failure")
    assert failure is not None, run
    line = line_of(repo / "steps.py", "# the static call")
    message = failure.get("message", "")
    assert message.startswith(f"steps.py:{line}: jit(scale) compiled again"), message
    # jax 0.10 says which value changed; on jax 0.12 gate.jaxhooks.static_misses does.
    assert "static argument [0][1]: 1 before, 3 now" in message, message


def test_a_function_another_region_called_first_is_explained_by_the_users_argument(
    repo: Path,
) -> None:
    # Both regions run in one worker, each under its own jit cache context: JAX explained the
    # second region's miss by the first region's key, "user_context differs: now
    # ('transfer-gate region', 2) and before ('transfer-gate region', 1)", the gate's own doing.
    regions = (
        "  - {name: fixed, step: steps:fixed_scale_step, setup: steps:device_batch}\n"
        "  - {name: static, step: steps:static_step, setup: steps:device_batch}\n"
    )
    make_repo(repo, {"policies/p.yaml": f"version: 1\n{FAST_DEFAULTS}regions:\n{regions}"})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    failure = run.testcase("static: recompiles").find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    line = line_of(repo / "steps.py", "# the static call")
    assert message.startswith(f"steps.py:{line}: jit(scale) compiled again"), message
    assert "static argument [0][1]: 1 before, 3 now" in message, message
    assert "context" not in run.stdout, run


def test_a_clean_step_passes_without_a_recompile_line(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": _policy("clean", "clean_step")})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 0, run
    assert "recompil" not in run.stdout, run
    names = [c.get("name") for c in run.junit().iter("testcase")]
    assert names == ["clean: transfers"]
    assert "recompiles" not in _json(repo)


def test_warn_passes_with_a_warning(repo: Path) -> None:
    extra = "    recompiles: warn\n"
    make_repo(repo, {"policies/p.yaml": _policy("warned", "new_jit_step", extra=extra)})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 0, run
    assert "recompiled (warn) 4x" in run.stdout, run
    assert "warning (recompiles: warn): jit(<lambda>) compiled again" in run.stdout, run
    case = run.testcase("warned: recompiles")
    assert case.find("failure") is None
    assert case.find("error") is None
    assert "compiled again" in (case.findtext("system-out") or "")
    assert _json(repo)["recompiles"][0]["failing"] is False


def test_allow_is_silent(repo: Path) -> None:
    extra = "    recompiles: allow\n"
    make_repo(repo, {"policies/p.yaml": _policy("allowed", "new_jit_step", extra=extra)})
    run = run_gate(repo, "run", "--json", "r.json")
    assert run.returncode == 0, run
    assert "recompil" not in run.stdout, run
    assert [c.get("name") for c in run.junit().iter("testcase")] == ["allowed: transfers"]
    assert "recompiles" not in _json(repo)


def test_a_bad_recompiles_value_is_a_policy_error(repo: Path) -> None:
    extra = "    recompiles: sometimes\n"
    make_repo(repo, {"policies/p.yaml": _policy("bad", "clean_step", extra=extra)})
    run = run_gate(repo, "validate")
    assert run.returncode != 0, run
    assert "recompiles" in run.stdout + run.stderr, run


# --- the attribution alone -------------------------------------------------------------------

_SHAPE_LOG = """TRACING CACHE MISS at /repo/train.py:15 (step):
  for double defined at /repo/train.py:12
  all previously seen cache keys differ. For the closest previous key:
  different input types:
  * at x, now f32[201,64] and before f32[200,64]"""


def test_what_changed_is_said_in_the_reports_words() -> None:
    assert explain([_SHAPE_LOG]) == "x: float32[200,64] before, float32[201,64] now"
    weak = _SHAPE_LOG.replace(
        "* at x, now f32[201,64] and before f32[200,64]",
        "* at y, now i32[]{weak_type=False} and before f32[]{weak_type=True}"
        "https://docs.jax.dev/en/latest/type_promotion.html#weak-types",
    )
    assert explain([weak]) == "y: float32[]{weak_type=True} before, int32[]{weak_type=False} now"
    new = "TRACING CACHE MISS at a.py:3:1 (f):\n  never seen function:\n    <lambda> id=1"
    assert (explain([new]) or "").startswith("a new function object on every call")
    head = _SHAPE_LOG.rsplit("\n", 2)[0] + "\n  different input pytree:\n"
    static = head + (
        "  * at input path [0][1], now <class 'jax._src.tree_util.Static'> with pytree metadata "
        "Static(val=3) and before <class 'jax._src.tree_util.Static'> with pytree metadata "
        "Static(val=2), so the pytree node metadata does not match"
    )
    assert explain([static]) == "static argument [0][1]: 2 before, 3 now"
    long = static.replace("Static(val=3)", f"Static(val={'7' * 200})")
    assert explain([long]) == f"static argument [0][1]: 2 before, {'7' * 119}… now"
    # A repr with line breaks stays on one line: a "\r" would start a line of its own on GitHub.
    broken = static.replace("Static(val=3)", "Static(val=a\rb\nc)")
    said = explain([broken])
    assert said is not None
    assert "\r" not in said, said
    assert "\n" not in said, said
    node = head + (
        "  * at input path [0][0], now <class 'flax.training.train_state.TrainState'> with "
        "pytree metadata (<function apply at 0x1>, GradientTransformationExtraArgs(init=...)) "
        "and before <class 'flax.training.train_state.TrainState'> with pytree metadata "
        "(<function apply at 0x1>, GradientTransformationExtraArgs(init=...)), so the pytree "
        "node metadata does not match"
    )
    assert explain([node]) == (
        "input path [0][0]: a TrainState whose static fields (pytree metadata) differ from the "
        "earlier call's"
    )
    unknown = _SHAPE_LOG.rsplit("\n", 2)[0] + "\n  cache miss explanation unavailable"
    assert explain([unknown]) is None
    assert explain([]) is None


def test_compiles_are_grouped_per_function_and_user_line(tmp_path: Path) -> None:
    user = UserCode(tmp_path)
    (tmp_path / "train.py").write_text("a\nreturn double(x)\n")
    ours = traceback.FrameSummary(str(tmp_path / "train.py"), 2, "step")
    library = traceback.FrameSummary("/site-packages/jax/_src/pjit.py", 9, "cache_miss")
    events = [
        CompileEvent("jit(double)", (ours, library), (_SHAPE_LOG,)),
        CompileEvent("jit(double)", (ours, library), ()),
        CompileEvent("jit(step)", (library,), ()),
    ]
    defined = SourceLocation("train.py", 1, "step")
    first, second = attribute(events, user, 3, defined, failing=True)
    assert first.location == SourceLocation("train.py", 2, "step")
    assert (first.function, first.count, first.runs, first.source) == (
        "jit(double)", 2, 3, "return double(x)",
    )  # fmt: skip
    assert first.change == "x: float32[200,64] before, float32[201,64] now"
    # No frame of the user's: a jitted step the gate calls, named at its def.
    assert (second.function, second.location, second.change) == ("jit(step)", defined, None)
    assert "(JAX did not say what changed)" in second.headline()


def test_the_watch_counts_only_while_counting_and_puts_everything_back() -> None:
    import jax
    import jax.numpy as jnp

    before = getattr(jax.config, EXPLAIN_FLAG)
    handlers = list(logging.getLogger("jax").handlers)
    f = jax.jit(lambda v: v * 3.0)
    with watching_compiles() as watch:
        assert getattr(jax.config, EXPLAIN_FLAG) is True
        f(jnp.ones(3))  # not counting: the first call may compile
        with watch.counting():
            f(jnp.ones(3))  # cached: nothing
        assert watch.events == []
        wider = jnp.ones(5)  # made outside: only the step's own compiles count
        with watch.counting():
            f(wider)
    assert [e.fun_name for e in watch.events] == ["jit(<lambda>)"]
    assert getattr(jax.config, EXPLAIN_FLAG) == before
    assert logging.getLogger("jax").handlers == handlers
    f(jnp.ones(7))  # the listener is gone
    assert len(watch.events) == 1


def _unheard(monkeypatch: pytest.MonkeyPatch, probes: list[int] | None = None) -> None:
    """As in a process where no watch has heard a compile yet and nothing was probed; each
    probe made is counted in ``probes``."""
    from gate.jaxhooks import compiles

    body = compiles._probed.__wrapped__  # the probe itself, without its once-per-process cache

    def probe() -> str | None:
        if probes is not None:
            probes.append(1)
        return body()

    monkeypatch.setattr(compiles, "_heard", threading.Event())
    monkeypatch.setattr(compiles, "_probed", functools.cache(probe))


def test_a_probe_compile_proves_the_watch_live_and_a_renamed_event_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gate.jaxhooks import compiles

    _unheard(monkeypatch)
    assert compile_events_arrive() is None  # this JAX sends the events the watch listens for
    monkeypatch.undo()
    _unheard(monkeypatch)
    monkeypatch.setattr(compiles, "COMPILE_EVENT", "/jax/core/compile/renamed")
    monkeypatch.setattr(compiles, "CACHE_HIT_EVENT", "/jax/compilation_cache/renamed")
    why = compile_events_arrive()
    assert why is not None
    assert "sent neither /jax/core/compile/renamed nor /jax/compilation_cache/renamed" in why


def test_a_compile_a_watch_heard_answers_without_the_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A region asks after its first call, whose compile the watch heard: no probe program
    is compiled then (it cost every worker ~25 ms)."""
    import jax
    import jax.numpy as jnp

    probes: list[int] = []
    _unheard(monkeypatch, probes)
    with watching_compiles() as watch, watch.counting():
        jax.jit(lambda x: x * 3.0)(jnp.ones(2))  # a new function: it compiles
    assert compile_events_arrive() is None
    assert probes == []
    monkeypatch.undo()
    _unheard(monkeypatch, probes)  # nothing heard: the probe decides, once
    assert compile_events_arrive() is None
    assert compile_events_arrive() is None
    assert probes == [1]


def test_a_recompile_served_from_the_persistent_cache_is_counted_once() -> None:
    # On jax 0.10.2 a cache hit is reported as a hit and as a backend compile: one
    # compile. A version reporting only the hit must still have it counted.
    watch = CompileWatch()
    with watch.counting():
        watch._requested()
        watch._cache_hit()
        watch._compiled("jit(<lambda>)")  # the same compile: named, not counted again
        watch._requested()
        watch._cache_hit()  # a hit with no compile event of its own
        watch._requested()
        watch._compiled("jit(step)")  # a real compile of something else
    assert [e.fun_name for e in watch.events] == ["jit(<lambda>)", UNNAMED, "jit(step)"]


def test_a_new_jit_per_call_is_counted_with_the_users_compilation_cache(
    repo: Path, tmp_path: Path
) -> None:
    # The lambda's program is on disk after its first compile; every later wrapper
    # is served from the cache, and still counts as compiling again.
    cache = tmp_path / "jax-cache"
    make_repo(repo, {"policies/p.yaml": _policy("newjit", "new_jit_step")})
    run = run_gate(repo, "run", "--json", "r.json", env={"JAX_COMPILATION_CACHE_DIR": str(cache)})
    assert run.returncode == 1, run
    assert any(cache.iterdir()), "the user's cache folder was not used"
    [recompile] = _json(repo)["recompiles"]
    assert (recompile["function"], recompile["count"]) == ("jit(<lambda>)", 4), recompile


def _programs(
    count: int, *, same_shapes: bool = False, function: str = "jit(step)"
) -> ProgramsCompiled:
    return ProgramsCompiled(
        function, SourceLocation("train.py", 31, "loop"), count, "best: ...", same_shapes
    )


def test_more_programs_than_the_base_in_the_first_call_is_a_recompile() -> None:
    # optax 7c49fcfd: the head's weak `init` makes jit(step) compile twice in the first call.
    head, base = [_programs(2, same_shapes=True)], [_programs(1)]
    (found,) = startup_recompiles(head, base, 4, failing=True)
    assert (found.startup, found.base_count, found.extra, found.failing) == (True, 1, 1, True)
    assert found.headline() == (
        "jit(step) compiled 2 programs in the first call and warm-up (4 calls) where the base "
        "compiled 1 at train.py:31: best: ..."
    )
    # As many as the base (a function called at two shapes in both), fewer, or a function
    # the base never compiled (new code): nothing. Against the base, shapes do not matter.
    assert startup_recompiles([_programs(2)], [_programs(2)], 4, failing=True) == ()
    assert startup_recompiles([_programs(1)], [_programs(2)], 4, failing=True) == ()
    other = [_programs(1, function="jit(f)")]
    assert startup_recompiles([_programs(3)], other, 4, failing=True) == ()
    (grown,) = startup_recompiles([_programs(3)], [_programs(2)], 4, failing=False)
    assert (grown.base_count, grown.extra, grown.failing) == (2, 1, False)
    # An eager operation at a new shape: JAX explains no such compile, and it is no recompile.
    eager = ProgramsCompiled("jit(multiply)", None, 2, None)
    assert startup_recompiles([eager], [replace(eager, count=1)], 4, failing=True) == ()
    # Without a base, only a second program at the same shapes (a flipped weak type).
    (alone,) = startup_recompiles(head, None, 4, failing=True)
    assert alone.base_count is None
    assert "(4 calls) at the same shapes at train.py:31" in alone.headline()
    assert startup_recompiles([_programs(2)], None, 4, failing=True) == ()
    assert startup_recompiles([_programs(1, same_shapes=True)], None, 4, failing=True) == ()


def test_only_a_weak_type_flip_counts_as_the_same_shapes() -> None:
    weak = (
        "TRACING CACHE MISS at t.py:3:4 (<module>):\n  for step defined at t.py:1\n"
        "  * at s, now f32[]{weak_type=False} and before f32[]{weak_type=True}"
        "https://docs.jax.dev/en/latest/type_promotion.html#weak-types"
    )
    assert weak_types_only([weak])
    assert not weak_types_only([weak.replace("now f32[]", "now f32[2]")])
    assert not weak_types_only([weak.replace("now f32[]", "now i32[]")])
    assert not weak_types_only([])  # JAX said nothing: not known to be the same shapes
    assert not weak_types_only([_SHAPE_LOG])


def test_a_pmap_program_is_named_by_the_users_function_not_jaxs_wrapper() -> None:
    import jax
    import numpy as np

    double = lambda x: x * 2.0  # noqa: E731  (the pmapped lambda)
    line = double.__code__.co_firstlineno
    with watching_compiles() as watch, watch.counting():
        jax.block_until_ready(jax.pmap(double)(np.ones((1, 4), np.float32)))
    user = UserCode(Path(__file__).parent)
    names = {program_name(event, user) for event in watch.events}
    assert f"pmap(<lambda> at test_recompiles.py:{line})" in names, names
    # JAX's own programs keep JAX's names.
    assert not any(name == "jit(_fun)" for name in names), names


# --- where a changed static value first differs, and the line that made it -------------------

OPTAX_STEPS = """
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

MODEL = nn.Dense(4)


@jax.jit
def train_step(state, x):
    grads = jax.grad(lambda p: jnp.sum(state.apply_fn(p, x) ** 2))(state.params)
    return state.apply_gradients(grads=grads)


def setup():
    x = jax.device_put(np.ones((2, 4), np.float32))
    params = MODEL.init(jax.random.key(0), x)
    tx = optax.adamw(1e-3)  # a new optimizer per setup
    return train_state.TrainState.create(apply_fn=MODEL.apply, params=params, tx=tx), x


def step(state, x):
    return train_step(state, x).params  # the call
"""


def test_an_optimizer_made_in_setup_is_named_with_its_fix(tmp_path: Path) -> None:
    extra = "    memory: {leaks: allow}\n"
    policy = _policy("optimizer", "step", "steps:setup", extra).replace(
        "guarded_runs: 1", "guarded_runs: 2"
    )
    repo = make_repo(tmp_path, {"steps.py": OPTAX_STEPS, "policies/p.yaml": policy})
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    failure = run.testcase("optimizer: recompiles").find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    call = line_of(repo / "steps.py", "# the call")
    assert message.startswith(f"steps.py:{call}: jit(train_step) compiled again"), message
    # Not the TrainState's metadata printed twice and cut off: the closure that differs.
    assert "argument [0][0], at [1][0] of its TrainState's static fields: a new function " in (
        message
    ), message
    assert "chain.<locals>.init_fn" in message, message
    assert "made at optax/" in message, message
    assert "with pytree metadata" not in message, message
    assert "fix: make the optax optimizer once, at import" in (failure.text or ""), failure.text
    assert "fix: make the optax optimizer once, at import" in run.stdout, run


class _Layer:
    def __init__(self, axis: int) -> None:
        self.norm = functools.partial(sorted, reverse=bool(axis))


def _closure() -> object:
    def inner() -> None:
        return None

    return inner


def test_the_first_difference_is_found_and_the_line_that_made_it() -> None:
    first, second = _Layer(0), _Layer(0)
    found = first_difference(
        ("same", {"k": 1, "f": second.norm}), ("same", {"k": 1, "f": first.norm})
    )
    assert found is not None
    assert found.path == "[1]['f']"
    what, made = described(found)
    assert what.startswith("a new functools.partial(sorted, …) on each call"), what
    assert made == (__file__, _Layer.__init__.__code__.co_firstlineno + 1)
    # A closure: its def line, which runs again each time.
    found = first_difference([1, _closure()], [1, _closure()])
    assert found is not None
    assert found.path == "[1]"
    what, made = described(found)
    assert what.startswith("a new function object _closure.<locals>.inner on each call"), what
    assert made == (__file__, _closure.__code__.co_firstlineno + 1)
    # A value with its own equality: both values, shown short.
    found = first_difference((1, 2.0), (1, 3.0))
    assert found is not None
    assert described(found) == ("3.0 before, 2.0 now", None)
    assert first_difference((1, "a"), (1, "a")) is None


def test_the_gates_first_difference_line_is_read_in_the_reports_words(tmp_path: Path) -> None:
    head = _SHAPE_LOG.rsplit("\n", 2)[0] + "\n  different input pytree:\n"
    static = head + (
        "  * at input path [0][2], now <class 'jax._src.tree_util.Static'> with pytree metadata "
        "Static(val=(((<function f at 0x1>,), PyTreeDef(*)), (None, functools.partial(<f>))) "
        "and before ..., so the pytree node metadata does not match\n"
        "  * first differs at static argument [0][2], at [1][1] of its value: a new "
        f"functools.partial(norm, …) on each call (made at {tmp_path}/weight_norm.py:43)"
    )
    said = explain([static], UserCode(tmp_path))
    assert said == (
        "static argument [0][2], at [1][1] of its value: a new functools.partial(norm, …) on "
        "each call, made at weight_norm.py:43"
    )
    library = static.replace(f"{tmp_path}/", "/venv/lib/python3.11/site-packages/optax/")
    assert (explain([library], UserCode(tmp_path)) or "").endswith(
        "made at optax/weight_norm.py:43"
    )
