"""Op time by source line, from JAX's profiler trace of a few runs after the timed ones.

``jax.profiler.trace(folder, create_perfetto_trace=True)`` writes, beside XProf's
``.xplane.pb``, Perfetto's ``perfetto_trace.json.gz``: Chrome-trace JSON, read here with
the standard library's gzip and json (no protobuf parsing of our own). What it holds, as
measured on JAX 0.10.2:

- on the CPU, each op of a program is a complete event (``"ph": "X"``) on one of XLA's
  threads, named as the optimized program names the instruction (``ynn_fusion``,
  ``sort.0``), with ``args`` ``{"hlo_module": "jit_step", "hlo_op": "sort.0"}``;
- on a TPU, the ``/device:TPU:0`` process has an "XLA Ops" thread with one event per op.

Each op event is matched to the program's instruction of that name (a fusion's by the
fusion's name, `gate.witness.line_work.OpWork.top`), and its time shared among the lines
of the ops inside, in proportion to their work (flops and bytes; equally where none has
any). An op event no instruction of the step's programs matches is another program's
(setup's) and is left out. The mean over the traced runs is per step.

A trace whose folder holds more than `gate.limits.TRACE_BYTES` is dropped unread, with a note
in its place: the op times only say where time went, so no verdict rests on them.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gate.limits import TRACE_BYTES, TooLarge
from gate.results.line_times import LineTime, OpTimes
from gate.user_code import SourceLocation, UserCode
from gate.witness.collectives import line_text
from gate.witness.line_work import OpWork

TRACED_RUNS = 3
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# Of a region's name in its trace's folder: well within a file name's 255 bytes.
_NAME_CHARACTERS = 100
TRACE_NAME = "perfetto_trace.json.gz"
_OPS_THREAD = "XLA Ops"  # the device's op thread on a TPU (and a GPU)
_MOST_OPS = 4


def traced_runs(
    fresh: Callable[[], Any], call: Callable[[Any], Any], folder: Path, runs: int = TRACED_RUNS
) -> Path:
    """Run ``call(fresh())`` ``runs`` times under JAX's profiler, writing into ``folder``
    (removed if that fails); the folder of the trace's files.

    Raises what the step or the profiler raises; the caller says so in one line.
    """
    import jax

    options = jax.profiler.ProfileOptions()
    # No event per Python call: the ops are what is read, and the Python tracer slows every
    # call of the step (the shipped MLP's three traced runs: ~1.5 s with it under load).
    options.python_tracer_level = 0
    try:
        with jax.profiler.trace(str(folder), create_perfetto_trace=True, profiler_options=options):
            for _ in range(runs):
                jax.block_until_ready(call(fresh()))
        found = sorted(folder.glob(f"plugins/profile/*/{TRACE_NAME}"))
        if not found:
            raise FileNotFoundError(f"the profiler wrote no {TRACE_NAME}")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return found[-1].parent


def op_seconds(trace: Path) -> dict[tuple[str, str], float]:
    """Every op event's total time in the trace, by ``(module, op)`` (module "" where the
    event does not say); {} where the trace has no per-op events."""
    with gzip.open(trace, "rt", encoding="utf-8") as stream:
        document = json.load(stream)
    events = document.get("traceEvents", []) if isinstance(document, dict) else document
    threads = {
        (e.get("pid"), e.get("tid")): str(e.get("args", {}).get("name", ""))
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    totals: dict[tuple[str, str], float] = {}
    for event in events:
        if event.get("ph") != "X" or not isinstance(event.get("dur"), (int, float)):
            continue
        args = event.get("args") or {}
        on_ops_thread = threads.get((event.get("pid"), event.get("tid"))) == _OPS_THREAD
        if "hlo_op" not in args and not on_ops_thread:
            continue  # the runtime's own events: dispatch, waits, thread pools
        name = str(args.get("hlo_op") or event.get("name", ""))
        key = (str(args.get("hlo_module", "")), name)
        totals[key] = totals.get(key, 0.0) + float(event["dur"]) * 1e-6  # µs
    return totals


def line_times(
    seconds: dict[tuple[str, str], float],
    ops: Sequence[OpWork],
    runs: int,
    user: UserCode,
) -> tuple[LineTime, ...]:
    """The ops' times per step, shared among their lines; the longest line first."""
    by_top: dict[tuple[str, str], list[OpWork]] = {}
    by_name: dict[str, list[OpWork]] = {}
    for op in ops:
        by_top.setdefault((op.module, op.top), []).append(op)
        by_name.setdefault(op.top, []).append(op)
    per_line: dict[SourceLocation | None, float] = {}
    named: dict[SourceLocation | None, dict[str, float]] = {}
    for (module, name), total in seconds.items():
        inside = by_top.get((module, name)) if module else by_name.get(name)
        if not inside:
            continue  # another program's op (setup's), or one the step's programs lack
        weights = [op.flops + op.transcendentals + op.bytes_accessed for op in inside]
        whole = sum(weights)
        for op, weight in zip(inside, weights, strict=True):
            share = total * (weight / whole if whole else 1.0 / len(inside)) / runs
            per_line[op.location] = per_line.get(op.location, 0.0) + share
            names = named.setdefault(op.location, {})
            names[name] = names.get(name, 0.0) + share
    table = [
        LineTime(
            path=where.path if where else "",
            line=where.line if where else 0,
            function=where.function if where else "",
            source=line_text(user, where),
            seconds=spent,
            ops=tuple(
                n for n, _ in sorted(named[where].items(), key=lambda kv: -kv[1])[:_MOST_OPS]
            ),
        )
        for where, spent in per_line.items()
    ]
    return tuple(sorted(table, key=lambda t: (-t.seconds, t.path, t.line)))


def trace_folder_name(key: str) -> str:
    """The start of the folder a region's trace is kept in, from its ``suite.region``.

    A suite's name is a policy's free text, never a path: only its letters, digits, ``_``,
    ``.`` and ``-`` reach the file system (anything else is ``_``; no leading ``.``, so no
    ``..``), so a suite ``../../tmp/x`` keeps its trace in the traces folder like any other.
    """
    return _NOT_IN_A_NAME.sub("_", key).lstrip(".")[:_NAME_CHARACTERS] or "region"


def _bytes_under(folder: Path) -> int:
    """The bytes of every file under ``folder``, as a copy or an upload would read them; a
    symlink counts as itself, never as what it points to."""
    total = 0
    for parent, _, files in os.walk(folder):  # followlinks=False
        for file in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, file)).st_size
    return total


def op_times(
    fresh: Callable[[], Any],
    call: Callable[[Any], Any],
    ops: Sequence[OpWork],
    user: UserCode,
    *,
    platform: str,
    name: str,
    kept: Path | None = None,
    runs: int = TRACED_RUNS,
) -> OpTimes:
    """The step's op times by line from ``runs`` traced runs; a note where there are none.

    The trace is kept in a folder named after ``name`` (the region's ``suite.region``,
    `trace_folder_name`) under ``kept`` (the run's traces folder) where that is given, and
    removed once read where it is not; one over `TRACE_BYTES` is removed unread.
    """
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{trace_folder_name(name)}-", dir=kept or None))
    try:
        folder = traced_runs(fresh, call, root, runs)
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return OpTimes.not_traced(why, runs)
    size = _bytes_under(root)
    if size > TRACE_BYTES:
        # Neither read (a worker's memory) nor kept (the runner's disk, the uploaded reports).
        shutil.rmtree(root, ignore_errors=True)
        too_large = TooLarge(size, TRACE_BYTES)
        return OpTimes(
            (), runs, None, f"the profiler's trace was dropped unread: {too_large} for a trace"
        )
    trace = str(folder) if kept else None
    try:
        seconds = op_seconds(folder / TRACE_NAME)
    except (OSError, ValueError) as exc:  # gzip's and json's errors
        return OpTimes((), runs, trace, f"the profiler's trace could not be read: {exc}")
    finally:
        if not kept:
            shutil.rmtree(root, ignore_errors=True)
    if not seconds:
        note = f"the {platform} profiler's trace has no per-op times; work by line stands in"
        return OpTimes((), runs, trace, note)
    return OpTimes(line_times(seconds, ops, runs, user), runs, trace)
