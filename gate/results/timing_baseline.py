"""The stored timing baseline: each region's step times as ``transfer-gate baseline`` measured them.

Kept in the baseline file beside the accepted transfers (its ``timing`` mapping), one entry
per region: the median, the quartiles and every raw sample, XLA's figures, collectives,
unused donations and work by source line, and the machine they were measured on
(`gate.results.machine`). A later ``run`` compares with them (`gate.compare.stored_baseline`)
only on an equal machine: a timing from another processor, accelerator, JAX or gate says
nothing about this code's speed here.

These records are the file's schema (`gate.results.baseline_file`): msgspec checks every
value as it reads them, so a hand-edited ``median_s: -1`` is refused, not compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Literal

import msgspec

from gate.documents import Count, Record
from gate.results.collectives import Collective, CollectiveKind, Communication
from gate.results.constants import EmbeddedConstant
from gate.results.costs import FunctionCost, StepCost, step_cost
from gate.results.donations import JAX, XLA, ReusedDonation, UnusedDonation
from gate.results.line_times import LineTime, OpTimes
from gate.results.line_work import LineWork
from gate.results.machine import Machine
from gate.results.records import RegionResult, RunResult
from gate.user_code import SourceLocation

# Times and XLA's figures: a number, never negative (JSON has no NaN or infinity).
Amount = Annotated[float, msgspec.Meta(ge=0)]
Samples = Annotated[tuple[Amount, ...], msgspec.Meta(min_length=1)]  # every timed run's


class Figures(Record, frozen=True, kw_only=True, omit_defaults=True):
    """XLA's figures for one function, per step (`gate.results.costs.METRICS`, in its order);
    a figure XLA did not give is absent."""

    flops: Amount | None = None
    bytes_accessed: Amount | None = None
    transcendentals: Amount | None = None
    argument_bytes: Amount | None = None
    output_bytes: Amount | None = None
    alias_bytes: Amount | None = None
    temp_bytes: Amount | None = None
    generated_code_bytes: Amount | None = None


class StoredFunction(Record, frozen=True, kw_only=True):
    """One compiled function of the step: its runs, programs and figures per step."""

    name: str
    runs: Count
    programs: Count
    figures: Figures
    # The user's line that first ran it ("train.py:44"), so that a program new or gone since
    # is named by it; absent in a file from before it was kept.
    where: str | None = None

    def function_cost(self) -> FunctionCost:
        figures = msgspec.structs.asdict(self.figures)
        given = tuple((metric, value) for metric, value in figures.items() if value is not None)
        return FunctionCost(self.name, self.runs, self.programs, given, where=self.where)


class StoredCollective(Record, frozen=True, kw_only=True):
    """One collective of the step's programs, every field, so a later run compares it exactly."""

    kind: CollectiveKind
    function: str
    buffer: str
    bytes: Count
    runs: Count
    axes: tuple[str, ...] | None
    groups: str = ""
    path: str | None = None
    line: Count | None = None
    caller: str | None = None
    source: str | None = None
    op_name: str = ""
    uncounted: str = ""

    @classmethod
    def of(cls, c: Collective) -> StoredCollective:
        where = c.location
        return cls(
            kind=c.kind,  # type: ignore[arg-type]  # one of KINDS, as the witness reads it
            function=c.function,
            buffer=c.buffer,
            bytes=c.bytes,
            runs=c.runs,
            axes=c.axes,
            groups=c.groups,
            path=where.path if where else None,
            line=where.line if where else None,
            caller=where.function if where else None,
            source=c.source,
            op_name=c.op_name,
            uncounted=c.uncounted,
        )

    def collective(self) -> Collective:
        where = (
            None
            if self.path is None
            else SourceLocation(self.path, self.line or 0, self.caller or "")
        )
        return Collective(
            self.kind,
            self.function,
            self.buffer,
            self.bytes,
            self.runs,
            self.axes,
            self.groups,
            where,
            self.source,
            self.op_name,
            self.uncounted,
        )


class StoredDonation(Record, frozen=True, kw_only=True):
    """One donated argument the step's programs did not reuse: what a later run's donations are
    matched with (by program and argument, `UnusedDonation.identity`), so that one this
    baseline's step reused and the run's does not is lost (``donation: fail_new``)."""

    function: str  # the program, ``jit(train_step)``; "" where JAX did not say
    argument: str | None  # its pytree path; None where JAX did not say (the aval stands in)
    aval: str  # ``float32[8,16]``, one device's on a mesh
    per_device: bool = False
    seen_by: Literal["xla", "jax"] = XLA

    @classmethod
    def of(cls, d: UnusedDonation) -> StoredDonation:
        return cls(
            function=d.function,
            argument=d.argument,
            aval=d.aval,
            per_device=d.per_device,
            seen_by=JAX if d.seen_by == JAX else XLA,
        )

    def donation(self) -> UnusedDonation:
        return UnusedDonation(
            self.function, self.argument, self.aval, self.seen_by, self.per_device
        )


class StoredReused(Record, frozen=True, kw_only=True):
    """One donated argument an output of the step's programs reused: a later run that no
    longer donates it has dropped it (``donation: fail_new``)."""

    function: str  # the program, ``jit(train_step)``
    argument: str  # its pytree path
    aval: str  # one device's on a mesh
    per_device: bool = False

    @classmethod
    def of(cls, d: ReusedDonation) -> StoredReused:
        return cls(function=d.function, argument=d.argument, aval=d.aval, per_device=d.per_device)

    def donation(self) -> ReusedDonation:
        return ReusedDonation(self.function, self.argument, self.aval, self.per_device)


class StoredLine(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One source line's work per step (`gate.results.line_work.LineWork`), every field, so a
    later run compares its lines with this baseline's exactly."""

    path: str  # "" for the ops of no source line
    line: Count
    function: str = ""
    source: str | None = None
    flops: Amount = 0.0
    bytes_accessed: Amount = 0.0
    transcendentals: Amount = 0.0
    ops: tuple[str, ...] = ()
    op_count: Count = 0

    @classmethod
    def of(cls, w: LineWork) -> StoredLine:
        return cls(
            path=w.path,
            line=w.line,
            function=w.function,
            source=w.source,
            flops=w.flops,
            bytes_accessed=w.bytes_accessed,
            transcendentals=w.transcendentals,
            ops=w.ops,
            op_count=w.op_count,
        )

    def line_work(self) -> LineWork:
        return LineWork(
            self.path,
            self.line,
            self.function,
            self.source,
            self.flops,
            self.bytes_accessed,
            self.transcendentals,
            self.ops,
            self.op_count,
        )


class StoredLineTime(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One source line's op time per step from the profiler's traced runs
    (`gate.results.line_times.LineTime`): what a later slower verdict names lines against."""

    path: str
    line: Count
    function: str = ""
    source: str | None = None
    seconds: Amount
    ops: tuple[str, ...] = ()

    @classmethod
    def of(cls, t: LineTime) -> StoredLineTime:
        return cls(
            path=t.path,
            line=t.line,
            function=t.function,
            source=t.source,
            seconds=t.seconds,
            ops=t.ops,
        )

    def line_time(self) -> LineTime:
        return LineTime(self.path, self.line, self.function, self.source, self.seconds, self.ops)


class StoredOpTimes(Record, frozen=True, kw_only=True):
    """The op time by line of the step's traced runs; the trace itself is not kept here."""

    runs: Count
    lines: tuple[StoredLineTime, ...]


class StoredConstant(Record, frozen=True, kw_only=True):
    """An array compiled into a program as a constant (`gate.results.constants`)."""

    function: str
    shape: str
    size_bytes: int
    path: str
    line: int

    @classmethod
    def of(cls, constant: EmbeddedConstant) -> StoredConstant:
        return cls(
            function=constant.function,
            shape=constant.shape,
            size_bytes=constant.size_bytes,
            path=constant.path,
            line=constant.line,
        )

    def constant(self) -> EmbeddedConstant:
        return EmbeddedConstant(self.function, self.shape, self.size_bytes, self.path, self.line)


class StoredCost(Record, frozen=True, kw_only=True, omit_defaults=True):
    """What the file keeps of a measured step cost: XLA's exact figures, the collectives and the
    unused donations.

    The device's memory peak depends on what ran before in the worker, so it is not kept.
    ``collectives``, ``donations`` and ``lines`` are absent where they were not read (a file
    from before they were kept, a JAX whose programs hide their text); ``donations`` is empty
    where every donation was reused.
    """

    functions: tuple[StoredFunction, ...]
    collectives: tuple[StoredCollective, ...] | None = None
    donations: tuple[StoredDonation, ...] | None = None
    # The donations an output reused; absent in a file from before they were kept (then a
    # dropped donation cannot be told, and is not).
    reused: tuple[StoredReused, ...] | None = None
    lines: tuple[StoredLine, ...] | None = None  # work by source line
    # Op time by line; absent where the step was not traced or its trace had no op times.
    times: StoredOpTimes | None = None
    # Arrays of 1 MiB or more compiled into the programs; absent where not read (a file from
    # before they were kept): then a new one cannot be told from an old one, and is not.
    constants: tuple[StoredConstant, ...] | None = None
    # The work counts each loop's trip count; absent (false) in a file from before it did,
    # whose loops' bodies count once: not a bound on today's figures (`compare_costs`).
    loops_counted: bool = False
    loops_added: bool = False  # counting them added work: a loop ran more than once a run
    # Each loop's trip count was read from its counter where XLA's backend config gives none
    # (`gate.witness.trip_counts`); absent (false) in a file from before, where a TPU's loops
    # counted their bodies once: its loops then count as not counted.
    trips_read: bool = False

    @classmethod
    def of(cls, cost: StepCost) -> StoredCost:
        functions = tuple(
            StoredFunction(
                name=fn.name,
                runs=fn.runs,
                programs=fn.programs,
                figures=Figures(**dict(fn.figures)),
                where=fn.where,
            )
            for fn in cost.functions
        )
        comm = cost.comm
        kept = None if comm is None or not comm.measured else comm.collectives
        donations = cost.donations
        return cls(
            functions=functions,
            collectives=None if kept is None else tuple(StoredCollective.of(c) for c in kept),
            donations=None if donations is None else tuple(StoredDonation.of(d) for d in donations),
            reused=None if cost.reused is None else tuple(StoredReused.of(d) for d in cost.reused),
            lines=None if cost.lines is None else tuple(StoredLine.of(w) for w in cost.lines),
            times=_stored_times(cost.times),
            constants=None
            if cost.constants is None
            else tuple(StoredConstant.of(c) for c in cost.constants),
            loops_counted=cost.loops_counted,
            loops_added=cost.loops_added,
            trips_read=cost.loops_counted,
        )

    def step_cost(self) -> StepCost:
        collectives = self.collectives
        comm = (
            None
            if collectives is None
            else Communication(tuple(c.collective() for c in collectives))
        )
        donations = None if self.donations is None else tuple(d.donation() for d in self.donations)
        functions = tuple(fn.function_cost() for fn in self.functions)
        lines = None if self.lines is None else tuple(w.line_work() for w in self.lines)
        constants = None if self.constants is None else tuple(c.constant() for c in self.constants)
        cost = step_cost(
            functions, None, comm=comm, donations=donations, lines=lines, constants=constants
        )
        counted = self.loops_counted and self.trips_read
        reused = None if self.reused is None else tuple(d.donation() for d in self.reused)
        cost = replace(cost, loops_counted=counted, loops_added=self.loops_added, reused=reused)
        if self.times is None:
            return cost
        kept = tuple(t.line_time() for t in self.times.lines)
        return replace(cost, times=OpTimes(kept, self.times.runs))


def _stored_times(times: OpTimes | None) -> StoredOpTimes | None:
    if times is None or times.note or not times.lines:
        return None
    return StoredOpTimes(runs=times.runs, lines=tuple(StoredLineTime.of(t) for t in times.lines))


class TimingNoise(Record, frozen=True, kw_only=True):
    """Step times spread too wide to bound the comparisons a later run makes with them
    (`gate.compare.baseline_noise`): their median's interval, as ratios to it, and the bound."""

    low: Amount | None  # None: too few samples for an interval at all
    high: Amount | None
    bound: Amount  # the interval had to lie within 1/bound .. bound
    max_slowdown: Amount  # the region's ``timing.baseline_max_slowdown`` when recorded
    samples: Count

    def describe(self) -> str:
        """``their median's interval is 0.71-1.38x of it, wider than the 0.82-1.22x a 1.5x
        bound leaves it (60 samples)``."""
        leaves = (
            f"the {1 / self.bound:.2f}-{self.bound:.2f}x a {self.max_slowdown:g}x bound leaves it"
        )
        if self.low is None or self.high is None:
            return f"{self.samples} samples are too few to put their median within {leaves}"
        return (
            f"their median's interval is {self.low:.2f}-{self.high:.2f}x of it, wider than "
            f"{leaves} ({self.samples} samples)"
        )


class StoredTiming(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One region's step times in the baseline file, and where they were measured."""

    machine: Machine
    median_s: Amount
    p25_s: Amount
    p75_s: Amount
    samples: Samples
    # XLA's figures for the step (`gate.results.costs`), compared exactly on the same machine.
    cost: StoredCost | None = None
    # Set when the samples were too noisy to bound a later run's comparison, even after
    # `transfer-gate baseline` timed the region again: a run against them says so.
    noisy: TimingNoise | None = None


def timing_of(region: RegionResult) -> StoredTiming | None:
    """The entry ``region`` gives the baseline: None without samples or a machine."""
    if region.machine is None or not region.timing_samples or region.error is not None:
        return None
    # numpy here, not at the top: every run imports this module (the baseline file's schema),
    # and only `baseline` makes an entry; numpy is most of what the gate's process imports.
    import numpy as np

    samples = tuple(float(s) for s in region.timing_samples)
    p25, median, p75 = (float(q) for q in np.percentile(samples, [25, 50, 75]))
    cost = region.cost if region.cost is not None and region.cost.measured else None
    return StoredTiming(
        machine=region.machine,
        median_s=median,
        p25_s=p25,
        p75_s=p75,
        samples=samples,
        cost=None if cost is None else StoredCost.of(cost),
    )


def retimed(run: RunResult, existing: Mapping[str, StoredTiming]) -> dict[str, StoredTiming]:
    """``run``'s timing for the regions it ran, ``existing``'s for others (like `rebaselined`)."""
    ran = {region.classname for region in run.regions}
    kept = {name: entry for name, entry in existing.items() if name not in ran}
    for region in run.regions:
        entry = timing_of(region)
        if entry is not None:
            kept[region.classname] = entry
    return dict(sorted(kept.items()))
