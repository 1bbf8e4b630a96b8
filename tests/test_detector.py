"""The device-to-host detector on the CPU backend, where JAX's guard sees no fetch."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from jax_scripts import line_of, run_script

# Each function reads a fresh array in one way, on the marked line.
READS = """
import threading

import jax
import numpy as np
from jax import device_get


def do_print(x):
    print(x)  # <- print


def do_str(x):
    return str(x)  # <- str


def do_repr(x):
    return repr(x)  # <- repr


def do_format(x):
    return f"{x}"  # <- format


def do_float(x):
    return float(x)  # <- float


def do_int(x):
    return int(x)  # <- int


def do_bool(x):
    return bool(x)  # <- bool


def do_tolist(x):
    return x.tolist()  # <- tolist


def do_item(x):
    return x.item()  # <- item


def do_asarray(x):
    return np.asarray(x)  # <- asarray


def do_array(x):
    return np.array(x)  # <- array


def do_device_get(x):
    return jax.device_get(x)  # <- device_get


def do_imported_device_get(x):
    return device_get(x)  # <- imported device_get


def do_copy_to_host_async(x):
    x.copy_to_host_async()  # <- copy_to_host_async


def do_api_copy_to_host_async(x):
    jax.copy_to_host_async({"x": x})  # <- api copy_to_host_async


def do_api_tree_copy(x):
    jax.copy_to_host_async({"x": x, "y": x + 1})  # <- api tree copy


def do_twice(x):
    float(x)  # <- first read
    float(x)  # <- second read


def do_copy_then_read(x):
    x.copy_to_host_async()  # <- async copy
    return np.asarray(x), str(x)  # <- reads the copy


def do_in_thread(x):
    worker = threading.Thread(target=lambda: float(x), name="loader")  # <- thread
    worker.start()
    worker.join()


def do_jnp_only(x):
    return (x * 2).sum()  # no read: stays on the device
"""

SCALAR_READS = {"float", "int", "bool", "item", "twice", "in_thread"}

# What each read reports as "what the host did with it".
EXPECTED_WHAT = {
    "print": "__str__",
    "str": "__str__",
    "repr": "__repr__",
    "format": "__format__",
    "float": "__float__",
    "int": "__int__",
    "bool": "__bool__",
    "tolist": "tolist",
    "item": "item",
    "asarray": "__array__",
    "array": "__array__",
    "device_get": "device_get",
    "imported device_get": "device_get",
    "copy_to_host_async": "copy_to_host_async",
    "api copy_to_host_async": "copy_to_host_async",
}

DRIVER = """
from pathlib import Path

import jax
import jax.numpy as jnp
from jax._src import config as jax_config

import reads
from gate.witness import detector, fetches
from gate.user_code import UserCode

code = UserCode(Path(".").resolve())

# Pin the classification to JAX's own: jax.device_get sets a thread-local
# flag that the guard reads (config.explicit_device_get_scope).
agreement = []
record = fetches.FetchLog._record


def checked_record(self, array, frames, explicit, *rest, **named):
    agreement.append(explicit == jax_config.guard_lib.thread_local_state().explicit_device_get)
    return record(self, array, frames, explicit, *rest, **named)


fetches.FetchLog._record = checked_record

found = {}
for name in NAMES:
    x = jnp.asarray(1.5) if name in SCALARS else jnp.arange(6.0).reshape(2, 3)
    fn = getattr(reads, "do_" + name.replace(" ", "_"))
    with detector.detect_fetches(code, lambda: None) as log:
        fn(x)
    found[name] = {
        "fetches": [
            {
                "path": f.location.path if f.location else None,
                "line": f.location.line if f.location else None,
                "what": f.what,
                "explicit": f.explicit,
                "thread": f.thread,
                "dtype": f.dtype,
                "shape": list(f.shape),
                "nbytes": f.nbytes,
            }
            for f in log.fetches
        ],
        "transfers": len(log.fetches),
        "blind_spots": list(log.blind_spots),
    }
emit({"found": found, "agreement": agreement})
"""

NAMES = [*EXPECTED_WHAT, "api tree copy", "twice", "copy_then_read", "in_thread", "jnp_only"]


@pytest.fixture(scope="module")
def reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = tmp_path_factory.mktemp("repo")
    script = f"NAMES = {NAMES!r}\nSCALARS = {sorted(SCALAR_READS)!r}\n" + DRIVER
    result: dict[str, Any] = run_script(repo, {"reads.py": READS}, script)
    return result


@pytest.mark.parametrize("name", list(EXPECTED_WHAT))
def test_each_read_is_one_fetch_at_its_line(reads: dict[str, Any], name: str) -> None:
    found = reads["found"][name]
    (fetch,) = found["fetches"]
    assert (fetch["path"], fetch["line"]) == ("reads.py", line_of(READS, f"# <- {name}"))
    assert fetch["what"] == EXPECTED_WHAT[name]
    assert fetch["explicit"] == (name in ("device_get", "imported device_get"))
    assert fetch["thread"] == "MainThread"
    assert found["blind_spots"] == []


def test_a_fetch_records_dtype_shape_and_size(reads: dict[str, Any]) -> None:
    (fetch,) = reads["found"]["tolist"]["fetches"]
    assert (fetch["dtype"], fetch["shape"], fetch["nbytes"]) == ("float32", [2, 3], 24)


def test_explicit_agrees_with_jax_own_flag(reads: dict[str, Any]) -> None:
    assert reads["agreement"], "no fetch was recorded"
    assert all(reads["agreement"])


def test_a_second_read_of_the_same_array_is_not_a_transfer(reads: dict[str, Any]) -> None:
    # JAX 0.10 keeps no host copy of a zero-copy CPU read; the detector
    # models a GPU's cache, which serves the second read without a transfer.
    found = reads["found"]["twice"]
    assert [f["line"] for f in found["fetches"]] == [line_of(READS, "# <- first read")]
    assert found["transfers"] == 1


def test_a_read_after_copy_to_host_async_reads_the_copy(reads: dict[str, Any]) -> None:
    # On a GPU the async copy is the transfer (the guard checks it); the
    # reads after it are served from the host copy it made.
    found = reads["found"]["copy_then_read"]
    assert [(f["line"], f["what"]) for f in found["fetches"]] == [
        (line_of(READS, "# <- async copy"), "copy_to_host_async")
    ]


def test_an_api_copy_of_a_tree_is_one_fetch_per_array(reads: dict[str, Any]) -> None:
    # JAX 0.12 copies two or more array leaves in one jaxlib call, past the
    # method; the detector still sees each array.
    found = reads["found"]["api tree copy"]
    line = line_of(READS, "# <- api tree copy")
    assert [(f["line"], f["what"], f["explicit"]) for f in found["fetches"]] == [
        (line, "copy_to_host_async", False)
    ] * 2


def test_a_fetch_in_another_thread_is_seen_with_its_line(reads: dict[str, Any]) -> None:
    (fetch,) = reads["found"]["in_thread"]["fetches"]
    assert (fetch["line"], fetch["thread"]) == (line_of(READS, "# <- thread"), "loader")


def test_device_only_work_fetches_nothing(reads: dict[str, Any]) -> None:
    assert reads["found"]["jnp_only"]["fetches"] == []


SHARDED = """
import numpy as np


def read_twice(x):
    np.asarray(x)  # <- gathers both shards and caches the host copy
    np.asarray(x)  # <- served from the cache: no transfer
"""

SHARDED_DRIVER = """
from pathlib import Path

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import sharded
from gate.witness.detector import detect_fetches
from gate.witness.host_copies import host_copy_cached
from gate.user_code import UserCode

mesh = jax.make_mesh((2,), ("d",))
x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec("d")))
cached_before = host_copy_cached(x)
with detect_fetches(UserCode(Path(".").resolve()), lambda: None) as log:
    sharded.read_twice(x)
emit({
    "devices": jax.device_count(),
    "cached_before": cached_before,
    "cached_after": host_copy_cached((x,)),
    "fetches": [(f.location.line, f.what) for f in log.fetches],
})
"""


def test_a_cached_host_copy_is_not_a_fetch(tmp_path: Path) -> None:
    # An array sharded over two CPU devices really is copied to the host,
    # and the copy is cached in _npy_value; reading it again moves nothing.
    result = run_script(
        tmp_path,
        {"sharded.py": SHARDED},
        SHARDED_DRIVER,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
    )
    assert result["devices"] == 2
    assert (result["cached_before"], result["cached_after"]) == (False, True)
    assert result["fetches"] == [[line_of(SHARDED, "# <- gathers"), "__array__"]]


# --- on a GPU: the guard and the detector side by side --------------------------------------------

SIDE_BY_SIDE = """
from pathlib import Path

import jax
import jax.numpy as jnp

import reads
from gate.witness.detector import detect_fetches
from gate.user_code import UserCode, frames_of

assert jax.default_backend() == PLATFORM, jax.default_backend()
code = UserCode(Path(".").resolve())
found = {}
for name in NAMES:
    x = jnp.asarray(1.5) + 0 if name in SCALARS else jnp.arange(6.0).reshape(2, 3) + 0
    guard_line = None
    with detect_fetches(code, lambda: None) as log, jax.transfer_guard_device_to_host("disallow"):
        try:
            getattr(reads, "do_" + name)(x)
        except Exception as exc:
            where = code.locate(frames_of(exc.__traceback__))
            guard_line = where.line if where else -1
    found[name] = {
        "guard": guard_line,
        "detector": [(f.location.line, f.refused is not None) for f in log.fetches],
    }
emit(found)
"""
GPU_READS = ["print", "str", "format", "float", "tolist", "item", "asarray", "copy_to_host_async"]


@pytest.mark.parametrize(
    "platform",
    [
        pytest.param("gpu", marks=pytest.mark.gpu),
        pytest.param("tpu", marks=pytest.mark.tpu),
    ],
)
def test_the_guard_and_the_detector_name_the_same_line_on_an_accelerator(
    tmp_path: Path, platform: str
) -> None:
    # Under disallow the guard raises inside _value: the detector records
    # the refused read, at the line the guard's traceback names. The CPU twin
    # below checks the same with a stand-in guard.
    script = (
        f"NAMES = {GPU_READS!r}\nSCALARS = {sorted(SCALAR_READS)!r}\nPLATFORM = {platform!r}\n"
        + SIDE_BY_SIDE
    )
    found = run_script(tmp_path, {"reads.py": READS}, script)
    for name in GPU_READS:
        line = line_of(READS, f"# <- {name}")
        assert found[name] == {"guard": line, "detector": [[line, True]]}, name


# The same comparison on the CPU, which never refuses a fetch: the guard is played by a `_value`
# and a `copy_to_host_async` that raise JAX's disallow error, as they do on a GPU under disallow.
REFUSED_ON_CPU = """
from pathlib import Path

import jax.numpy as jnp
from jax._src.array import ArrayImpl

import reads
from gate.witness.detector import detect_fetches
from gate.user_code import UserCode, frames_of

STAND_IN = '''
MESSAGE = "INVALID_ARGUMENT: Disallowed device-to-host transfer: aval=ShapedArray(float32[])"
real_value = ArrayImpl.__dict__["_value"]
real_copy = ArrayImpl.__dict__["copy_to_host_async"]

def _value(self):
    if id(self) in refused:
        raise RuntimeError(MESSAGE)
    return real_value.fget(self)

def copy_to_host_async(self):
    if id(self) in refused:
        raise RuntimeError(MESSAGE)
    return real_copy(self)
'''
refused = set()  # ids of the arrays the stand-in guard refuses
# Compiled under a name outside the repository, so that, like JAX's own frames, the stand-in
# is not taken for the user's line.
exec(compile(STAND_IN, "<stand-in guard>", "exec"))
ArrayImpl._value = property(_value)
ArrayImpl.copy_to_host_async = copy_to_host_async
code = UserCode(Path(".").resolve())
found = {}
for name in NAMES:
    x = jnp.asarray(1.5) + 0 if name in SCALARS else jnp.arange(6.0).reshape(2, 3) + 0
    refused.add(id(x))
    guard_line = None
    with detect_fetches(code, lambda: None) as log:
        try:
            getattr(reads, "do_" + name)(x)
        except RuntimeError as exc:
            where = code.locate(frames_of(exc.__traceback__))
            guard_line = where.line if where else -1
    refused.discard(id(x))
    found[name] = {
        "guard": guard_line,
        "detector": [(f.location.line, f.refused) for f in log.fetches],
    }
emit(found)
"""


def test_a_refused_read_is_recorded_at_the_line_the_guard_names(tmp_path: Path) -> None:
    # The CPU twin of the GPU test above: every read it makes, refused inside _value (or
    # copy_to_host_async), is one refused fetch at the line the refusal's traceback names.
    script = f"NAMES = {GPU_READS!r}\nSCALARS = {sorted(SCALAR_READS)!r}\n" + REFUSED_ON_CPU
    found = run_script(tmp_path, {"reads.py": READS}, script)
    message = "INVALID_ARGUMENT: Disallowed device-to-host transfer: aval=ShapedArray(float32[])"
    for name in GPU_READS:
        line = line_of(READS, f"# <- {name}")
        assert found[name] == {"guard": line, "detector": [[line, message]]}, name


# --- in this process: restoring, helpers, failing loudly -----------------------------------------


@pytest.fixture
def jax_state() -> dict[str, Any]:
    """What the detector patches, as it was before the test."""
    import jax
    from jax._src.array import ArrayImpl

    return {
        "value": ArrayImpl.__dict__["_value"],
        "copy_to_host_async": ArrayImpl.__dict__["copy_to_host_async"],
        "device_get": jax.device_get.__code__,
    }


def _assert_restored(state: dict[str, Any]) -> None:
    import jax
    import jax.numpy as jnp
    from jax._src.array import ArrayImpl

    assert ArrayImpl.__dict__["_value"] is state["value"]
    assert ArrayImpl.__dict__["copy_to_host_async"] is state["copy_to_host_async"]
    assert jax.device_get.__code__ is state["device_get"]
    memoryview(jnp.arange(3.0))  # the buffer protocol is back


def _code(tmp_path: Path) -> Any:
    from gate.user_code import UserCode

    return UserCode(tmp_path)


def test_everything_is_restored_after_the_block(tmp_path: Path, jax_state: dict[str, Any]) -> None:
    import jax.numpy as jnp
    from jax._src.array import ArrayImpl

    from gate.witness.detector import detect_fetches

    with detect_fetches(_code(tmp_path), lambda: None):
        assert ArrayImpl.__dict__["_value"] is not jax_state["value"]
        assert ArrayImpl.__dict__["copy_to_host_async"] is not jax_state["copy_to_host_async"]
        with pytest.raises(TypeError):
            memoryview(jnp.arange(3.0))  # NumPy must fall back to __array__
    _assert_restored(jax_state)


def test_everything_is_restored_when_the_block_raises(
    tmp_path: Path, jax_state: dict[str, Any]
) -> None:
    from gate.witness.detector import detect_fetches

    with pytest.raises(ZeroDivisionError), detect_fetches(_code(tmp_path), lambda: None):
        _ = 1 / 0
    _assert_restored(jax_state)


def test_nested_blocks_keep_the_hooks_until_the_last_ends(
    tmp_path: Path, jax_state: dict[str, Any]
) -> None:
    import jax.numpy as jnp

    from gate.witness.detector import detect_fetches

    with detect_fetches(_code(tmp_path), lambda: None) as outer:
        with detect_fetches(_code(tmp_path), lambda: None) as inner:
            float(jnp.float32(1.0) + 1)
        float(jnp.float32(2.0) + 1)
    _assert_restored(jax_state)
    assert (len(outer.fetches), len(inner.fetches)) == (2, 1)


def test_the_boundary_is_asked_in_the_fetching_thread(tmp_path: Path) -> None:
    import jax.numpy as jnp

    from gate.witness.detector import detect_fetches

    local = threading.local()
    local.name = "examples:fetch_metrics"
    with detect_fetches(_code(tmp_path), lambda: getattr(local, "name", None)) as log:
        float(jnp.float32(1.0) + 1)
        worker = threading.Thread(target=lambda: float(jnp.float32(2.0) + 1))
        worker.start()
        worker.join()
    assert [f.boundary for f in log.fetches] == ["examples:fetch_metrics", None]


def test_copy_to_host_async_is_judged_like_a_read(tmp_path: Path) -> None:
    # Explicit inside jax.device_get (which starts with it), implicit
    # otherwise; its boundary and thread are asked as for _value.
    import jax
    import jax.numpy as jnp

    from gate.witness.detector import detect_fetches

    def prefetch() -> None:
        (jnp.float32(3.0) + 1).copy_to_host_async()

    local = threading.local()
    local.name = "examples:fetch_metrics"
    with detect_fetches(_code(tmp_path), lambda: getattr(local, "name", None)) as log:
        (jnp.float32(1.0) + 1).copy_to_host_async()
        jax.device_get(jnp.float32(2.0) + 1)
        worker = threading.Thread(target=prefetch, name="prefetch")
        worker.start()
        worker.join()
    assert [(f.what, f.explicit, f.boundary, f.thread) for f in log.fetches] == [
        ("copy_to_host_async", False, "examples:fetch_metrics", "MainThread"),
        ("device_get", True, "examples:fetch_metrics", "MainThread"),
        ("copy_to_host_async", False, None, "prefetch"),
    ]


def test_fetched_earlier_and_reused_inputs(tmp_path: Path) -> None:
    import jax.numpy as jnp

    from gate.witness.detector import detect_fetches
    from gate.witness.host_copies import reused_leaves, same_objects

    params, batch = jnp.ones(3), jnp.zeros(3)
    with detect_fetches(_code(tmp_path), lambda: None) as log:
        float(params[0])
        params.tolist()
    assert log.fetched_earlier({"p": params})
    assert not log.fetched_earlier((batch,))
    new_batch = jnp.zeros(3)
    assert same_objects(((params, batch), {}), ((params, new_batch), {}))
    assert reused_leaves(((params, batch), {}), ((params, new_batch), {})) == ("[0][0]",)
    assert not same_objects(((params, batch), {}), ((jnp.ones(3), new_batch), {}))


def test_a_read_that_raises_is_recorded_as_refused(tmp_path: Path) -> None:
    # On GPU the guard refuses a fetch by raising inside _value; a deleted
    # array raises there on every backend.
    import jax.numpy as jnp

    from gate.levels import Direction
    from gate.results.records import Phase
    from gate.witness.detector import detect_fetches
    from gate.witness.host_copies import host_copy_cached

    x = jnp.arange(3.0) + 1
    x.delete()
    with detect_fetches(_code(tmp_path), lambda: None) as log:
        with pytest.raises(RuntimeError, match="deleted"):
            x.tolist()
        assert not log.fetched_earlier(x)
        assert not host_copy_cached(x)  # a refused read caches nothing
        with pytest.raises(RuntimeError, match="deleted"):
            x.tolist()  # so trying again is another attempt
    fetch, _ = log.fetches
    assert fetch.refused is not None
    assert "deleted" in fetch.refused
    transfer = fetch.as_transfer(Phase.STEADY_STATE, failing=True)
    assert transfer.direction is Direction.DEVICE_TO_HOST
    assert transfer.describe() == "device-to-host float32[3]"
    assert "refused: " in transfer.message


def test_a_single_device_cpu_array_never_caches_a_host_copy() -> None:
    import jax.numpy as jnp

    from gate.witness.host_copies import host_copy_cached

    x = jnp.arange(3.0)
    x.tolist()
    # Zero-copy on CPU: nothing cached, and no watched read to model a cache.
    assert not host_copy_cached({"x": x, "n": 3})


def test_a_watched_read_counts_as_a_host_copy_in_every_later_block(tmp_path: Path) -> None:
    # As a GPU caches the host copy of an array read once (in setup, say),
    # the detector counts an array read in one block as cached in the next:
    # the step's read of it moves nothing.
    import jax.numpy as jnp
    import numpy as np

    from gate.witness.detector import detect_fetches
    from gate.witness.host_copies import host_copy_cached

    read, copied, fresh = jnp.arange(3.0), jnp.arange(4.0), jnp.arange(5.0)
    with detect_fetches(_code(tmp_path), lambda: None) as setup:
        np.asarray(read)  # NumPy's zero-copy buffer read, on CPU
        copied.copy_to_host_async()
    assert len(setup.fetches) == 2
    assert host_copy_cached((read, copied))
    assert not host_copy_cached({"fresh": fresh})
    with detect_fetches(_code(tmp_path), lambda: None) as step:
        np.asarray(read)
        float(read[0])  # a new array: a transfer of its own
        copied.tolist()
        copied.copy_to_host_async()
        str(fresh)
    assert [(f.what, f.shape) for f in step.fetches] == [("__float__", ()), ("__str__", (5,))]


def test_a_missing_hook_fails_loudly_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jax_state: dict[str, Any]
) -> None:
    import jax
    from jax._src.array import ArrayImpl

    from gate.witness.detector import detect_fetches
    from gate.witness.fetches import DetectorUnavailable

    monkeypatch.setattr(ArrayImpl, "_value", lambda self: None)
    with (
        pytest.raises(DetectorUnavailable, match=r"_value is no longer a property"),
        detect_fetches(_code(tmp_path), lambda: None),
    ):
        pytest.fail("the block must not run")
    assert jax.device_get.__code__ is jax_state["device_get"]
    monkeypatch.undo()
    _assert_restored(jax_state)


def test_a_typed_prng_key_does_not_hide_a_cached_copy_beside_it(tmp_path: Path) -> None:
    # A key has no host copy of its own; it must neither stop the look at the
    # other leaves nor count as cached (it used to end the check for the whole tree).
    import jax
    import jax.numpy as jnp
    import numpy as np

    from gate.witness.detector import detect_fetches
    from gate.witness.host_copies import host_copy_cached

    key = jax.random.key(0)
    fresh, read = jnp.arange(3.0) + 1, jnp.arange(4.0) + 1
    with detect_fetches(_code(tmp_path), lambda: None):
        np.asarray(read)
    assert not host_copy_cached((key, fresh))
    assert host_copy_cached((key, read))
    assert host_copy_cached({"rngs": key, "x": read})
