"""gate.jaxhooks on its own: the guard, interposition, patches and the buffer slot; every hook
checked when installed (refused with one line naming the JAX version) and on restore (what
it removes must still be its own)."""

from __future__ import annotations

import functools
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from gate.jaxhooks import internals, interpose
from gate.jaxhooks.guard import (
    Refusal,
    full_tracebacks,
    guard_kept_by_the_gate,
    guarded,
    parse_refusal,
)
from gate.jaxhooks.guard_text import parse_aval
from gate.jaxhooks.internals import InternalMissing
from gate.jaxhooks.interpose import interposed, is_trampoline_frame
from gate.jaxhooks.patches import attribute_replaced
from gate.levels import Direction, GuardLevel, GuardSpec

# --- guard.py: reading JAX's messages ------------------------------------------------------------


def test_the_aval_gives_dtype_and_shape_where_the_message_has_one() -> None:
    assert parse_aval("aval=ShapedArray(float32[8,4]), dst_sharding=...") == ("float32", (8, 4))
    assert parse_aval("aval=ShapedArray(int32[], weak_type=True)") == ("int32", ())
    assert parse_aval("aval=ShapedArray(bfloat16[2, 3])") == ("bfloat16", (2, 3))
    assert parse_aval("device-to-host transfer") == (None, None)


def test_a_disallowed_transfer_is_told_from_any_other_error() -> None:
    exc = RuntimeError(
        "INVALID_ARGUMENT: Disallowed host-to-device transfer: aval=ShapedArray(float32[8]), "
        "dst_sharding=SingleDeviceSharding(device=CpuDevice(id=0))"
    )
    assert parse_refusal(exc) == Refusal(Direction.HOST_TO_DEVICE, "float32", (8,))
    undescribed = RuntimeError("Disallowed device-to-host transfer")
    assert parse_refusal(undescribed) == Refusal(Direction.DEVICE_TO_HOST, None, None)
    assert parse_refusal(ValueError("shapes (3,) and (4,) do not match")) is None


# --- guard.py: entering and leaving JAX's guard --------------------------------------------------

_GUARD_CONFIG = (
    "jax_transfer_guard",
    "jax_transfer_guard_host_to_device",
    "jax_transfer_guard_device_to_host",
    "jax_transfer_guard_device_to_device",
)


def _guard_config() -> dict[str, Any]:
    import jax

    return {name: getattr(jax.config, name) for name in _GUARD_CONFIG}


@pytest.mark.jaxhooks
def test_guarded_disallows_in_the_block_and_restores_every_level_after() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    before = _guard_config()
    spec = GuardSpec(GuardLevel.DISALLOW, GuardLevel.LOG, GuardLevel.ALLOW)
    with guarded(spec):
        assert jax.config.jax_transfer_guard_host_to_device == "disallow"
        assert jax.config.jax_transfer_guard_device_to_host == "log"
        with pytest.raises(RuntimeError) as raised:
            jax.block_until_ready(jnp.zeros(()) + np.float32(1))
    violation = parse_refusal(raised.value)
    assert violation is not None
    assert violation.direction is Direction.HOST_TO_DEVICE
    assert _guard_config() == before

    def interrupted() -> None:
        with guarded(spec):
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        interrupted()
    assert _guard_config() == before


@pytest.mark.jaxhooks
def test_guarded_sets_the_global_levels_too_so_new_threads_obey() -> None:
    import jax

    seen: dict[str, Any] = {}

    def worker() -> None:
        seen["level"] = jax.config.jax_transfer_guard_host_to_device

    with guarded(GuardSpec.uniform(GuardLevel.DISALLOW)):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert seen["level"] == "disallow"
    with guarded(GuardSpec.uniform(GuardLevel.DISALLOW), global_too=False):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert seen["level"] != "disallow"


@pytest.mark.jaxhooks
def test_full_tracebacks_turns_filtering_off_and_back() -> None:
    import jax

    before = jax.config.values["jax_traceback_filtering"]
    during = []

    def interrupted() -> None:
        with full_tracebacks():
            during.append(jax.config.values["jax_traceback_filtering"])
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        interrupted()
    assert during == ["off"]
    assert jax.config.values["jax_traceback_filtering"] == before


def _setter_codes() -> list[types.CodeType]:
    import jax

    state_call, update = internals.guard_setters()
    assert state_call is not None
    assert update is not None
    return [jax.transfer_guard.__code__, state_call.__code__, update.__code__]


def _never_unkept(why: str) -> None:
    raise AssertionError(f"every guard setter of this JAX must be within the gate's reach: {why}")


@pytest.mark.jaxhooks
def test_the_guard_stays_as_the_gate_set_it_whatever_the_user_code_asks() -> None:
    import jax

    before = _setter_codes()
    loosened: list[tuple[str, int]] = []
    this_file = __file__

    def on_loosen(what: str, frame: types.FrameType) -> None:
        loosened.append((what, frame.f_lineno))

    with (
        guarded(GuardSpec.uniform(GuardLevel.DISALLOW)),
        guard_kept_by_the_gate(lambda filename: filename == this_file, on_loosen, _never_unkept),
    ):
        with jax.transfer_guard("allow"):
            assert jax.config.jax_transfer_guard_host_to_device == "disallow"
        with jax.transfer_guard_device_to_host("allow"):
            assert jax.config.jax_transfer_guard_device_to_host == "disallow"
        jax.config.update("jax_transfer_guard_host_to_device", "allow")
        assert jax.config.jax_transfer_guard_host_to_device == "disallow"
        jax.config.update("jax_enable_x64", False)  # not the guard: goes through
    assert [what for what, _ in loosened] == [
        "jax.transfer_guard('allow')",
        "jax_transfer_guard_device_to_host('allow')",
        "jax.config.update('jax_transfer_guard_host_to_device', ...)",
    ]
    assert all(line > 0 for _, line in loosened)
    assert _setter_codes() == before


@pytest.mark.jaxhooks
def test_the_gate_s_own_calls_to_the_guard_go_through() -> None:
    import jax

    loosened: list[str] = []
    with guard_kept_by_the_gate(
        lambda filename: False, lambda what, frame: loosened.append(what), _never_unkept
    ):
        with guarded(GuardSpec.uniform(GuardLevel.LOG)):
            assert jax.config.jax_transfer_guard_host_to_device == "log"
        with jax.transfer_guard("disallow"):
            assert jax.config.jax_transfer_guard_device_to_host == "disallow"
    assert loosened == []


@pytest.mark.jaxhooks
def test_a_setter_this_jax_moved_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax

    import gate.jaxhooks.guard

    monkeypatch.setattr(gate.jaxhooks.guard, "guard_setters", lambda: (None, None))
    loosened: list[str] = []
    unkept: list[str] = []
    this_file = __file__
    with (
        guard_kept_by_the_gate(
            lambda filename: filename == this_file,
            lambda what, frame: loosened.append(what),
            unkept.append,
        ),
        jax.transfer_guard("allow"),
    ):
        pass
    assert loosened == ["jax.transfer_guard('allow')"]
    # What the gate cannot keep is said, never skipped in silence.
    assert len(unkept) == 2, unkept
    assert "jax.transfer_guard_<direction>(...) is out of the gate's reach" in unkept[0]
    assert 'jax.config.update("jax_transfer_guard...", ...)' in unkept[1]


# --- interpose.py --------------------------------------------------------------------------------


def _double(x: int, *, by: int = 2) -> int:
    return x * by


def _recording(calls: list[Any]) -> interpose.Wrapper:
    def wrapper(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Frame 1 is the dispatcher; frame 2 the trampoline that replaced the code.
        calls.append((args, kwargs, is_trampoline_frame(sys._getframe(2).f_code.co_filename)))
        return original(*args, **kwargs) + 1

    return wrapper


def test_every_reference_goes_through_the_wrapper_and_the_code_comes_back() -> None:
    held = _double  # a reference taken before, as `from module import fn` takes one
    saved = _double.__code__
    calls: list[Any] = []
    with interposed(_double, _recording(calls)):
        assert held(3) == 7
        assert _double(3, by=3) == 10
        assert _double.__kwdefaults__ == {"by": 2}
    assert calls == [((3,), {}, True), ((3,), {"by": 3}, True)]
    assert _double.__code__ is saved
    assert held(3) == 6
    assert not hasattr(__import__("builtins"), "__transfer_gate_dispatch__")


def test_the_code_comes_back_when_the_block_raises() -> None:
    saved = _double.__code__
    with pytest.raises(ZeroDivisionError), interposed(_double, _recording([])):
        _ = 1 / 0
    assert _double.__code__ is saved


def test_a_closure_keeps_its_free_variables() -> None:
    factor = 5

    def scaled(x: int) -> int:
        return x * factor

    calls: list[Any] = []
    with interposed(scaled, _recording(calls)):
        assert scaled(2) == 11
    assert scaled(2) == 10
    assert len(calls) == 1


def test_nested_interpositions_of_one_function_unwind_in_order() -> None:
    saved = _double.__code__
    outer: list[Any] = []
    inner: list[Any] = []
    with interposed(_double, _recording(outer)):
        with interposed(_double, _recording(inner)):
            assert _double(1) == 4  # inner wrapper (+1) around outer wrapper (+1)
        assert _double(1) == 3
    assert (len(outer), len(inner)) == (2, 1)
    assert _double.__code__ is saved


@pytest.fixture
def routes_left() -> Any:
    """Drop the routes a refused restore leaves behind (on purpose), after the test."""
    import builtins

    before = dict(interpose._routes)
    yield
    interpose._routes.clear()
    interpose._routes.update(before)
    if not before and hasattr(builtins, interpose._DISPATCH):
        delattr(builtins, interpose._DISPATCH)


@pytest.mark.usefixtures("routes_left")
def test_restoring_refuses_to_clobber_code_someone_else_put_in() -> None:
    def theirs(x: int, *, by: int = 2) -> int:
        return -x

    saved = _double.__code__
    try:
        with (
            pytest.raises(AssertionError, match=rf"^{_double.__module__}\._double was re-coded"),
            interposed(_double, _recording([])),
        ):
            _double.__code__ = theirs.__code__
        assert _double.__code__ is theirs.__code__  # theirs stays
    finally:
        _double.__code__ = saved


@pytest.mark.usefixtures("routes_left")
def test_an_interposition_left_out_of_order_is_refused_not_clobbered() -> None:
    # Patch over our patch: the outer block ends while the inner one is still in place.
    saved = _double.__code__
    outer = interposed(_double, _recording([]))
    inner = interposed(_double, _recording([]))
    outer.__enter__()
    inner.__enter__()
    inner_code = _double.__code__
    with pytest.raises(AssertionError, match=r"_double was re-coded by someone else"):
        outer.__exit__(None, None, None)
    assert _double.__code__ is inner_code
    assert _double(1) == 4  # the inner patch still calls through the outer one
    inner.__exit__(None, None, None)
    _double.__code__ = saved


# --- patches.py ----------------------------------------------------------------------------------


class _Owner:
    def method(self) -> str:
        return "original"


def test_an_attribute_is_replaced_for_the_block_and_put_back() -> None:
    original = _Owner.__dict__["method"]
    during = []

    def interrupted() -> None:
        with attribute_replaced(_Owner, "method", lambda self: "patched", label="_Owner.method"):
            during.append(_Owner().method())
            raise KeyError

    with pytest.raises(KeyError):
        interrupted()
    assert during == ["patched"]
    assert _Owner.__dict__["method"] is original


def test_restoring_an_attribute_someone_replaced_raises_naming_it() -> None:
    original = _Owner.__dict__["method"]

    def theirs(self: _Owner) -> str:
        return "theirs"

    try:
        with (
            pytest.raises(AssertionError, match=r"^_Owner\.method was replaced by someone else"),
            attribute_replaced(_Owner, "method", lambda self: "ours", label="_Owner.method"),
        ):
            _Owner.method = theirs  # type: ignore[method-assign]
        assert _Owner().method() == "theirs"
    finally:
        _Owner.method = original  # type: ignore[method-assign]


# --- slots.py ------------------------------------------------------------------------------------


@pytest.mark.jaxhooks
def test_the_buffer_slot_is_found_only_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from gate.jaxhooks.slots import BufferSlot, buffer_slot

    found = buffer_slot(internals.array_type())
    assert isinstance(found, BufferSlot)
    assert found.type_name == "ArrayImpl"
    assert buffer_slot(int) == "int exports no buffer"
    monkeypatch.setattr(sys, "implementation", types.SimpleNamespace(name="pypy"))
    assert buffer_slot(bytearray) == "pypy is not CPython"


@pytest.mark.jaxhooks
@pytest.mark.pythons  # the slot is swapped with ctypes in CPython's own type layout
def test_the_buffer_export_is_off_for_the_block_and_refused_back_if_swapped() -> None:
    import jax.numpy as jnp

    from gate.jaxhooks.slots import BufferSlot, buffer_export_off, buffer_slot

    slot = buffer_slot(internals.array_type())
    assert isinstance(slot, BufferSlot)
    saved = slot.word.value
    with buffer_export_off(slot), pytest.raises(TypeError):
        memoryview(jnp.arange(3.0))
    memoryview(jnp.arange(3.0))
    with (
        pytest.raises(AssertionError, match=r"ArrayImpl's tp_as_buffer slot was swapped"),
        buffer_export_off(slot),
    ):
        slot.word.value = saved  # someone else puts a pointer of theirs there
    assert slot.word.value == saved
    memoryview(jnp.arange(3.0))


# --- internals.py: each hook checked when installed ----------------------------------------------


def _version() -> str:
    import jax

    return str(jax.__version__)


def _code(tmp_path: Path) -> Any:
    from gate.user_code import UserCode

    return UserCode(tmp_path)


@pytest.mark.jaxhooks
def test_the_internals_the_gate_needs_are_there_in_this_jax() -> None:
    import jax

    array_impl = internals.array_type()
    internals.check_host_value(array_impl)
    assert isinstance(internals.value_property(array_impl), property)
    assert isinstance(internals.copy_to_host_async_method(array_impl), types.FunctionType)
    assert isinstance(internals.format_print_callback(), types.FunctionType)
    assert all(isinstance(fn, types.FunctionType) for fn in internals.guard_setters())
    assert internals.host_value(jax.numpy.arange(3.0)) is None  # never read: no host copy
    info = internals.jit_info(jax.jit(_double, static_argnames="by"))
    assert info is not None
    assert tuple(info.static_argnames) == ("by",)
    assert internals.jit_info(_double) is None
    pjit, tracer = internals.jit_tracing()
    assert callable(pjit._infer_params)
    assert not isinstance(jax.numpy.ones(2), tracer)  # a concrete array is not inside a trace


@pytest.mark.jaxhooks
def test_a_moved_array_module_is_refused_with_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.witness.detector import detect_fetches
    from gate.witness.fetches import DetectorUnavailable

    monkeypatch.setitem(sys.modules, "jax._src.array", None)  # as if JAX moved it
    with (
        pytest.raises(DetectorUnavailable) as refused,
        detect_fetches(_code(tmp_path), lambda: None),
    ):
        pytest.fail("the block must not run")
    text = str(refused.value)
    assert text.startswith(f"jax {_version()} has no jax._src.array.ArrayImpl (")
    assert text.endswith("): device-to-host fetches cannot be watched")
    assert "\n" not in text


@pytest.mark.jaxhooks
def test_an_array_type_without_a_host_copy_is_refused_with_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.witness.detector import detect_fetches
    from gate.witness.fetches import DetectorUnavailable

    with pytest.raises(InternalMissing, match=r"^ArrayImpl has no _npy_value$"):
        internals.check_host_value(type("ArrayImpl", (), {}))
    monkeypatch.setattr(internals, "array_type", lambda: type("ArrayImpl", (), {}))
    with (
        pytest.raises(DetectorUnavailable) as refused,
        detect_fetches(_code(tmp_path), lambda: None),
    ):
        pytest.fail("the block must not run")
    assert str(refused.value) == (
        f"jax {_version()}: ArrayImpl has no _npy_value; a cached host copy cannot be told "
        "from a fetch"
    )


@pytest.mark.jaxhooks
def test_a_value_that_is_no_property_is_refused_with_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.witness.detector import detect_fetches
    from gate.witness.fetches import DetectorUnavailable

    monkeypatch.setattr(internals.array_type(), "_value", lambda self: None)
    with (
        pytest.raises(DetectorUnavailable) as refused,
        detect_fetches(_code(tmp_path), lambda: None),
    ):
        pytest.fail("the block must not run")
    assert str(refused.value) == (
        f"jax {_version()}: ArrayImpl._value is no longer a property (function); "
        "device-to-host fetches cannot be watched"
    )


@pytest.mark.jaxhooks
def test_a_device_get_that_cannot_be_interposed_is_refused_with_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jax

    from gate.witness.detector import detect_fetches
    from gate.witness.fetches import DetectorUnavailable

    monkeypatch.setattr(jax, "device_get", functools.partial(jax.device_get))
    with (
        pytest.raises(DetectorUnavailable) as refused,
        detect_fetches(_code(tmp_path), lambda: None),
    ):
        pytest.fail("the block must not run")
    assert str(refused.value) == (
        f"jax {_version()}: jax.device_get is a partial, not a Python function; explicit "
        "fetches cannot be told from implicit ones"
    )


@pytest.mark.jaxhooks
def test_a_copy_method_with_another_signature_is_a_named_blind_spot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.witness.detector import detect_fetches

    array_impl = internals.array_type()

    def copy_to_host_async(self: Any, stream: Any) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(array_impl, "copy_to_host_async", copy_to_host_async)
    with detect_fetches(_code(tmp_path), lambda: None) as log:
        assert array_impl.__dict__["copy_to_host_async"] is copy_to_host_async  # not wrapped
    assert log.blind_spots[-1] == (
        "x.copy_to_host_async() (ArrayImpl.copy_to_host_async(self) changed its signature "
        f"in jax {_version()})"
    )


@pytest.mark.jaxhooks
def test_a_print_runner_with_another_signature_is_refused_with_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jax._src import debugging

    from gate.witness.callbacks import CallbackHookMissing, count_callbacks

    def runner(text: str, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(debugging, "_format_print_callback", runner)
    with pytest.raises(CallbackHookMissing) as refused, count_callbacks(_code(tmp_path)):
        pytest.fail("the block must not run")
    assert str(refused.value) == (
        f"jax {_version()} lacks what the callback counter interposes: "
        "jax._src.debugging._format_print_callback(fmt, ...) (its signature changed)"
    )


@pytest.mark.jaxhooks
def test_the_optional_internals_answer_none_where_jax_lacks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jax
    import jax._src.lib
    from jax._src import xla_bridge

    monkeypatch.setattr(xla_bridge, "_backend_errors", None, raising=False)
    assert internals.backend_errors() is None
    monkeypatch.delattr(jax._src.lib, "utils")
    assert not internals.set_cpp_log_level(1)
    monkeypatch.setitem(sys.modules, "jax._src.lib", None)
    assert internals.cuda_versions_module() is None
    monkeypatch.setattr(jax, "copy_to_host_async", lambda tree: tree)  # not `x` any more
    assert internals.copy_tree_function() is None


# --- restoring: what a patch removes must still be its own ---------------------------------------


@pytest.mark.jaxhooks
def test_the_detector_refuses_to_remove_a_value_patched_over_its_own(tmp_path: Path) -> None:
    import jax

    from gate.witness.detector import detect_fetches

    array_impl = internals.array_type()
    original = array_impl.__dict__["_value"]
    copy_method = array_impl.__dict__["copy_to_host_async"]
    device_get_code = jax.device_get.__code__
    theirs = property(original.fget)
    try:
        with (
            pytest.raises(AssertionError, match=r"^ArrayImpl\._value was replaced by someone"),
            detect_fetches(_code(tmp_path), lambda: None),
        ):
            array_impl._value = theirs
        assert array_impl.__dict__["_value"] is theirs
    finally:
        array_impl._value = original
    # Every other hook was still put back.
    assert jax.device_get.__code__ is device_get_code
    assert array_impl.__dict__["copy_to_host_async"] is copy_method
    memoryview(jax.numpy.arange(3.0))


@pytest.mark.jaxhooks
@pytest.mark.usefixtures("routes_left")
def test_the_callback_counter_refuses_to_remove_an_entry_point_recoded_over_its_own(
    tmp_path: Path,
) -> None:
    import jax

    from gate.witness.callbacks import count_callbacks

    saved = jax.pure_callback.__code__

    def theirs(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never called")

    name = f"{jax.pure_callback.__module__}.{jax.pure_callback.__qualname__}"
    try:
        with (
            pytest.raises(AssertionError, match=rf"^{name} was re-coded by someone else"),
            count_callbacks(_code(tmp_path)),
        ):
            jax.pure_callback.__code__ = theirs.__code__
        assert jax.pure_callback.__code__ is theirs.__code__
    finally:
        jax.pure_callback.__code__ = saved
    assert jax.debug.print.__code__ is not theirs.__code__


# --- static_misses.py: the static argument jax 0.12's cache-miss log leaves out ----------------


@pytest.mark.jaxhooks
def test_a_changed_static_argument_is_explained_alike_on_every_jax() -> None:
    # jax 0.10 says it itself; on jax 0.12 the gate's wrapper of diff_tracing_cache_keys does.
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import partial_eval

    from gate.jaxhooks.compiles import watching_compiles
    from gate.witness.recompiles import explain

    @functools.partial(jax.jit, static_argnums=1, static_argnames="m")
    def scale(x: Any, n: int, m: object = 1) -> Any:
        return x * n * len(str(m))

    original = partial_eval.diff_tracing_cache_keys
    x = jnp.ones(3)
    with watching_compiles() as watch:
        scale(x, 1, m=1)
        with watch.counting():
            scale(x, 2, m=1)
            scale(x, 2, m=5)
            scale(x, 2, m="a" * 300)  # a long value is cut
    said = [explain(event.explanations) for event in watch.events]
    assert said[:2] == [
        "static argument [0][1]: 1 before, 2 now",
        "static argument [1]['m']: 1 before, 5 now",
    ], said
    assert said[2] == f"static argument [1]['m']: 1 before, '{'a' * 118}… now", said
    assert partial_eval.diff_tracing_cache_keys is original


@pytest.mark.jaxhooks
def test_the_static_diff_patches_only_a_jax_with_flat_trees_and_leaves_other_answers() -> None:
    from jax._src.interpreters import partial_eval

    from gate.jaxhooks import static_misses

    original = partial_eval.diff_tracing_cache_keys
    has_flat_trees = static_misses._lookup() is not None
    with static_misses.static_values_explained() as patched:
        assert patched is has_flat_trees
        assert (partial_eval.diff_tracing_cache_keys is not original) is has_flat_trees
        unexplained = (static_misses._UNAVAILABLE, 0, "cache miss explanation unavailable")
        wrapper = static_misses._explaining(lambda new, old: unexplained, (int, str, bytes, float))
        # A key of another shape, or no static leaf that differs: JAX's answer stands.
        assert wrapper(None, None) == unexplained
        assert wrapper(((), (3, None), {}), ((), (3, None), {})) == unexplained
        explained = (3, 1, "different input types:\n  * at x, now f32[2] and before f32[1]")
        assert static_misses._explaining(lambda new, old: explained, ())(0, 0) == explained
        # A key of another region's programs (the gate's context value differs, and nothing
        # else of the context) ranks after every answer; the user's own context stands.
        context = (0, 0, "Tracing context doesn't match")
        ranked = static_misses._explaining(lambda new, old: context, None)
        region, other, shared = ("transfer-gate region", 2), ("transfer-gate region", 1), None
        last = static_misses._ANOTHER_REGION
        assert ranked(((True, region), (3, None), {}), ((True, other), (3, None), {}))[0] == last
        assert ranked(((True, region), (3, None), {}), ((True, shared), (3, None), {}))[0] == last
        assert ranked(((True, region), (3, None), {}), ((False, other), (3, None), {})) == context
        assert ranked((("mine", region), (3,), {}), ((None, region), (3,), {})) == context
    assert partial_eval.diff_tracing_cache_keys is original
