"""What one run of the step costs by XLA's accounting: every program it ran, per function name.

The run itself sees every execution (`gate.jaxhooks.executables`); this module
reads each program's cost and memory analysis once, weighs them by how often
the step ran it (`gate.results.costs`), and reads the devices' memory marks
around the run. XLA's cost analysis counts a while loop's body once; the work of its
other runs, where the trip count is known (`gate.witness.trip_counts`), is added from the
gate's own count of each op (`Loops`), so a loop rolled and the same loop unrolled read
the same work. A JAX
that lacks a hook gives no cost and a note naming the version, never zeros.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from gate.jaxhooks.donation_warnings import WarnedDonation
from gate.jaxhooks.executables import (
    Executed,
    cost_analysis,
    every_execution_seen,
    memory_analysis,
)
from gate.jaxhooks.internals import InternalMissing, jax_version
from gate.results.collectives import Communication
from gate.results.constants import CONSTANT_BYTES, EmbeddedConstant
from gate.results.costs import DevicePeak, FunctionCost, StepCost, not_measured, step_cost
from gate.results.donations import ReusedDonation
from gate.user_code import UserCode
from gate.witness.constants import program_constants
from gate.witness.donations import reused_donations
from gate.witness.line_work import OpWork, line_table, program_ops
from gate.witness.programs import parsed_programs, read_programs
from gate.witness.trip_counts import loops_not_counted

# XLA's keys, as `cost_analysis()` and `get_compiled_memory_stats()` spell them.
_WORK_KEYS = (
    ("flops", "flops"),
    ("bytes accessed", "bytes_accessed"),
    ("transcendentals", "transcendentals"),
)
_MEMORY_KEYS = (
    ("argument_size_in_bytes", "argument_bytes"),
    ("output_size_in_bytes", "output_bytes"),
    ("alias_size_in_bytes", "alias_bytes"),
    ("temp_size_in_bytes", "temp_bytes"),
    ("generated_code_size_in_bytes", "generated_code_bytes"),
)

T = TypeVar("T")
Marks = dict[str, tuple[int, int]]  # device -> (bytes_in_use, peak_bytes_in_use)


def measure_step(
    prepare: Callable[[], T],
    run_step: Callable[[T], object],
    *,
    user: UserCode | None = None,
    warned: Sequence[WarnedDonation] = (),
) -> StepCost:
    """Run ``run_step(prepare())`` once, every execution of the step seen, and what it cost
    (`measure_step_ops`, without the ops)."""
    return measure_step_ops(prepare, run_step, user=user, warned=warned)[0]


def measure_step_ops(
    prepare: Callable[[], T],
    run_step: Callable[[T], object],
    *,
    user: UserCode | None = None,
    warned: Sequence[WarnedDonation] = (),
    constant_bytes: int = CONSTANT_BYTES,
) -> tuple[StepCost, tuple[OpWork, ...]]:
    """Run ``run_step(prepare())`` once, every execution of the step seen, and what it cost;
    with every op of its programs, charged to its line (`gate.witness.line_work`), which
    the traced runs' op times are matched to (`gate.witness.op_times`).

    Only the step is seen: ``prepare`` (setup) runs before the hook is in.
    Whatever either raises propagates (the hook is put back first). The programs' text
    gives their collectives and unused donations (`gate.witness.programs`), whose lines are
    named after ``user``'s files; ``warned`` are the donations JAX dropped when it lowered
    them (`gate.jaxhooks.donation_warnings`). Constants of ``constant_bytes`` or more compiled
    into the programs are listed at their lines (`gate.witness.constants`).
    """
    import jax

    prepared = prepare()
    devices = jax.local_devices()
    before = memory_marks(devices)
    code = user or UserCode(Path.cwd())
    try:
        with every_execution_seen(lambda: _caller(code)) as log:
            run_step(prepared)
    except InternalMissing as exc:
        note = f"cost not measured: {exc} (jax {jax_version()})"
        return not_measured(note, device_peaks(before, memory_marks(devices))), ()
    peaks = device_peaks(before, memory_marks(devices))
    executed = log.executed()
    if not executed:
        nothing = step_cost(
            (),
            peaks,
            "the step ran no compiled program",
            comm=Communication(),
            donations=(),
            lines=(),
        )
        return replace(nothing, reused=()), ()
    modules = parsed_programs(executed)
    comm, donations = read_programs(executed, code, warned, modules)
    loops: dict[str, Loops] = {}
    ops: tuple[OpWork, ...] = ()
    constants: tuple[EmbeddedConstant, ...] = ()
    reused: tuple[ReusedDonation, ...] = ()
    if not isinstance(modules, str):
        for module, program in modules:
            own = tuple(program_ops(module, program.runs, code))
            ops += own
            loops.setdefault(program.name, Loops()).add(own, loops_not_counted(module))
            constants += program_constants(module, program, code, constant_bytes)
            reused += reused_donations(module, program)
    lines = None if isinstance(modules, str) else line_table(ops, code)
    functions = function_costs(executed, loops)
    added = any(one.work for one in loops.values())
    cost = step_cost(
        functions,
        peaks,
        comm=comm,
        donations=donations,
        lines=lines,
        constants=None if isinstance(modules, str) else constants,
    )
    unread = isinstance(modules, str) or donations is None
    return replace(cost, loops_added=added, reused=None if unread else reused), ops


@dataclass
class Loops:
    """What XLA's cost analysis leaves out of one function's work: every loop's runs but the
    first (it counts a while loop's body once, whatever its trip count), by the gate's own
    count of each op (`gate.witness.line_work`); and the loops whose trip count is unknown
    (`gate.witness.trip_counts`), which nobody can count further."""

    work: dict[str, float] = field(default_factory=dict)  # by `_WORK_KEYS` metric
    not_counted: int = 0

    def add(self, ops: Sequence[OpWork], not_counted: int) -> None:
        for op in ops:
            if op.beyond_xla:
                for metric in ("flops", "bytes_accessed", "transcendentals"):
                    value = getattr(op, metric) * op.beyond_xla
                    self.work[metric] = self.work.get(metric, 0.0) + value
        self.not_counted += not_counted

    def note(self) -> str:
        """``1 loop whose trip count is unknown, counted once a run``; "" for none."""
        if not self.not_counted:
            return ""
        count = self.not_counted
        whose = "loop whose" if count == 1 else "loops whose"
        return f"{count} {whose} trip count is unknown, counted once a run"


def function_costs(
    executed: Sequence[Executed], loops: dict[str, Loops] | None = None
) -> tuple[FunctionCost, ...]:
    """One `FunctionCost` per name: work weighed by runs and its loops' trip counts (``loops``,
    by name: what XLA leaves out), memory once per program."""
    by_name: dict[str, list[Executed]] = {}
    for one in executed:
        by_name.setdefault(one.name, []).append(one)
    found = loops or {}
    return tuple(
        _function_cost(name, programs, found.get(name, Loops()))
        for name, programs in by_name.items()
    )


def _caller(user: UserCode) -> str | None:
    """The user's line running now (``train.py:44``): where a program of the step was run."""
    # Without reading the source lines: only the place is wanted.
    frames = traceback.StackSummary.extract(traceback.walk_stack(None), lookup_lines=False)
    found = user.locate(list(reversed(frames)))
    return None if found is None else str(found)


def _function_cost(name: str, programs: list[Executed], loops: Loops) -> FunctionCost:
    sums: dict[str, float] = {}
    unknown: list[str] = []
    each: list[tuple[tuple[str, float], ...]] = []
    for program in programs:
        work = cost_analysis(program.executable)
        if isinstance(work, str):
            unknown.append(work)
        else:
            for key, metric in _WORK_KEYS:
                if key in work:
                    sums[metric] = sums.get(metric, 0.0) + program.runs * work[key]
        memory = memory_analysis(program.executable)
        if isinstance(memory, str):
            unknown.append(memory)
        else:
            for key, metric in _MEMORY_KEYS:
                sums[metric] = sums.get(metric, 0.0) + memory[key]
            each.append(tuple((metric, float(memory[key])) for key, metric in _MEMORY_KEYS))
    for metric, extra in loops.work.items():
        if metric in sums:  # a figure XLA did not give stays absent, never the loops' part
            sums[metric] += extra
    order = [metric for _, metric in _WORK_KEYS + _MEMORY_KEYS]
    return FunctionCost(
        name=name,
        runs=sum(p.runs for p in programs),
        programs=len(programs),
        figures=tuple((m, sums[m]) for m in order if m in sums),
        unknown="; ".join(dict.fromkeys(unknown)),
        where=next((p.where for p in programs if p.where is not None), None),
        per_program=tuple(each),
        loops=loops.note(),
    )


def memory_marks(devices: Sequence[Any]) -> Marks:
    """Each device's ``(bytes_in_use, peak_bytes_in_use)`` where it reports both (not on CPU)."""
    marks: Marks = {}
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:  # a backend without memory stats may raise rather than return None
            continue
        if not isinstance(stats, dict):
            continue
        in_use, peak = stats.get("bytes_in_use"), stats.get("peak_bytes_in_use")
        if isinstance(in_use, int) and isinstance(peak, int):
            marks[_device_name(device)] = (in_use, peak)
    return marks


def device_peaks(before: Marks, after: Marks) -> tuple[DevicePeak, ...] | None:
    """The devices' peaks around the run; None where no device reports one."""
    peaks = tuple(
        DevicePeak(name, after[name][1], before[name][1], before[name][0])
        for name in sorted(before.keys() & after.keys())
    )
    return peaks or None


def _device_name(device: Any) -> str:
    platform, index = getattr(device, "platform", None), getattr(device, "id", None)
    return f"{platform}:{index}" if platform is not None and index is not None else str(device)
