"""Host callbacks inside jitted code: each site found at its line, each run counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FAST_DEFAULTS, make_repo, run_gate
from jax_scripts import line_of, run_script

STEPS = """
import jax
import jax.numpy as jnp
import numpy as np
from jax import pure_callback
from jax.experimental import io_callback

import noisy_lib


def host_double(a):
    return np.asarray(a) * 2


def host_log(a):
    pass


@jax.jit
def step(x):
    jax.debug.print("x={x}", x=x)  # <- first print
    jax.debug.print("x={x}", x=x)  # <- same text, another line
    y = jax.pure_callback(host_double, jax.ShapeDtypeStruct(x.shape, x.dtype), x)  # <- pure
    y = pure_callback(host_double, jax.ShapeDtypeStruct(x.shape, x.dtype), y)  # <- imported pure
    jax.debug.callback(host_log, y)  # <- debug callback
    io_callback(host_log, None, y, ordered=True)  # <- io
    jax.debug.print(ordered=True)("y={y}", y=y)  # <- two-call print
    return noisy_lib.normalize(y)  # <- library


@jax.jit
def quiet(x):
    return x * 2


def eager(x):
    jax.debug.print("eager {x}", x=x)  # <- eager print
    return x
"""

NOISY_LIB = """
import jax


def normalize(y):
    jax.debug.print("norm {n}", n=(y * y).sum())  # <- placed by the library
    return y / 2
"""

DRIVER = """
from pathlib import Path

import jax
import jax.numpy as jnp

import steps
from gate.witness.callbacks import count_callbacks, per_step
from gate.user_code import UserCode

code = UserCode(Path(".").resolve())
RUNS = 3


def rows(counts):
    return [
        {
            "kind": site.kind.value,
            "line": site.location.line if site.location else None,
            "path": site.location.path if site.location else None,
            "placed_by": str(site.placed_by) if site.placed_by else None,
            "target": site.target,
            "runs": n,
        }
        for site, n in counts.items()
    ]


jax.clear_caches()  # as the runner does: tracing happens inside the block
with count_callbacks(code) as log:
    for _ in range(RUNS):
        jax.block_until_ready(steps.step(jnp.arange(3.0)))
    log.settle()
    after_step = log.counts()
    jax.block_until_ready(steps.step(jnp.arange(3.0)))
    log.settle()
    one_more = log.delta(after_step)
    jax.block_until_ready(steps.quiet(jnp.arange(3.0)))
    steps.eager(jnp.arange(2.0))
    steps.eager(jnp.arange(2.0))
    log.settle()
    total = log.counts()
# After the block, compiled code still runs its (wrapped) callbacks, uncounted.
jax.block_until_ready(steps.step(jnp.arange(3.0)))
jax.effects_barrier()
emit({
    "sites": rows(after_step),
    "per_step": [round(v, 3) for v in per_step(after_step, RUNS).values()],
    "one_more": sorted(one_more.values()),
    "total": rows(total),
    "unchanged_after": log.counts() == total,
})
"""


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("repo")
    # The library lives where installed packages live, so it is not user code.
    files = {"steps.py": STEPS, "venv/site-packages/noisy_lib.py": NOISY_LIB}
    script = "import sys\nsys.path.insert(0, 'venv/site-packages')\n" + DRIVER
    result: dict[str, Any] = run_script(repo, files, script)
    return result


SITES = [
    ("jax.debug.print", "# <- first print", "x={x}"),
    ("jax.debug.print", "# <- same text, another line", "x={x}"),
    ("jax.pure_callback", "# <- pure", "host_double"),
    ("jax.pure_callback", "# <- imported pure", "host_double"),
    ("jax.debug.callback", "# <- debug callback", "host_log"),
    ("jax.experimental.io_callback", "# <- io", "host_log"),
    ("jax.debug.print", "# <- two-call print", "y={y}"),
    ("jax.debug.print", "# <- library", "norm {n}"),
]


def test_every_site_is_found_at_its_line_in_order(counted: dict[str, Any]) -> None:
    found = [(s["kind"], s["path"], s["line"], s["target"]) for s in counted["sites"]]
    assert found == [
        (kind, "steps.py", line_of(STEPS, marker), target) for kind, marker, target in SITES
    ]


def test_each_site_runs_once_per_step(counted: dict[str, Any]) -> None:
    assert [s["runs"] for s in counted["sites"]] == [3] * len(SITES)
    assert counted["per_step"] == [1.0] * len(SITES)
    assert counted["one_more"] == [1] * len(SITES)


def test_a_library_site_names_the_user_line_and_the_library_line(
    counted: dict[str, Any],
) -> None:
    placed_by = [s["placed_by"] for s in counted["sites"]]
    library_line = line_of(NOISY_LIB, "# <- placed by the library")
    assert placed_by[:-1] == [None] * (len(SITES) - 1)
    assert placed_by[-1] == f"venv/site-packages/noisy_lib.py:{library_line}"


def test_an_eager_print_counts_each_call(counted: dict[str, Any]) -> None:
    eager = [s for s in counted["total"] if s["line"] == line_of(STEPS, "# <- eager print")]
    assert [(s["kind"], s["runs"]) for s in eager] == [("jax.debug.print", 2)]


def test_runs_after_the_block_are_not_counted(counted: dict[str, Any]) -> None:
    assert counted["unchanged_after"]


# --- in this process: restoring and failing loudly -----------------------------------------------


def _entry_codes() -> dict[str, Any]:
    import jax
    import jax.experimental
    from jax._src import debugging

    return {
        "print": jax.debug.print.__code__,
        "callback": jax.debug.callback.__code__,
        "pure": jax.pure_callback.__code__,
        "io": jax.experimental.io_callback.__code__,
        "runner": debugging._format_print_callback.__code__,
    }


def test_entry_points_are_restored_after_the_block(tmp_path: Path) -> None:
    from gate.user_code import UserCode
    from gate.witness.callbacks import count_callbacks

    before = _entry_codes()
    during: dict[str, Any] = {}

    def interrupted() -> None:
        with count_callbacks(UserCode(tmp_path)):
            during.update(_entry_codes())
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        interrupted()
    assert all(during[name] is not before[name] for name in before)
    assert _entry_codes() == before


def test_nested_blocks_keep_the_entry_points_until_the_last_ends(tmp_path: Path) -> None:
    from gate.user_code import UserCode
    from gate.witness.callbacks import count_callbacks

    before = _entry_codes()
    with count_callbacks(UserCode(tmp_path)):
        with count_callbacks(UserCode(tmp_path)):
            pass
        assert _entry_codes()["print"] is not before["print"]
    assert _entry_codes() == before


def test_a_missing_entry_point_fails_loudly_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools

    import jax
    from jax._src import debugging

    from gate.user_code import UserCode
    from gate.witness.callbacks import CallbackHookMissing, count_callbacks

    before = _entry_codes()
    monkeypatch.setattr(
        debugging, "_format_print_callback", functools.partial(print, "changed in a new jax")
    )
    monkeypatch.delattr(jax, "pure_callback")
    with (
        pytest.raises(CallbackHookMissing, match=r"jax\.pure_callback \(absent\).*_format_print"),
        count_callbacks(UserCode(tmp_path)),
    ):
        pytest.fail("the block must not run")
    monkeypatch.undo()
    assert _entry_codes() == before


CALLBACK_STEP = """
import jax
import numpy as np

SEEN = []


@jax.jit
def logged(x):
    jax.debug.callback(SEEN.append, x.sum())  # the callback
    return x * 2.0


def make():
    return (jax.device_put(np.ones(4, np.float32)),)


def step(x):
    return logged(x)  # the jitted call
"""


def test_jaxs_own_device_put_for_a_callback_is_one_explicit_transfer_under_the_strict_guard(
    tmp_path: Path,
) -> None:
    # JAX hands a debug callback's operands back through jax.device_put: an explicit
    # host-to-device move that disallow_explicit refuses inside the callback, where XLA's
    # error carries the stack only as text. It is the one explicit transfer the map saw, not
    # a second, implicit one named after XLA's wrapper.
    policy = (
        "version: 1\n"
        + FAST_DEFAULTS
        + """regions:
  - {name: strict, step: "steps:step", setup: "steps:make", guard: disallow_explicit}
  - {name: plain, step: "steps:step", setup: "steps:make"}
"""
    )
    repo = make_repo(tmp_path, {"steps.py": CALLBACK_STEP, "policies/p.yaml": policy})
    run = run_gate(repo, "run", "--json", "reports/r.json")
    assert run.returncode == 1, run
    regions = {
        r["name"]: r
        for suite in json.loads((repo / "reports/r.json").read_text())["suites"]
        for r in suite["regions"]
    }
    call_line = line_of(CALLBACK_STEP.lstrip("\n"), "# the jitted call")
    strict = [t for t in regions["strict"]["transfers"] if t["failing"]]
    to_device = [t for t in strict if t["direction"] == "host-to-device"]
    assert {(t["kind"], t["line"]) for t in to_device} == {("explicit", call_line)}, strict
    assert not any("CpuCallback" in t["seen_by"] for t in strict), strict
    # Under plain disallow the explicit move passes; the callback itself still fails.
    plain = [t for t in regions["plain"]["transfers"] if t["failing"]]
    assert [t["direction"] for t in plain] == ["device-to-host"], plain
