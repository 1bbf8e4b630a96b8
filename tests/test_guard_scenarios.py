"""JAX's own transfer-guard scenarios, judged by the gate on CPU as JAX judges them.

Every function of the host-to-device, device-to-device and device-to-host
tables of JAX's tests/transfer_guard_test.py (``_host_to_device_funcs`` and
friends) becomes a region: a small step that makes that one transfer, with
a setup that makes the device arrays JAX's test makes under ``allow``. Each
runs under every level, for all directions at once (``jax.transfer_guard``)
and for its own direction alone (``jax.transfer_guard_<direction>``), and
the gate's verdict must be JAX's (`expected_to_fail`): implicit transfers
fail under ``disallow`` and ``disallow_explicit``, explicit ones only under
``disallow_explicit``, and nothing fails under ``allow``, ``log`` and
``log_explicit``. JAX's test skips device-to-host on CPU, where its guard
never fires; the gate's detector is the witness there, and its verdict must
be the one JAX's guard gives on a GPU. JAX's
``test_disallow_ignores_arrays_on_cpu`` (a value read once is cached on the
host: reading it again moves nothing, even under ``disallow``) is here too,
with setup making the first read.

Beyond JAX's tables: the gate's declared boundaries (explicit transfers pass
there under ``disallow_explicit``, implicit ones do not), and the places
where the gate deliberately differs from JAX (`DIFFERENCES`), each asserted
as the gate behaves, with what JAX would do and why.

All regions run in one gate process on two CPU devices (the device-to-device
scenarios need them), one policy file per level set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, line_of, make_repo, run_gate

LEVELS = ("allow", "log", "disallow", "log_explicit", "disallow_explicit")
DIRECTIONS = ("host_to_device", "device_to_device", "device_to_host")

SCENARIOS_PY = """
import pickle
import warnings

import jax
import jax.numpy as jnp
import numpy as np

SECOND_DEVICE = jax.local_devices()[1]
identity = jax.jit(lambda x: x)
with warnings.catch_warnings():
    # JAX's test uses jit's deprecated device argument; so do we.
    warnings.simplefilter("ignore", DeprecationWarning)
    on_second_device = jax.jit(lambda x: x, device=SECOND_DEVICE)


def device_array():
    return (jnp.ones(1),)


def host_to_device_jax_device_put():
    return jax.device_put(np.ones(10))  # <- host_to_device_jax_device_put


def host_to_device_jax_jit():
    return identity(np.ones(1))  # <- host_to_device_jax_jit


def host_to_device_jnp_one():
    return jnp.ones(1)  # <- host_to_device_jnp_one


def device_to_device_jax_device_put(x):
    return jax.device_put(x, device=SECOND_DEVICE)  # <- device_to_device_jax_device_put


def device_to_device_jax_jit(x):
    return on_second_device(x)  # <- device_to_device_jax_jit


def device_to_host_jax_device_get(x):
    jax.device_get(x)  # <- device_to_host_jax_device_get
    return x


def device_to_host_np_asarray(x):
    np.asarray(x)  # <- device_to_host_np_asarray
    return x


def device_to_host_copy_to_host_async(x):
    x.copy_to_host_async()  # <- device_to_host_copy_to_host_async
    return x


def device_to_host_np_add(x):
    np.add(x, 1)  # <- device_to_host_np_add
    return x


def device_to_host_str(x):
    str(x)  # <- device_to_host_str
    return x


def device_to_host_pickle_dumps(x):
    pickle.dumps(x)  # <- device_to_host_pickle_dumps
    return x


# test_disallow_ignores_arrays_on_cpu: the same function once before, under allow.
def read_once(step):
    def setup():
        (x,) = device_array()
        step(x)
        return (x,)

    return setup


cached_device_to_host_jax_device_get = read_once(device_to_host_jax_device_get)
cached_device_to_host_np_asarray = read_once(device_to_host_np_asarray)
cached_device_to_host_copy_to_host_async = read_once(device_to_host_copy_to_host_async)
cached_device_to_host_np_add = read_once(device_to_host_np_add)
cached_device_to_host_str = read_once(device_to_host_str)
cached_device_to_host_pickle_dumps = read_once(device_to_host_pickle_dumps)


# The gate's declared boundaries: the same functions, called from one.
def boundary(step, *args):
    return step(*args)


def in_boundary(step):
    def stepped(*args):
        return boundary(step, *args)

    return stepped


boundary_host_to_device_jax_device_put = in_boundary(host_to_device_jax_device_put)
boundary_host_to_device_jax_jit = in_boundary(host_to_device_jax_jit)
boundary_host_to_device_jnp_one = in_boundary(host_to_device_jnp_one)
boundary_device_to_device_jax_device_put = in_boundary(device_to_device_jax_device_put)
boundary_device_to_device_jax_jit = in_boundary(device_to_device_jax_jit)
boundary_device_to_host_jax_device_get = in_boundary(device_to_host_jax_device_get)
boundary_device_to_host_np_asarray = in_boundary(device_to_host_np_asarray)
boundary_device_to_host_copy_to_host_async = in_boundary(device_to_host_copy_to_host_async)
boundary_device_to_host_np_add = in_boundary(device_to_host_np_add)
boundary_device_to_host_str = in_boundary(device_to_host_str)
boundary_device_to_host_pickle_dumps = in_boundary(device_to_host_pickle_dumps)


# Not in JAX's tables: the async copy is the transfer, the read after it serves the copy.
def copy_then_read(x):
    x.copy_to_host_async()  # <- copy_then_read
    return np.asarray(x) + 1


# Not in JAX's tables: a module that reads an array at import leaves a host copy.
IMPORTED = jnp.arange(3.0)
np.asarray(IMPORTED)


def read_imported():
    np.asarray(IMPORTED)  # <- read_imported
    return IMPORTED


# test_nesting: the step loosens the guard for itself.
def nested_allow():
    with jax.transfer_guard("allow"):
        return jnp.ones(1)  # <- nested_allow
"""


@dataclass(frozen=True)
class Scenario:
    """One function of JAX's tables: its name there, direction and explicitness."""

    name: str  # as in JAX's test, e.g. "host_to_device_jax_jit"
    direction: str  # "host_to_device", ...
    explicit: bool

    @property
    def setup(self) -> str | None:
        return None if self.direction == "host_to_device" else "scenarios:device_array"


# (function name, is an explicit transfer?), as in _host_to_device_funcs,
# _device_to_device_funcs and _device_to_host_funcs.
def _direction_of(name: str) -> str:
    return next(d for d in DIRECTIONS if name.startswith(d))


SCENARIOS = tuple(
    Scenario(name, _direction_of(name), explicit)
    for name, explicit in (
        ("host_to_device_jax_device_put", True),
        ("host_to_device_jax_jit", False),
        ("host_to_device_jnp_one", False),
        ("device_to_device_jax_device_put", True),
        ("device_to_device_jax_jit", False),
        ("device_to_host_jax_device_get", True),
        ("device_to_host_np_asarray", False),
        ("device_to_host_copy_to_host_async", False),
        ("device_to_host_np_add", False),
        ("device_to_host_str", False),
        ("device_to_host_pickle_dumps", False),
    )
)
DEVICE_TO_HOST = tuple(s for s in SCENARIOS if s.direction == "device_to_host")


def expected_to_fail(level: str, explicit: bool, in_boundary: bool = False) -> bool:
    """JAX's verdict: test_disallow, test_disallow_explicit, and allow/log/log_explicit
    passing everything; a declared boundary lifts the explicit half."""
    if explicit:
        return level == "disallow_explicit" and not in_boundary
    return level in ("disallow", "disallow_explicit")


@dataclass(frozen=True)
class Case:
    """One region: a scenario under one level set, and what the gate must say."""

    region: str
    scenario: Scenario
    guard: str  # the policy's guard value, YAML flow style ("" = left out)
    setup: str | None
    step: str
    fails: bool
    seen: bool = True  # the transfer appears in the map (not when served from a host copy)
    boundary: bool = False


def _guard(level: str, alone: str | None) -> str:
    if alone is None:
        return level
    levels = {d: (level if d == alone else "allow") for d in DIRECTIONS}
    return "{" + ", ".join(f"{d}: {v}" for d, v in levels.items()) + "}"


def level_cases(level: str) -> list[Case]:
    """test_allow, test_log, test_disallow, test_log_explicit and test_disallow_explicit
    for one level: every function under jax.transfer_guard ("all") and under its own
    direction's guard alone."""
    cases = []
    for s in SCENARIOS:
        fails = expected_to_fail(level, s.explicit)
        for alone in (None, s.direction):
            form = "all" if alone is None else "alone"
            cases.append(
                Case(
                    f"{form}-{s.name}",
                    s,
                    _guard(level, alone),
                    s.setup,
                    f"scenarios:{s.name}",
                    fails,
                )
            )
    return cases


def cached_cases() -> list[Case]:
    """test_disallow_ignores_arrays_on_cpu: a value already read is read again under
    disallow, for all directions and for device-to-host alone."""
    return [
        Case(
            f"{form}-{s.name}",
            s,
            _guard("disallow", alone),
            f"scenarios:cached_{s.name}",
            f"scenarios:{s.name}",
            fails=False,
            seen=False,
        )
        for s in DEVICE_TO_HOST
        for form, alone in (("all", None), ("alone", "device_to_host"))
    ]


def boundary_cases() -> list[Case]:
    """The gate's boundaries under disallow_explicit: explicit passes, implicit fails."""
    return [
        Case(
            s.name,
            s,
            "disallow_explicit",
            s.setup,
            f"scenarios:boundary_{s.name}",
            expected_to_fail("disallow_explicit", s.explicit, in_boundary=True),
            boundary=True,
        )
        for s in SCENARIOS
    ]


@dataclass(frozen=True)
class Difference:
    """A scenario where the gate's verdict is not JAX's, on purpose."""

    case: Case
    jax_fails: bool  # what JAX's guard decides in the same situation
    why: str


def default_cases(explicit: bool) -> list[Case]:
    """test_allow_by_default: no level named. The gate's default is disallow (README,
    "regions[].guard"), JAX's allow: the two agree on explicit transfers only."""
    return [
        Case(f"default-{s.name}", s, "", s.setup, f"scenarios:{s.name}", not s.explicit)
        for s in SCENARIOS
        if s.explicit == explicit
    ]


DIFFERENCES = (
    *(
        Difference(
            case,
            jax_fails=False,
            why="a region without `guard:` runs under disallow, not JAX's allow",
        )
        for case in default_cases(explicit=False)
    ),
    # test_nesting / test_mixed_nesting: a step's own `with jax.transfer_guard("allow")`
    # is ignored while the gate watches (the policy decides), and noted at its line.
    Difference(
        Case(
            "nested_allow",
            Scenario("nested_allow", "host_to_device", False),
            "disallow",
            None,
            "scenarios:nested_allow",
            fails=True,
        ),
        jax_fails=False,
        why="the step cannot loosen the policy's guard for itself",
    ),
)

# Beyond JAX's tables: on a GPU the guard checks the async copy, and the read after it
# is served from the copy it made.
COPY_THEN_READ = Case(
    "copy_then_read",
    Scenario("copy_then_read", "device_to_host", False),
    "disallow",
    "scenarios:device_array",
    "scenarios:copy_then_read",
    fails=True,
)

READ_IMPORTED = Case(
    "read_imported",
    Scenario("read_imported", "device_to_host", False),
    "disallow",
    None,
    "scenarios:read_imported",
    fails=False,
    seen=False,
)

LEVEL_SETS: dict[str, list[Case]] = {
    **{level: level_cases(level) for level in LEVELS},
    "default": default_cases(explicit=True),
    "cached": cached_cases(),
    "boundary": boundary_cases(),
    "extras": [COPY_THEN_READ, READ_IMPORTED],
    "differences": [d.case for d in DIFFERENCES],
}


def policy(cases: list[Case]) -> str:
    body = []
    for case in cases:
        body.append(f"  - name: {case.region}\n    step: {case.step}\n")
        if case.setup:
            body.append(f"    setup: {case.setup}\n")
        if case.guard:
            body.append(f"    guard: {case.guard}\n")
        if case.boundary:
            body.append("    boundaries: [scenarios:boundary]\n")
    return f"version: 1\n{FAST_DEFAULTS}regions:\n{''.join(body)}"


@dataclass(frozen=True)
class Verdicts:
    """What one gate process said about every region, by (level set, region)."""

    run: GateRun
    regions: dict[tuple[str, str], dict[str, Any]]
    source: Path


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> Verdicts:
    repo = tmp_path_factory.mktemp("scenarios")
    files = {"scenarios.py": SCENARIOS_PY}
    files.update({f"policies/{name}.yaml": policy(cases) for name, cases in LEVEL_SETS.items()})
    make_repo(repo, files)
    run = run_gate(repo, "run", "--no-baseline", "--json", "reports/map.json", devices=2)
    assert run.returncode in (0, 1), run
    report = json.loads((repo / "reports/map.json").read_text())
    regions = {
        (suite["name"], region["name"]): region
        for suite in report["suites"]
        for region in suite["regions"]
    }
    expected = {(name, c.region) for name, cases in LEVEL_SETS.items() for c in cases}
    assert set(regions) == expected, run
    return Verdicts(run, regions, repo / "scenarios.py")


def _judge(verdicts: Verdicts, level_set: str, case: Case) -> list[str]:
    """Where the gate's verdict on ``case`` is not the expected one (empty: it is)."""
    region = verdicts.regions[level_set, case.region]
    wrong = []
    if region["error"] is not None:
        return [f"{case.region}: error {region['error']['message']}"]
    status = "failed" if case.fails else "passed"
    if region["status"] != status:
        wrong.append(f"{case.region}: {region['status']}, expected {status}")
    line = line_of(verdicts.source, f"# <- {case.scenario.name}")
    at_line = [t for t in region["transfers"] if t["line"] == line]
    kind = "explicit" if case.scenario.explicit else "implicit"
    direction = case.scenario.direction.replace("_", "-")
    if case.seen:
        found = [(t["direction"], t["kind"], t["failing"]) for t in at_line]
        if found != [(direction, kind, case.fails)]:
            wrong.append(f"{case.region}: at line {line} the map has {found}")
    elif at_line:
        wrong.append(f"{case.region}: a read of a host-cached value was reported: {at_line}")
    # Nothing else may fail: the verdict is about this one transfer.
    others = [t for t in region["transfers"] if t["failing"] and t["line"] != line]
    if others:
        wrong.append(f"{case.region}: other failing transfers {others}")
    return wrong


@pytest.mark.parametrize("level_set", [*LEVELS, "default", "cached", "boundary", "extras"])
def test_the_gate_judges_jax_scenarios_as_jax_does(verdicts: Verdicts, level_set: str) -> None:
    wrong = [w for case in LEVEL_SETS[level_set] for w in _judge(verdicts, level_set, case)]
    assert not wrong, "\n".join(wrong) + f"\n{verdicts.run}"


def test_setup_that_read_its_outputs_is_warned_about(verdicts: Verdicts) -> None:
    # The step's read of them moves nothing, so it cannot be seen: a warning,
    # on CPU for the modelled host copy as on a GPU for the real one.
    for case in LEVEL_SETS["cached"]:
        notes = verdicts.regions["cached", case.region]["notes"]
        assert any("host copy is cached" in note for note in notes), (case.region, notes)
    fresh = verdicts.regions["disallow", "all-device_to_host_np_asarray"]["notes"]
    assert not any("host copy is cached" in note for note in fresh), fresh


def test_where_the_gate_differs_from_jax_on_purpose(verdicts: Verdicts) -> None:
    wrong = [w for d in DIFFERENCES for w in _judge(verdicts, "differences", d.case)]
    assert not wrong, "\n".join(wrong) + f"\n{verdicts.run}"
    # Each is a real difference: JAX's verdict is the other one.
    assert all(d.jax_fails != d.case.fails for d in DIFFERENCES)
    nested = verdicts.regions["differences", "nested_allow"]
    assert any("the step calls" in note for note in nested["notes"]), nested["notes"]


def test_the_scenarios_are_jax_tables() -> None:
    # The tables as JAX's test spells them: 3 + 2 + 6 functions, one explicit each.
    counts = {d: [s.explicit for s in SCENARIOS if s.direction == d] for d in DIRECTIONS}
    assert {d: (len(e), sum(e)) for d, e in counts.items()} == {
        "host_to_device": (3, 1),
        "device_to_device": (2, 1),
        "device_to_host": (6, 1),
    }


SETUP_READS = """
import jax.numpy as jnp
import numpy as np


def setup():
    x = jnp.arange(3.0)
    np.asarray(x)  # a host copy, as a GPU keeps it
    return (x,)


def step(x):
    return x
"""


def test_setup_reads_count_as_host_copies_whoever_runs_setup(tmp_path: Path) -> None:
    # In-process, with no other detector open: fresh_inputs itself watches setup.
    from result_samples import callable_ref, one_region_policy

    from gate.policy.resolve import python_path
    from gate.region.callables import RegionCode, import_region
    from gate.region.region_run import RegionRun
    from gate.user_code import UserCode
    from gate.witness.host_copies import host_copy_cached

    make_repo(tmp_path, {"setup_reads.py": SETUP_READS})
    policy = one_region_policy(
        callable_ref("setup_reads:step"),
        callable_ref("setup_reads:setup"),
        python_path=(tmp_path,),
    )
    [region] = policy.regions
    with python_path(policy.python_path, tmp_path):
        code = RegionCode(policy, region, UserCode(tmp_path), import_region(policy, region))
        run = RegionRun(code)
        inputs = run.inputs.fresh()
    warnings = run.verdict.warnings
    assert host_copy_cached(inputs)
    assert any("host copy is cached" in warning for warning in warnings), warnings
