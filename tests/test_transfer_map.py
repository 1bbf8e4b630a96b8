"""The transfer map: every transfer with its line and count, and the baseline on top of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, GateRun, line_of, make_repo, run_gate

# The map listens through sys.monitoring on Python 3.12+ (gate.witness.code_events). The long
# baseline sweeps marked `once` run on the main Python only: what they judge on top of the map
# (the baseline's bookkeeping and messages) is the same on every Python, and the map's lines and
# counts under them are checked on each by the tests around them.
pytestmark = pytest.mark.pythons

MANY = """
import jax
import numpy as np


@jax.jit
def double(x):
    return x * 2.0


def inputs():
    return (jax.device_put(np.ones(4, np.float32)),)


def add_one(x):
    return x + 1.0  # inside a helper


def step(x):
    y = double(np.ones((8, 4), np.float32))  # a NumPy batch
    for _ in range(3):
        x = x * 0.5  # in a loop of three
    x = add_one(x)
    return x, y
"""

POLICY = (
    f"version: 1\n{FAST_DEFAULTS}regions:\n"
    "  - name: many\n    step: steps:step\n    setup: steps:inputs\n"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"steps.py": MANY, "policies/p.yaml": POLICY})


def transfers(run: GateRun, path: Path) -> list[dict[str, object]]:
    document = json.loads(path.read_text())
    assert document["format"] == "jax-transfer-gate.report"
    assert document["version"] == 1
    (suite,) = document["suites"]
    (region,) = suite["regions"]
    found: list[dict[str, object]] = region["transfers"]
    return found


def by_line(found: list[dict[str, object]]) -> dict[int, dict[str, object]]:
    return {int(str(t["line"])): t for t in found if t["line"] is not None}


@pytest.mark.parametrize("log_level", [None, "1", "2", "3"])
def test_every_line_with_its_count_under_any_log_level(repo: Path, log_level: str | None) -> None:
    env = {"TF_CPP_MIN_LOG_LEVEL": log_level} if log_level is not None else {}
    run = run_gate(repo, "run", "--json", "reports/map.json", env=env)
    assert run.returncode == 1, run
    lines = by_line(transfers(run, repo / "reports/map.json"))
    batch = line_of(repo / "steps.py", "a NumPy batch")
    loop = line_of(repo / "steps.py", "in a loop of three")
    helper = line_of(repo / "steps.py", "inside a helper")
    assert set(lines) == {batch, loop, helper}, run
    assert lines[loop]["per_step"] == 3
    assert lines[loop]["first_call"] == 3
    assert lines[batch]["per_step"] == 1
    assert lines[batch]["shape"] == [8, 4]
    assert lines[batch]["dtype"] == "float32"
    assert lines[batch]["bytes"] == 8 * 4 * 4
    assert lines[helper]["function"] == "add_one"
    for found in lines.values():
        assert found["direction"] == "host-to-device"
        assert found["kind"] == "implicit"
        assert found["failing"] is True
    # The JUnit failure names all three, most severe first, and points at it.
    case = run.testcase("many: transfers")
    failure = case.find("failure")
    assert failure is not None
    message = failure.get("message", "")
    assert message.startswith("3 lines move data: implicit host-to-device transfer")
    assert f"steps.py:{loop}, 3x per step" in message
    assert f"steps.py:{batch}" in message
    assert f"steps.py:{helper}" in message
    assert case.get("line") == str(loop)
    assert "x = x * 0.5" in (failure.text or "")


def test_the_steps_own_stderr_is_passed_through(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        {
            "steps.py": MANY.replace(
                "    x = add_one(x)\n",
                "    x = add_one(x)\n"
                "    print('hello from the step', file=__import__('sys').stderr)\n",
            ),
            "policies/p.yaml": POLICY,
        },
    )
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    assert "hello from the step" in run.stderr
    assert "guard_lib" not in run.stderr  # the guard's own lines are consumed


def test_each_block_reads_only_what_was_written_in_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The map's log file is kept from one block to the next (`transfer_map._LogFiles`):
    emptied between them, and a block inside another writes to a file of its own."""
    import os

    from gate.user_code import UserCode
    from gate.witness.transfer_map import mapped

    code = UserCode(repo_root=tmp_path)
    with mapped(code) as first:
        os.write(2, b"first\n")
    with mapped(code) as outer:
        os.write(2, b"outer\n")
        with mapped(code) as inner:
            os.write(2, b"inner\n")
        os.write(2, b"outer again\n")
    with mapped(code) as last:
        pass
    assert first.passthrough == ["first"]
    assert inner.passthrough == ["inner"]
    assert outer.passthrough == ["outer", "outer again"]
    assert last.passthrough == []
    assert capfd.readouterr().err.split() == ["first", "inner", "outer", "outer", "again"]


def test_the_kept_log_files_are_closed_when_the_process_exits(tmp_path: Path) -> None:
    """A user's own process keeps the map's files between blocks; the exit closes them rather
    than leave them to Python's shutdown (a ResourceWarning, where warnings are shown)."""
    from jax_scripts import run_script

    closed = run_script(
        tmp_path,
        {},
        """
        import atexit
        from pathlib import Path

        from gate.user_code import UserCode
        from gate.witness import transfer_map

        with transfer_map.mapped(UserCode(repo_root=Path.cwd())):
            pass
        [(writer, reader)] = transfer_map._LOG_FILES._free
        atexit._run_exitfuncs()
        emit(reader.closed)
        """,
        env={"JAX_PLATFORMS": "cpu"},
    )
    assert closed is True


@pytest.mark.once
def test_baseline_accepts_then_tolerates_shifts_and_catches_new(repo: Path) -> None:
    made = run_gate(repo, "baseline")
    assert made.returncode == 0, made
    baseline = repo / "policies" / "transfer-gate-baseline.json"
    text = baseline.read_text()
    document = json.loads(text)
    assert len(document["accepted"]) == 3
    assert "line" not in document["accepted"][0]
    # Stable: a second baseline of the same code accepts the same lines, in the same order
    # (only the step times it also stores are measured afresh).
    assert run_gate(repo, "baseline").returncode == 0
    again = json.loads(baseline.read_text())
    assert again["accepted"] == document["accepted"]
    assert again.keys() == document.keys()
    assert again["timing"].keys() == document["timing"].keys()

    accepted = run_gate(repo, "run")
    assert accepted.returncode == 0, accepted
    assert "baseline: policies/transfer-gate-baseline.json (3 accepted)" in accepted.stdout

    # Unrelated edits above every line: still accepted.
    steps = repo / "steps.py"
    steps.write_text("# a new header comment\n\n\nimport os\n" + steps.read_text())
    shifted = run_gate(repo, "run")
    assert shifted.returncode == 0, shifted

    # One new transfer: fails, naming only it.
    steps.write_text(
        steps.read_text().replace(
            "    return x, y\n", "    z = x - 2.0  # new transfer\n    return z, y\n"
        )
    )
    new = run_gate(repo, "run")
    assert new.returncode == 1, new
    failure = new.testcase("many: transfers").find("failure")
    assert failure is not None
    line = line_of(steps, "new transfer")
    assert failure.get("message", "").startswith(
        f"implicit host-to-device transfer float32[] at steps.py:{line}"
    )
    assert "new since the baseline" in new.stdout


@pytest.mark.once
def test_more_often_than_accepted_fails(repo: Path) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    steps = repo / "steps.py"
    steps.write_text(steps.read_text().replace("range(3)", "range(5)"))
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    assert "more often than the baseline accepts" in run.stdout
    assert "5x per step" in run.stdout


@pytest.mark.once
def test_removed_transfer_is_reported_as_fixed_with_the_ratchet_command(repo: Path) -> None:
    assert run_gate(repo, "baseline").returncode == 0
    steps = repo / "steps.py"
    steps.write_text(steps.read_text().replace("    x = add_one(x)\n", ""))
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    assert "1 accepted transfer no longer happens" in run.stdout
    assert "transfer-gate baseline --baseline policies/transfer-gate-baseline.json" in run.stdout
    out = run.testcase("many: transfers").findtext("system-out") or ""
    assert "no longer happen" in out


@pytest.mark.once
def test_a_corrupt_baseline_is_a_usage_error(repo: Path) -> None:
    (repo / "policies" / "transfer-gate-baseline.json").write_text("{not json")
    run = run_gate(repo, "run")
    assert run.returncode == 2, run
    assert "transfer-gate-baseline.json:1: not valid JSON" in run.stderr
    assert "transfer-gate baseline" in run.stderr
    ignored = run_gate(repo, "run", "--no-baseline")
    assert ignored.returncode == 1, ignored


@pytest.mark.once
def test_baseline_of_one_region_keeps_the_other_regions_entries(tmp_path: Path) -> None:
    two = POLICY + "  - name: again\n    step: steps:step\n    setup: steps:inputs\n"
    repo = make_repo(tmp_path, {"steps.py": MANY, "policies/p.yaml": two})
    assert run_gate(repo, "baseline").returncode == 0
    baseline = repo / "policies" / "transfer-gate-baseline.json"
    before = json.loads(baseline.read_text())["accepted"]
    assert {e["region"] for e in before} == {"p.many", "p.again"}
    only = run_gate(repo, "baseline", "--region", "many")
    assert only.returncode == 0, only
    assert "3 kept for other regions" in only.stdout
    assert json.loads(baseline.read_text())["accepted"] == before
    assert run_gate(repo, "run").returncode == 0


EDGES = """
import jax
import jax.numpy as jnp
import numpy as np


def inputs():
    return (jax.device_put(np.ones(4, np.float32)),)


def gen(x):
    for _ in range(2):
        yield x + 1.0  # in a generator


def step(x):
    ys = [x * 2.0 for _ in range(3)]  # in a comprehension
    z = jnp.stack(
        [
            x,
            x - 3.0,  # inside a multi-line call
        ]
    )
    w = sum(gen(x), start=x)
    return ys[0], z, w
"""


def test_comprehensions_generators_and_multiline_calls_get_their_own_lines(
    tmp_path: Path,
) -> None:
    repo = make_repo(
        tmp_path,
        {
            "edges.py": EDGES,
            "policies/p.yaml": POLICY.replace("name: many", "name: edges").replace(
                "steps:", "edges:"
            ),
        },
    )
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    lines = by_line(transfers(run, repo / "reports/map.json"))
    edges = repo / "edges.py"
    expected = {
        line_of(edges, "in a comprehension"): 3,
        line_of(edges, "in a generator"): 2,
        line_of(edges, "inside a multi-line call"): 1,
    }
    assert {line: found["per_step"] for line, found in lines.items()} == expected


def test_a_module_that_raises_jaxs_log_level_does_not_blind_the_map(tmp_path: Path) -> None:
    # jax_logging_level=ERROR lowers jaxlib's C++ log level at run time, after
    # the gate set TF_CPP_MIN_LOG_LEVEL; the gate puts it back before each region.
    quiet = MANY.replace(
        "import numpy as np\n",
        'import numpy as np\n\njax.config.update("jax_logging_level", "ERROR")\n',
        1,
    )
    repo = make_repo(tmp_path, {"steps.py": quiet, "policies/p.yaml": POLICY})
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    lines = by_line(transfers(run, repo / "reports/map.json"))
    assert lines[line_of(repo / "steps.py", "in a loop of three")]["per_step"] == 3


def test_stderr_text_that_mentions_a_transfer_is_not_one(tmp_path: Path) -> None:
    chatty = """
import sys

import jax
import numpy as np


def inputs():
    return (jax.device_put(np.ones(4, np.float32)),)


def step(x):
    print("batch already on device, skipping host-to-device transfer", file=sys.stderr)
    return x * x
"""
    repo = make_repo(tmp_path, {"steps.py": chatty, "policies/p.yaml": POLICY})
    run = run_gate(repo, "run")
    assert run.returncode == 0, run
    assert "skipping host-to-device transfer" in run.stderr  # passed through, not counted


# --- one finding per array ----------------------------------------------------------------------

SGD = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def sgd_update(params, x, y, lr):
    return params - lr * (x.mean() + y.mean())


LR = 0.1


def setup():
    return (
        jax.device_put(jnp.zeros((256, 1))),
        np.ones((32, 16, 16, 1), np.float32),
        np.ones((32,), np.int32),
    )


def step(params, x, y):
    return sgd_update(params, x, y, LR)  # three host values


@jax.jit
def jitted_step(params, batch):
    return params - batch["image"].mean() - batch["label"].mean()


def batch_setup():
    batch = {"label": np.ones((32,), np.int32), "image": np.ones((32, 8), np.float32)}
    return jax.device_put(jnp.zeros((256, 1))), batch


@jax.jit
def pair(a, b):
    return a + b


def twins(params, x, y):
    a, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    return pair(a, b)  # two arguments, one dtype and shape


def eager(params, x, y):
    a = params * 2.0  # an eager op with a Python scalar
    return a[1:], sgd_update(params, x + 0, y, LR)  # not plain names: nothing named
"""

SGD_POLICY = (
    f"version: 1\n{FAST_DEFAULTS}regions:\n"
    "  - name: sgd\n    step: train:step\n    setup: train:setup\n"
)


def sgd_repo(tmp_path: Path, policy: str = SGD_POLICY) -> Path:
    return make_repo(tmp_path, {"train.py": SGD, "policies/p.yaml": policy})


def test_one_call_moving_three_arrays_is_three_findings_named_by_argument(
    tmp_path: Path,
) -> None:
    repo = sgd_repo(tmp_path)
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    found = transfers(run, repo / "reports/map.json")
    line = line_of(repo / "train.py", "three host values")
    assert [
        (t["line"], t["dtype"], t["shape"], t["bytes"], t["first_call"], t["per_step"])
        for t in found
    ] == [
        (line, "float32", [32, 16, 16, 1], 32768, 1, 1),
        (line, "int32", [32], 128, 1, 1),
        (line, "float32", [], 4, 1, 1),
    ]
    assert [t["argument"] for t in found] == ["x", "y", "lr"]
    assert {t["jitted_call"] for t in found} == {"sgd_update"}
    assert {t["host_use"] for t in found} == {None}
    assert len({t["fingerprint"] for t in found}) == 3
    assert "FAIL  p.sgd  1 failing line (3 arrays)  median" in run.stdout  # one line to fix
    assert (
        f"train.py:{line}: implicit host-to-device argument 'y' int32[32], "
        "1x per step, 1x on the first call" in run.stdout
    )
    failure = run.testcase("sgd: transfers").find("failure")
    assert failure is not None
    assert failure.get("message", "") == (
        "3 transfers at 1 line: implicit host-to-device transfer of argument 'x' "
        f"float32[32,16,16,1] at train.py:{line}, 1x per step, 1x on the first call; "
        f"also host-to-device argument 'y' int32[32] at train.py:{line}, "
        f"host-to-device argument 'lr' float32[] at train.py:{line}"
    )
    assert (failure.text or "").startswith("3 failing transfers at 1 line, most severe first:")


def test_a_jitted_step_names_setups_outputs_by_the_steps_parameters(tmp_path: Path) -> None:
    policy = SGD_POLICY.replace("train:step", "train:jitted_step").replace(
        "train:setup", "train:batch_setup"
    )
    repo = sgd_repo(tmp_path, policy)
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    found = transfers(run, repo / "reports/map.json")
    assert [(t["argument"], t["dtype"], t["shape"], t["per_step"]) for t in found] == [
        ("batch['image']", "float32", [32, 8], 1),
        ("batch['label']", "int32", [32], 1),
    ]
    assert {t["jitted_call"] for t in found} == {"jitted_step"}
    assert {t["line"] for t in found} == {line_of(repo / "train.py", "def jitted_step")}


def test_warm_moves_keep_their_arrays_and_unknowable_arguments_stay_unnamed(
    tmp_path: Path,
) -> None:
    # Warm calls log their moves with an empty description; each keeps the
    # array the first call described at the same place. `x + 0` is not a plain
    # name, so no argument of that call is named, and none is guessed.
    policy = SGD_POLICY.replace("train:step", "train:eager")
    repo = sgd_repo(tmp_path, policy)
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    found = transfers(run, repo / "reports/map.json")
    scalar = line_of(repo / "train.py", "an eager op with a Python scalar")
    call = line_of(repo / "train.py", "nothing named")
    got = [(t["line"], t["dtype"], t["shape"], t["first_call"], t["per_step"]) for t in found]
    assert (scalar, "float32", [], 1, 1) in got
    assert (call, "int32", [32], 1, 1) in got
    assert (call, "float32", [], 1, 1) in got
    assert all(t["dtype"] is not None for t in found), found
    assert {t["argument"] for t in found} == {None}


# --- the baseline knows which array moved --------------------------------------------------------

SWAP = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def update(p, a):
    return p + a.sum()


X = np.ones((256, 64), np.float32)
Y = np.ones((256, 1), np.float32)


def setup():
    return (jax.device_put(jnp.zeros(())),)


def step(p):
    return update(p, X)  # the accepted move
"""

SWAP_POLICY = (
    f"version: 1\n{FAST_DEFAULTS}regions:\n"
    "  - name: swap\n    step: swap:step\n    setup: swap:setup\n"
)


@pytest.mark.once
def test_the_baseline_fails_a_line_that_now_moves_another_array_not_another_batch_size(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path, {"swap.py": SWAP, "policies/p.yaml": SWAP_POLICY})
    assert run_gate(repo, "baseline").returncode == 0
    [entry] = json.loads((repo / "policies/transfer-gate-baseline.json").read_text())["accepted"]
    assert entry["array"] == "a float32[*,64]"
    code = repo / "swap.py"
    # A new batch size is the same array: still accepted.
    code.write_text(SWAP.replace("X = np.ones((256, 64)", "X = np.ones((128, 64)"))
    resized = run_gate(repo, "run")
    assert resized.returncode == 0, resized
    # Another array moved by the same line, as often: a new transfer, not a silent pass.
    code.write_text(SWAP.replace("update(p, X)", "update(p, Y)"))
    swapped = run_gate(repo, "run")
    assert swapped.returncode == 1, swapped
    assert "new since the baseline: implicit host-to-device transfer of argument 'a' " in (
        swapped.stdout
    )
    assert "float32[256,1]" in swapped.stdout
    assert "1 accepted transfer no longer happens" in swapped.stdout


def test_a_version_1_baseline_is_one_line_saying_how_to_regenerate_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"swap.py": SWAP, "policies/p.yaml": SWAP_POLICY})
    old = {"format": "jax-transfer-gate.results.baseline", "version": 1, "accepted": []}
    (repo / "policies/transfer-gate-baseline.json").write_text(json.dumps(old))
    run = run_gate(repo, "run")
    assert run.returncode == 2, run
    assert run.stderr.splitlines() == [
        "error: policies/transfer-gate-baseline.json: transfer-gate baseline version 1 predates "
        "per-array fingerprints (one finding per array moved) and cannot be read; regenerate "
        "it with `transfer-gate baseline`"
    ]
    # The report is still written, and says the same.
    case = run.testcase("baseline")
    error = case.find("error")
    assert error is not None, run
    assert "regenerate it with `transfer-gate baseline`" in error.get("message", "")
    assert case.get("file") == "policies/transfer-gate-baseline.json"


def test_two_arguments_of_one_dtype_and_shape_are_one_finding_naming_neither(
    tmp_path: Path,
) -> None:
    repo = sgd_repo(tmp_path, SGD_POLICY.replace("train:step", "train:twins"))
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == 1, run
    [found] = transfers(run, repo / "reports/map.json")
    assert (found["dtype"], found["shape"], found["first_call"], found["per_step"]) == (
        "float32",
        [8],
        2,
        2,
    )
    assert found["argument"] is None  # 'a' or 'b': either would be half wrong
    assert found["jitted_call"] == "pair"


TRICKY = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def upd(p, x, y, lr):
    return p - lr * (x.sum() + y.sum())


@jax.jit
def f(x):
    return x * 2


SMALL, BIG = np.ones((2,), np.float32), np.ones((4, 3), np.float32)
BATCHES = [np.ones((8, n), np.float32) for n in (4, 5, 6)]
_made = {}


def setup():
    return (jax.device_put(jnp.ones(())),)


def keywords(p):
    return upd(p, SMALL, y=BIG, lr=0.2)  # keywords after a positional


def loop(p):
    for batch in BATCHES:
        p = p + f(batch).sum()  # three arrays, one per turn
    return p


# Library code (not the user's files): its moves are charged to the calling line.
LIBRARY = '''
def upload(p, made, jnp, np):
    if "t" not in made:
        made["t"] = jnp.asarray(np.ones((100,), np.float32))
    return p * 3.0
'''
_library = {}
exec(compile(LIBRARY, "/opt/some-library/upload.py", "exec"), _library)


def once_then_every(p):
    return _library["upload"](p, _made, jnp, np)  # one-time upload beside a per-step one
"""


def test_warm_moves_keep_their_own_arrays_and_names_or_say_they_are_unknown(
    tmp_path: Path,
) -> None:
    repo = make_repo(
        tmp_path,
        {
            "tricky.py": TRICKY,
            "policies/t.yaml": f"version: 1\nsuite: t\n{FAST_DEFAULTS}regions:\n"
            + "".join(
                f"  - {{name: {n}, step: tricky:{n.replace('-', '_')}, setup: tricky:setup}}\n"
                for n in ("keywords", "loop", "once-then-every")
            ),
        },
    )
    run = run_gate(repo, "run", "--no-baseline", "--json", "reports/map.json")
    assert run.returncode == 1, run
    document = json.loads((repo / "reports/map.json").read_text())
    regions = {r["name"]: r["transfers"] for r in document["suites"][0]["regions"]}

    def found(name: str) -> list[tuple[object, ...]]:
        return sorted(
            (t["argument"], t["dtype"], tuple(t["shape"] or ()), t["per_step"], t["first_call"])
            for t in regions[name]
            if t["direction"] == "host-to-device"
        )

    # JAX moved the keywords in the signature's order here: named as it moved them.
    assert found("keywords") == [
        ("lr", "float32", (), 1, 1),
        ("x", "float32", (2,), 1, 1),
        ("y", "float32", (4, 3), 1, 1),
    ], run
    # Each turn of the loop moves its own array every step, not the first one three times.
    loop = [t for t in found("loop") if t[2] != ()]
    assert loop == [(None, "float32", (8, n), 1, 1) for n in (4, 5, 6)], run
    # The one-time upload stays a first-call finding. The warm move beside it does not match
    # the first call's moves, so it borrows no array from them; it is the library's
    # `p * 3.0`, whose operand names it (`gate.witness.operands`): float32[], every step.
    once = [t for t in regions["once-then-every"] if t["direction"] == "host-to-device"]
    by_array = {
        (t["dtype"], tuple(t["shape"]) if t["shape"] is not None else None): t for t in once
    }
    assert set(by_array) == {("float32", (100,)), ("float32", ())}, run
    assert by_array[("float32", (100,))]["per_step"] == 0, run
    assert by_array[("float32", (100,))]["first_call"] == 1, run
    assert by_array[("float32", ())]["undescribed"] is False, run
    assert by_array[("float32", ())]["per_step"] == 1, run


TWO_ARGUMENTS = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def update(p, x, y):
    return p + x.sum() + y.sum()


SMALL = np.ones((256, 64), np.float32)
HUGE = np.ones((100000, 64), np.float32)


def setup():
    return jax.device_put(jnp.zeros(())), jax.device_put(jnp.ones((256, 64)))


SWAPPED = False


def step(p, on_device):
    x, y = (on_device, HUGE) if SWAPPED else (SMALL, on_device)
    return update(p, x, y)  # the accepted move: x
"""


@pytest.mark.once
def test_the_baseline_fails_a_swapped_argument_of_the_same_dtype_and_feature_shape(
    tmp_path: Path,
) -> None:
    # x was accepted; now y moves instead, with x's dtype and trailing dims (and
    # 400x the bytes): the named argument tells them apart, so it fails as new.
    repo = make_repo(
        tmp_path, {"two.py": TWO_ARGUMENTS, "policies/p.yaml": SWAP_POLICY.replace("swap:", "two:")}
    )
    assert run_gate(repo, "baseline").returncode == 0
    [entry] = json.loads((repo / "policies/transfer-gate-baseline.json").read_text())["accepted"]
    assert entry["array"] == "x float32[*,64]"
    assert run_gate(repo, "run").returncode == 0
    code = repo / "two.py"
    # Only the flag changes: the call's line, its text and its count stay the same.
    code.write_text(TWO_ARGUMENTS.replace("SWAPPED = False", "SWAPPED = True"))
    swapped = run_gate(repo, "run")
    assert swapped.returncode == 1, swapped
    assert "new since the baseline: implicit host-to-device transfer of argument 'y' " in (
        swapped.stdout
    )


# --- an eager operator's host operand ------------------------------------------------------------


def _accuracies(train: object, test: object) -> tuple[object, object]:
    import jax

    def scaled(train: jax.Array, test: jax.Array) -> tuple[jax.Array, jax.Array]:
        first = train * 100  # the op's first run; JAX describes what it moves
        second = test * 100  # the same op again; jit's fast path leaves the move bare
        return first, second

    return scaled(train, test)  # type: ignore[arg-type]


@pytest.mark.parametrize("operands", [True, False], ids=["read", "not-read"])
def test_an_eager_operators_host_operand_names_the_move_the_fast_path_left_bare(
    monkeypatch: pytest.MonkeyPatch, operands: bool
) -> None:
    import jax.numpy as jnp

    import gate.region.region_run
    import gate.witness.transfer_map
    from gate import check_region
    from gate.jaxhooks.internals import InternalMissing
    from gate.witness.operands import Operators

    def missing() -> None:
        raise InternalMissing("pxla.MeshExecutableFastpathData")

    # As on a JAX whose fast path cannot be switched off for the first call: only the
    # operator's own operand can say what its second run moved.
    monkeypatch.setattr(gate.region.region_run, "fast_path_off", missing)
    if not operands:
        monkeypatch.setattr(gate.witness.transfer_map.Operators, "of_this_jax", Operators)

    def setup() -> tuple[object, object]:
        return jnp.ones(()), jnp.ones(())

    result = check_region(_accuracies, setup=setup, warmup=0, guarded_runs=1, repeats=1)
    here = Path(__file__).resolve()
    moves = {
        (t.location.line, t.dtype, t.shape, t.undescribed)
        for t in result.transfers
        if t.location is not None and t.phase.value == "steady state"
    }
    first, second = (line_of(here, f"# the {marker}") for marker in ("op's first", "same op"))
    assert (first, "int32", (), False) in moves, result.transfers
    if operands:
        assert (second, "int32", (), False) in moves, result.transfers
    else:  # what the reader got before: the line and the count, no array
        assert (second, None, None, True) in moves, result.transfers
