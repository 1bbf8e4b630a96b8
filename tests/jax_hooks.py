"""The JAX internals the gate relies on, each with the tests that exercise it through the gate.

conftest.py marks these tests `jaxhooks`, which .ci/run selects to run again on the oldest and
the newest JAX it supports: a test of each hook, not the whole suite. Besides them, only
tests/test_jaxhooks.py (gate.jaxhooks's own tests) marks tests by hand. tests/test_jax_range.py
fails when the gate reaches a JAX internal that no entry here names, when an entry's evidence
is gone from gate/, or when a listed test does not exist.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Hook:
    """One JAX internal: what the gate does with it, how to find that in gate/, and its tests."""

    what: str
    # Module names as gate/ imports them (``from jax._src import config``: "jax._src.config"),
    # or text its source contains for a hook reached through a public name.
    evidence: tuple[str, ...]
    tests: tuple[str, ...]  # "file.py::test_name", every parameter of it
    # The hook reaches Python's own machinery too (a frame and its locals, ctypes, the trace
    # function), which a newer Python may change on the same JAX (3.13's frame locals, PEP
    # 667): its tests are marked `pythons` as well, and run on every Python .ci/run tries. The
    # others read JAX alone: on the newest JAX they run once, on the container's Python.
    python: bool = False


HOOKS = (
    Hook(
        "a pmap's trace info (jax/_src/pmap.py's `wrapped` frame, its infer_params closure's "
        "wrapped_fun.debug_info), so a pmap's program is named by the user's function, not "
        "jit(_fun)",
        ("infer_params", "wrapped_fun", "PMAP_PROGRAM_NAMES"),
        (
            "test_recompiles.py::test_a_pmap_program_is_named_by_the_users_function_not_jaxs_"
            "wrapper",
            "test_library_fixes.py::test_flax_266052cb_a_pmap_per_call_recompiles_and_its_pmean_"
            "only_moved",
        ),
        python=True,
    ),
    Hook(
        "jax 0.12's tracing-cache key diff (partial_eval.diff_tracing_cache_keys) and flattree's "
        "FTStatic & co., so a recompile says which static argument changed",
        (
            "jax._src.flattree",
            "jax._src.interpreters.partial_eval",
            "jax._src.interpreters.partial_eval.",
        ),
        (
            "test_jaxhooks.py::test_a_changed_static_argument_is_explained_alike_on_every_jax",
            "test_jaxhooks.py::test_the_static_diff_patches_only_a_jax_with_flat_trees_and_"
            "leaves_other_answers",
            "test_recompiles.py::test_a_static_argument_that_changes_fails",
        ),
    ),
    Hook(
        "the detector replaces ArrayImpl._value and reads _npy_value, the cached host copy",
        ("jax._src.array.ArrayImpl",),
        (
            "test_detector.py::test_each_read_is_one_fetch_at_its_line",
            "test_detector.py::test_a_cached_host_copy_is_not_a_fetch",
            "test_detector.py::test_a_missing_hook_fails_loudly_and_changes_nothing",
            "test_detector.py::test_everything_is_restored_after_the_block",
            "test_detector.py::test_a_typed_prng_key_does_not_hide_a_cached_copy_beside_it",
            "test_guard_scenarios.py::test_setup_reads_count_as_host_copies_whoever_runs_setup",
            "test_truth.py::test_device_to_host_fetches_fail_at_their_lines_on_cpu",
        ),
    ),
    Hook(
        "ArrayImpl.copy_to_host_async and jax.copy_to_host_async (batched past the method)",
        ("copy_to_host_async",),
        (
            "test_detector.py::test_copy_to_host_async_is_judged_like_a_read",
            "test_detector.py::test_an_api_copy_of_a_tree_is_one_fetch_per_array",
            "test_detector.py::test_a_read_after_copy_to_host_async_reads_the_copy",
        ),
        python=True,
    ),
    Hook(
        "the buffer-protocol slot of jaxlib's array type, swapped with ctypes",
        ("ctypes",),
        (
            "test_jaxhooks.py::test_the_buffer_slot_is_found_only_where_it_is",
            "test_run.py::test_a_step_reading_through_the_buffer_protocol_is_told_why_it_raised",
        ),
        python=True,
    ),
    Hook(
        "jax._src.config's State.__call__ and Config.update, so a step cannot lift its guard",
        ("jax._src.config",),
        ("test_truth.py::test_a_step_cannot_switch_the_guard_off_for_itself",),
    ),
    Hook(
        "the guard's levels and its errors' wording (Disallowed ...: aval=ShapedArray(...))",
        ("Disallowed (?P<direction>",),
        (
            "test_guard_scenarios.py::test_the_scenarios_are_jax_tables",
            "test_guard_scenarios.py::test_the_gate_judges_jax_scenarios_as_jax_does",
            "test_guard_scenarios.py::test_where_the_gate_differs_from_jax_on_purpose",
            "test_run.py::test_numpy_batch_fails_at_its_line",
            "test_run.py::test_python_scalar_in_eager_op_fails",
            "test_run.py::test_uncommitted_device_to_device_move_is_caught",
        ),
    ),
    Hook(
        "jax.monitoring's backend-compile event and the jax_explain_cache_misses log's wording",
        ("/jax/core/compile/backend_compile_duration", "jax_explain_cache_misses"),
        (
            "test_recompiles.py::test_a_shape_that_changes_per_call_fails_naming_the_line_and_the_change",
            "test_recompiles.py::test_a_new_jit_per_call_fails",
            "test_recompiles.py::test_a_static_argument_that_changes_fails",
            "test_recompiles.py::test_the_watch_counts_only_while_counting_and_puts_everything_back",
            "test_recompiles.py::test_a_probe_compile_proves_the_watch_live_and_a_renamed_event_is_"
            "said",
        ),
    ),
    Hook(
        "explicit transfers told apart by their frames in jax/_src (device_put, device_get)",
        ("Path('jax', '_src')",),
        ("test_run.py::test_boundary_is_honoured_under_both_import_styles",),
        python=True,
    ),
    Hook(
        "the guard's log lines on fd 2, with the native thread id, and jaxlib's log level",
        ("jax._src.lib", "absl_set_min_log_level", "device-to-device) transfer"),
        (
            "test_transfer_map.py::test_every_line_with_its_count_under_any_log_level",
            "test_transfer_map.py::test_a_module_that_raises_jaxs_log_level_does_not_blind_the_map",
            "test_truth.py::test_a_transfer_in_a_thread_the_step_starts_fails_at_its_line",
            "test_detector.py::test_a_fetch_in_another_thread_is_seen_with_its_line",
            "test_doctor.py::test_log_level_2_hides_the_guards_lines_but_not_from_the_gate",
        ),
    ),
    Hook(
        "the guard on a mesh: a line per destination device naming the global aval and the "
        "dst_sharding (NamedSharding, GSPMD), @axis avals, JAX 0.12's device-to-host "
        "shape=/dtype= form, and the wording of jit's sharding-mismatch errors",
        ("dst_sharding=", "Sharding passed to jit does not match"),
        (
            "test_mesh_steps.py::test_a_clean_sharded_step_passes_with_nothing_to_say",
            "test_mesh_steps.py::test_a_numpy_batch_fails_once_per_array_saying_where_it_went",
            "test_mesh_steps.py::test_a_host_read_of_a_sharded_value_fails_at_its_line_saying_who_saw_it",
            "test_mesh_steps.py::test_counts_and_bytes_per_step_are_what_jaxs_own_guard_logs",
            "test_mesh_steps.py::test_eight_devices_report_as_many_transfers_per_step_as_one",
            "test_mesh_steps.py::test_device_put_of_a_sharded_array_is_a_round_trip_through_the_host",
            "test_mesh_steps.py::test_the_explicit_looking_sharding_idioms_are_named_uploads",
            "test_mesh_steps.py::test_an_uncommitted_array_is_resharded_once_a_step",
            "test_mesh_steps.py::test_a_sharding_jit_refuses_is_one_error_naming_argument_shardings_and_line",
            "test_mesh_steps.py::test_the_terminal_and_junit_say_where_a_batch_went_and_what_landed",
            "test_mesh_steps.py::test_jax_device_get_of_a_split_array_stays_explicit_in_its_boundary",
        ),
    ),
    Hook(
        "a jitted function's signature and static arguments (PjitFunction._jit_info)",
        ("_jit_info",),
        (
            "test_arguments.py::test_static_arguments_move_nothing",
            "test_jaxhooks.py::test_the_optional_internals_answer_none_where_jax_lacks_them",
        ),
    ),
    Hook(
        "jit's description of the host values it moves, matched to the call's arguments",
        ("jax.dtypes.canonicalize_dtype",),
        (
            "test_arguments.py::test_jax_moves_a_calls_host_values_in_the_order_the_plan_says",
            "test_arguments.py::test_pytree_leaves_are_named_by_their_path_in_jaxs_order",
            "test_transfer_map.py::test_a_jitted_step_names_setups_outputs_by_the_steps_parameters",
        ),
    ),
    Hook(
        "jax.debug.print's runner in jax._src.debugging and the callback entry points",
        ("jax._src.debugging", "io_callback"),
        (
            "test_callbacks.py::test_every_site_is_found_at_its_line_in_order",
            "test_callbacks.py::test_a_missing_entry_point_fails_loudly_and_changes_nothing",
            "test_callbacks.py::test_entry_points_are_restored_after_the_block",
            "test_truth.py::test_a_debug_print_inside_jit_is_reported_at_its_line",
        ),
    ),
    Hook(
        "the backend and its devices (jax.extend.backend), and why a backend failed "
        "(xla_bridge._backend_errors)",
        ("jax.extend.backend.get_backend", "jax._src.xla_bridge"),
        (
            "test_platform.py::test_this_machine_runs_jax_on_the_cpu",
            "test_platform.py::test_several_cpu_devices_are_counted",
            "test_doctor.py::test_doctor_when_jax_cannot_start_the_requested_backend",
            "test_truth.py::test_a_disallowed_direction_nothing_could_check_is_an_error_not_a_pass",
        ),
    ),
    Hook(
        "versions: jaxlib.version, and the CUDA plugin's jax._src.lib.cuda_versions",
        ("jaxlib", "jaxlib.version", "jax._src.lib.cuda_versions", "ctypes.util"),
        (
            "test_doctor.py::test_doctor_on_this_cpu_machine",
            "test_doctor.py::test_cuda_versions_come_from_the_plugins_versions_module",
        ),
        python=True,
    ),
    Hook(
        "JAX's own functions nested in a step traced once per worker: pjit._infer_params "
        "wrapped while a region's programs are entered, core.Tracer telling a call inside a trace",
        ("jax._src.pjit", "jax._src.core"),
        (
            "test_programs.py::test_jaxs_own_nested_functions_are_traced_once_the_users_in_every_"
            "region",
            "test_programs.py::test_a_jax_function_handed_the_users_functions_is_traced_in_every_"
            "region",
            "test_programs.py::test_only_plain_data_lets_a_call_share_its_trace",
            "test_programs.py::test_a_jax_without_the_hook_traces_its_own_functions_in_every_region",
            "test_programs.py::test_verdicts_do_not_depend_on_what_ran_before_in_the_worker",
        ),
        python=True,
    ),
    Hook(
        "the transforms of JAX's own nested traces made once per worker: ad.linearize_jaxpr, "
        "pjit._transpose_jaxpr_fancy and partial_eval._cached_abstract_eval wrapped while a "
        "region's programs are entered, core.Primitive and Jaxpr telling what they are handed",
        ("jax._src.interpreters.ad", "jax._src.interpreters.partial_eval", "jax._src.core"),
        (
            "test_programs.py::test_jaxs_own_traces_are_differentiated_once_the_users_in_every_"
            "region",
            "test_programs.py::test_a_jax_without_the_transforms_hook_differentiates_its_own_in_"
            "every_region",
            "test_programs.py::test_only_a_primitive_whose_rules_are_all_jaxs_shares_its_output_"
            "shapes",
            "test_programs.py::test_verdicts_do_not_depend_on_what_ran_before_in_the_worker",
        ),
    ),
    Hook(
        "a first call's lowering and compiling (pjit._resolve_and_lower, "
        "pxla.MeshComputation.compile) run with the transfer map's sys.settrace function off",
        ("_resolve_and_lower", "MeshComputation"),
        (
            "test_unheard.py::test_jax_lowers_and_compiles_without_the_maps_trace_function",
            "test_unheard.py::test_another_tools_trace_function_stays_on_while_jax_lowers",
            "test_unheard.py::test_a_jax_without_the_hook_lowers_and_compiles_traced_as_before",
            "test_unheard.py::test_under_the_monitor_nothing_is_set_aside",
            "test_unheard.py::test_what_jax_moves_while_lowering_is_charged_to_the_line_that_"
            "called_the_step",
        ),
        python=True,
    ),
    Hook(
        "every program a step runs: jit's C++ fast path off for the cost run and the first call "
        "(pxla.MeshExecutableFastpathData, a jit-key option of the gate's own in _jax.config), its "
        "executions counted "
        "at pxla.ExecuteReplicated.__call__ (the first in the caller's thread, naming its line), "
        "and their cost and memory analysis",
        ("jax._src.interpreters.pxla", "jax._src.lib._jax"),
        (
            "test_costs.py::test_each_function_is_counted_and_the_totals_are_their_sum",
            "test_costs.py::test_twice_the_matmul_work_is_exactly_twice_the_flops",
            "test_costs.py::test_every_call_is_seen_and_the_fast_path_comes_back_after",
            "test_costs.py::test_a_jax_without_the_hook_gives_a_note_not_a_zero",
            "test_costs.py::test_restoring_refuses_to_clobber_a_patch_made_meanwhile",
            "test_costs.py::test_a_program_new_in_the_head_is_named_with_its_line_on_a_passing_"
            "region",
            "test_real_models.py::test_every_move_of_flaxs_mnist_epoch_names_its_array",
        ),
        python=True,
    ),
    Hook(
        "jax.Array's binary operators as Python functions of (self, other) "
        "(ArrayImpl.__mul__ & co., jax._src.numpy.array_methods), whose host operand names the "
        "move jit's fast path logs bare",
        ("array_operator_codes",),
        (
            "test_transfer_map.py::test_an_eager_operators_host_operand_names_the_move_the_fast_"
            "path_left_bare",
            "test_transfer_map.py::test_warm_moves_keep_their_own_arrays_and_names_or_say_they_"
            "are_unknown",
        ),
    ),
    Hook(
        "each program's optimized HLO text (LoadedExecutable.hlo_modules(), else get_hlo_text()) "
        "and the meshes of its shardings (ExecuteReplicated.in_handler/out_handler), read for the "
        "step's collectives, their replica groups in every printed form, unused donations, and "
        "the work and the profiler's op time of each source line",
        ("hlo_modules", "get_hlo_text", "in_handler", "out_handler"),
        (
            "test_line_work.py::test_lines_grown_new_and_gone_are_listed_against_the_base_and_"
            "the_unchanged_counted",
            "test_line_work.py::test_an_op_inside_a_fusion_is_charged_to_its_own_line",
            "test_line_work.py::test_a_scan_body_counts_its_trip_count_at_its_line",
            "test_line_work.py::test_a_slower_step_lists_the_lines_whose_op_time_grew_and_keeps_"
            "its_traces",
            "test_collectives_cli.py::test_each_sharded_step_lists_exactly_its_collectives",
            "test_collectives_cli.py::test_memory_is_per_device_and_shards_shrink_the_arguments",
            "test_collectives_cli.py::test_a_lost_donation_fails_at_its_argument_and_a_kept_one_"
            "passes",
            "test_collectives_cli.py::test_a_changed_spec_fails_naming_the_new_all_gather_its_"
            "bytes_and_axis",
            "test_collectives_cli.py::test_github_annotates_the_new_all_gather_at_its_line_and_"
            "summarises_it",
            "test_collectives_cli.py::test_an_unchanged_sharded_step_passes_against_its_base",
            # One `run --base` on 8 devices serves these: on each JAX it reads the batch's unused
            # donations per device, a lost one and those kept. The module's plain run and its
            # stored baseline read the same programs the same way (5 and 10 s of CPU in each
            # jaxhooks run): they run on the main JAX only.
            "test_donations_cli.py::test_a_dtype_change_that_loses_a_parameters_donation_fails_"
            "against_the_base",
            "test_donations_cli.py::test_a_donation_lost_in_both_trees_does_not_fail_by_default",
        ),
    ),
    Hook(
        "JAX's 'Some donated buffers were not usable' warning, caught with the program and "
        "argument read from mlir.lower_jaxpr_to_module's locals (module_name, arg_names, "
        "sharded_in_avals, donated_args)",
        ("lower_jaxpr_to_module", "Some donated buffers were not usable"),
        (
            "test_collectives_cli.py::test_jaxs_dropped_donation_is_caught_with_its_program_and_"
            "argument_and_put_back",
            "test_collectives_cli.py::test_a_donation_jax_dropped_is_caught_not_printed_and_warns_"
            "under_warn",
            "test_donations_cli.py::test_a_donation_jax_drops_with_its_warning_follows_the_same_"
            "rule",
        ),
        python=True,
    ),
    Hook(
        "the whole chain on real training steps (flax, optax, equinox pytrees of arrays)",
        ("jax.tree_util.tree_flatten_with_path",),
        ("test_real_models.py::test_a_planted_float_of_the_loss_fails_at_its_line",),
    ),
)


def hook_tests(*, python: bool = False) -> frozenset[str]:
    """Every listed test, as "tests/file.py::test_name"; ``python``: those of the hooks that
    reach Python's own machinery only (`Hook.python`)."""
    return frozenset(
        f"tests/{test}" for hook in HOOKS if hook.python or not python for test in hook.tests
    )


# A `pythons` mark in any form: `pytestmark = pytest.mark.pythons` or a test's decorator.
_PYTHONS = re.compile(r"\bpytest\.mark\.pythons\b")


def files_to_collect(tests: Path = TESTS) -> list[str]:
    """The test modules that can hold a `jaxhooks` or `pythons` test: those HOOKS lists,
    tests/test_jaxhooks.py (marked by hand), and every module that writes `pytest.mark.pythons`.

    .ci/run's runs on the oldest and newest JAX collect these alone: pytest imports and
    rewrites every module it is given before `-m` deselects, 10 s of CPU a worker process for
    the whole suite, 5 s for these (`time pytest --collect-only -m ...`, 2 cores). A superset
    does no harm: a module that only names the mark (tests/test_jax_range.py) adds its
    collection, no test.
    """
    names = {test.split("::", 1)[0] for test in hook_tests()} | {"tests/test_jaxhooks.py"}
    names |= {
        f"tests/{path.name}"
        for path in tests.glob("test_*.py")
        if _PYTHONS.search(path.read_text())
    }
    return sorted(names)


if __name__ == "__main__":  # `python tests/jax_hooks.py`: the files, one argument each
    sys.stdout.write(" ".join(files_to_collect()) + "\n")
