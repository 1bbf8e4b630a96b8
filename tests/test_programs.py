"""A region's own programs: a cold first call for its step whatever ran before, setup's shared.

Without ``jax.clear_caches()`` before each region, what an earlier region left in JAX's
caches must still change nothing in a later region's verdict: the same regions in either
order, in one worker, give the same verdicts.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import FAST_DEFAULTS, make_repo, run_gate
from jax_scripts import run_script

from gate.jaxhooks import programs
from gate.jaxhooks.programs import RegionPrograms, _context, shared_programs


def _traced_counter() -> tuple[list[int], object]:
    traces: list[int] = []

    @jax.jit
    def double(x: jax.Array) -> jax.Array:
        traces.append(1)  # runs only when JAX traces the function
        return x * 2

    return traces, double


def test_each_region_traces_its_step_afresh_and_setup_once() -> None:
    traces, double = _traced_counter()
    x = jax.numpy.ones(3)
    for _ in range(3):
        with RegionPrograms().entered():
            double(x)  # type: ignore[operator]
            double(x)  # type: ignore[operator]
    assert len(traces) == 3  # once per region, none for the second call in one
    shared, triple = _traced_counter()
    for _ in range(3):
        with RegionPrograms().entered(), shared_programs():
            triple(x)  # type: ignore[operator]
    assert len(shared) == 1


def test_one_regions_programs_are_the_same_each_time_it_is_entered() -> None:
    traces, double = _traced_counter()
    programs = RegionPrograms()
    x = jax.numpy.ones(3)
    for _ in range(3):  # the region's run, then its held rounds, then its cost run
        with programs.entered():
            double(x)  # type: ignore[operator]
    assert len(traces) == 1


def test_the_context_is_put_back_also_on_an_exception() -> None:
    before = _context().get_global()
    seen: list[object] = []

    def step() -> None:
        seen.append(_context().get_global())
        raise RuntimeError("step broke")

    with RegionPrograms().entered(), pytest.raises(RuntimeError, match="step broke"):
        step()
    assert seen != [before]
    assert _context().get_global() == before


def _traces_by_name(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often JAX traces each jitted function (nested calls inside a trace included)."""
    from jax._src import pjit

    traced: Counter[str] = Counter()
    original = pjit._trace_for_jit

    def counting(fun: Any, *args: Any, **kwargs: Any) -> Any:
        traced[getattr(fun, "__name__", "?")] += 1
        return original(fun, *args, **kwargs)

    monkeypatch.setattr(pjit, "_trace_for_jit", counting)
    return traced


# Made once, before any test counts traces: only the regions' own calls are counted.
_INPUT = jnp.asarray(np.linspace(-1.0, 1.0, 8, dtype=np.float32))


@jax.jit
def users_helper(x: jax.Array) -> jax.Array:
    return x * 3.0


def _regions(step: Callable[[jax.Array], Any], regions: int = 3) -> None:
    x = _INPUT
    for _ in range(regions):
        with RegionPrograms().entered():
            jax.block_until_ready(step(x))


def test_jaxs_own_nested_functions_are_traced_once_the_users_in_every_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # JAX's trace cache is an LRU of 4,096 entries: in a process that ran many tests before,
    # a later region's traces could push out the first region's, which a cold cache cannot.
    jax.clear_caches()
    traced = _traces_by_name(monkeypatch)

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        # jnp.sin, jnp.mean, `* 2` and `.sum()` call jitted functions of JAX's own.
        return jnp.mean(jnp.sin(x) * 2) + users_helper(x).sum()

    _regions(step, 1)
    assert {"step", "users_helper", "sin", "_mean", "multiply"} <= set(traced)
    traced.clear()
    _regions(step, 2)
    # Later regions trace the step and the user's helper again, and nothing of JAX's.
    assert traced == {"step": 2, "users_helper": 2}


def test_a_held_regions_hooks_stay_installed_until_it_is_let_go_of(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A region entered again and again (a held region's turns) keeps JAX's hooks installed
    between entries, sharing JAX's own traces as `entered` alone does, and lets them go with
    its programs: nothing of the gate's stays patched in JAX after the region."""
    jax.clear_caches()
    traced = _traces_by_name(monkeypatch)

    def made(k: int) -> Callable[[jax.Array], jax.Array]:
        @jax.jit
        def step(x: jax.Array) -> jax.Array:
            return jnp.mean(jnp.sin(x) * 2) + users_helper(x).sum() + k

        return step  # a new function each time: traced afresh, as a region's first call is

    _regions(made(0), 1)  # JAX's own functions traced once, shared from now on
    traced.clear()
    held = RegionPrograms()
    hooks = (programs._jax_own_shared, programs._transforms_shared)
    try:
        held.keep_hooks()
        held.keep_hooks()  # once is enough: the second keeps nothing more
        assert all(len(h.logs()) == 1 for h in hooks)
        for k in range(1, 4):
            with held.entered():
                jax.block_until_ready(made(k)(_INPUT))
        assert all(len(h.logs()) == 1 for h in hooks)  # each entry added one, took it away
        # Nothing of JAX's traced again; the user's helper once, in this region's programs.
        assert traced == {"step": 3, "users_helper": 1}
    finally:
        held.let_go(made(4))
    assert all(h.logs() == [] for h in hooks)
    assert all(h._installed is None for h in hooks), "JAX is left patched"


def test_a_jax_function_handed_the_users_functions_is_traced_in_every_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced = _traces_by_name(monkeypatch)
    calls: list[int] = []

    def doubled(v: jax.Array) -> jax.Array:
        calls.append(1)  # runs only while traced: where a host callback would be placed
        return v * 2

    def negated(v: jax.Array) -> jax.Array:
        return -v

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        # jnp.piecewise hands the functions to a jitted helper of JAX's, inside a frozenset.
        return jnp.piecewise(x, [x > 0], [doubled, negated])

    _regions(step)
    assert traced["_piecewise"] == 3
    assert len(calls) == 3


def test_only_plain_data_lets_a_call_share_its_trace() -> None:
    from jax._src.core import Tracer

    class UsersInt(int):
        pass

    seen: list[bool] = []

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        own = jnp.sin.__wrapped__ if hasattr(jnp.sin, "__wrapped__") else None
        assert own is not None
        for extra in (2.0, np.float32(2), np.dtype("float32"), jnp.float32, None, "same"):
            seen.append(programs._jax_own(own, (x, extra), {}, Tracer))
        for extra in (UsersInt(2), frozenset({(0, abs)}), abs, type("Mine", (), {})):
            seen.append(not programs._jax_own(own, (x, extra), {}, Tracer))
        seen.append(not programs._jax_own(own, (1.0, 2.0), {}, Tracer))  # not inside a trace
        seen.append(not programs._jax_own(users_helper.__wrapped__, (x,), {}, Tracer))
        return x

    step(jnp.ones(2))
    assert seen == [True] * 12


def test_a_jax_without_the_hook_traces_its_own_functions_in_every_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jax._src import pjit

    original = pjit._infer_params

    def moved(fun: Any, info: Any, *args: Any) -> Any:  # another signature: refused
        return original(fun, info, *args)

    monkeypatch.setattr(pjit, "_infer_params", moved)
    traced = _traces_by_name(monkeypatch)

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        return jnp.sin(x) + 1

    _regions(step)
    assert traced["step"] == 3
    assert traced["sin"] == 3  # slower, as correct
    assert pjit._infer_params is moved


def _transforms_by_region(regions: int = 3) -> list[tuple[int, int]]:
    """Each region's new differentiations and backward passes of nested traces (cache misses),
    for a step that differentiates JAX's own nested functions and one of the user's."""
    from jax._src import pjit
    from jax._src.interpreters import ad

    # The cached functions themselves: while a region is entered the gate's stand in for them.
    linearized, transposed = ad._linearize_jaxpr, pjit._transpose_jaxpr_fancy

    def loss(x: jax.Array) -> jax.Array:
        return jnp.mean(jnp.sin(x) * 2) + users_helper(x).sum()

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        return jax.grad(loss)(x)

    jax.clear_caches()
    made = []
    for _ in range(regions):
        before = linearized.cache_info().misses, transposed.cache_info().misses
        with RegionPrograms().entered():
            jax.block_until_ready(step(_INPUT))
        after = linearized.cache_info().misses, transposed.cache_info().misses
        made.append((after[0] - before[0], after[1] - before[1]))
    return made


def test_jaxs_own_traces_are_differentiated_once_the_users_in_every_region() -> None:
    first, *later = _transforms_by_region()
    assert first[0] > 1  # jnp.mean, jnp.sin, `* 2` and the user's helper
    # Later regions differentiate and transpose the user's helper again, and nothing of JAX's.
    assert later == [(1, 1), (1, 1)]


def test_a_jax_without_the_transforms_hook_differentiates_its_own_in_every_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jax._src.interpreters import ad

    original = ad.linearize_jaxpr

    def moved(closed: Any, *args: Any, **kwargs: Any) -> Any:  # another signature: refused
        return original(closed, *args, **kwargs)

    monkeypatch.setattr(ad, "linearize_jaxpr", moved)
    first, *later = _transforms_by_region()
    assert [made[0] for made in later] == [first[0]] * 2  # slower, as correct
    assert ad.linearize_jaxpr is moved


def test_only_a_primitive_whose_rules_are_all_jaxs_shares_its_output_shapes() -> None:
    from jax._src import core
    from jax._src.lax import lax

    assert programs._jax_rule(lax.sin_p)
    assert programs._jax_rule(lax.dot_general_p)
    users = core.Primitive("users")
    users.def_abstract_eval(lambda x: x)  # wrapped in a closure of JAX's: still the user's
    assert not programs._jax_rule(users)

    def users_shape(*avals: Any, **params: Any) -> Any:
        return avals[0].shape

    bound = core.Primitive("bound")  # JAX's standard rule, bound to a shape rule of the user's
    bound.def_abstract_eval(functools.partial(lax.standard_abstract_eval, bound, users_shape))
    assert not programs._jax_rule(bound)


def test_a_program_traced_before_the_first_region_is_not_compiled_again_after_it(
    tmp_path: Path,
) -> None:
    """Making the gate's context adds a value to JAX's trace context: made at the worker's
    start-up (`made_at_startup`), a program traced before the first region (the capture
    probe's, a module's at import) keeps its cache entries. In a process of its own: this
    one made the context long ago."""
    compiled_again = run_script(
        tmp_path,
        {},
        """
        import jax
        import numpy as np

        from gate.jaxhooks.programs import RegionPrograms, made_at_startup

        compiles = []
        jax.monitoring.register_event_duration_secs_listener(
            lambda event, seconds, **_: compiles.append(event)
            if event == "/jax/core/compile/backend_compile_duration"
            else None
        )
        made_at_startup()
        probe = jax.jit(lambda x: x + 1)
        probe(np.float32(1)).block_until_ready()
        with RegionPrograms().entered():
            jax.jit(lambda x: x * 3)(np.float32(2)).block_until_ready()
        before = len(compiles)
        probe(np.float32(1)).block_until_ready()
        emit(len(compiles) - before)
        """,
        env={"JAX_PLATFORMS": "cpu"},
    )
    assert compiled_again == 0, "the probe's program was compiled again after a region"


def test_letting_go_clears_a_jitted_steps_programs_and_leaves_anything_else() -> None:
    _, double = _traced_counter()
    programs = RegionPrograms()
    x = jax.numpy.ones(3)
    with programs.entered():
        double(x)  # type: ignore[operator]
    assert double._cache_size() == 1  # type: ignore[attr-defined]
    programs.let_go(double)
    assert double._cache_size() == 0  # type: ignore[attr-defined]

    class NotJax:
        cleared = False

        def clear_cache(self) -> None:  # a user's object with the same method name
            self.cleared = True

    mine = NotJax()
    programs.let_go(mine)
    programs.let_go(len)
    assert not mine.cleared


# The same jitted `add` in two regions: `allows` moves an uncommitted array to device 1 under
# a guard that allows it (recorded, not failing); `refuses` makes the same move under
# `disallow`. JAX checks the move only on a call's slow path, so if `allows` left the fast
# path warm, `refuses` would pass whenever it runs second. (Host callbacks are placed when a
# program is traced: the trace counters above cover them.)
SHARED = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def add(x, y):
    return x + y


def inputs():
    committed = jax.device_put(np.ones(4, np.float32), jax.devices()[1])
    return jnp.ones(4), committed


def step(uncommitted, committed):
    return add(uncommitted, committed)
"""


def _policy(order: list[str]) -> str:
    regions = {
        "allows": "  - {name: allows, step: shared:step, setup: shared:inputs, guard: allow}\n",
        "refuses": "  - {name: refuses, step: shared:step, setup: shared:inputs}\n",
    }
    return (
        "version: 1\nenv:\n  XLA_FLAGS: --xla_force_host_platform_device_count=2\n"
        f"{FAST_DEFAULTS}regions:\n" + "".join(regions[name] for name in order)
    )


@pytest.mark.parametrize("order", [["allows", "refuses"], ["refuses", "allows"]])
def test_verdicts_do_not_depend_on_what_ran_before_in_the_worker(
    tmp_path: Path, order: list[str]
) -> None:
    repo = make_repo(tmp_path, {"shared.py": SHARED, "policies/p.yaml": _policy(order)})
    run = run_gate(repo, "run", "--json", "reports/r.json", devices=2)
    assert run.returncode == 1, run
    assert run.testcase("refuses: transfers").find("failure") is not None, run
    assert run.testcase("allows: transfers").find("failure") is None, run
    regions = {
        r["name"]: r
        for r in json.loads((repo / "reports/r.json").read_text())["suites"][0]["regions"]
    }
    for name in order:
        moves = [(t["direction"], t["cause"]) for t in regions[name]["transfers"]]
        assert ("device-to-device", "uncommitted") in moves, (name, moves)
