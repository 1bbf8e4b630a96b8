"""The compiler's own accounting of one step, per compiled function and in total, and base vs head.

XLA's figures for a compiled program (``cost_analysis()``: flops, bytes
accessed, transcendentals; ``memory_analysis()``: argument, output, alias, temp
and generated-code bytes) are exact for that program and the same on every
run, so unlike time they can be compared with no noise at all.

Per step, per function name (JAX's, ``jit(step)``; every program of that name
together, e.g. an eager ``jit(add)`` at two shapes):

- the work figures (`WORK`) are what the step does: each program's figure
  times how often the step ran it;
- the memory figures (`MEMORY`) are what the step's programs need, each
  program once (running it twice needs no more code or scratch space); each
  program's own are kept too (`FunctionCost.per_program`): against the base, a
  function with more programs says "2 programs where the base had 1" with each
  one's memory, never a summed growth.

A figure XLA did not give for a program is absent (None), never 0; a total
sums the figures that were given and is absent when none was.
"""

from __future__ import annotations

from dataclasses import dataclass

from gate.policy.model import CostRule
from gate.results.collectives import Communication
from gate.results.donations import UnusedDonation
from gate.results.line_times import LineTimeComparison, OpTimes, compare_line_times
from gate.results.line_work import LineComparison, LineWork, compare_lines
from gate.text import accepted_text, number_text, si_text, size_text

WORK = ("flops", "bytes_accessed", "transcendentals")
LINES_LISTED = 20  # changed lines a report lists before counting the rest
MEMORY = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")
METRICS = WORK + MEMORY


@dataclass(frozen=True)
class FunctionCost:
    """One compiled function of the step: how often it ran and what that cost, per step."""

    name: str  # "jit(train_step)"
    runs: int  # executions per step, over all its programs
    programs: int  # distinct compiled programs of this name the step ran
    # (metric, value) for each of `METRICS` XLA gave, in that order.
    figures: tuple[tuple[str, float], ...]
    unknown: str = ""  # why a figure is absent ("cost_analysis() raised ..."), if one is
    where: str | None = None  # the user's line that first ran it ("train.py:44"), if known
    # Each program's own `MEMORY` figures, in the order they first ran: `figures` sums them,
    # which reads like one program's growth where a function gained a program. Empty where
    # not kept (a stored baseline).
    per_program: tuple[tuple[tuple[str, float], ...], ...] = ()

    def figure(self, metric: str) -> float | None:
        return dict(self.figures).get(metric)

    def programs_memory(self) -> str:
        """``argument 168 B, temp 864 B; argument 168 B, temp 864 B``: each program's memory
        (its figures that are not 0), programs apart; "" where not kept."""
        return "; ".join(
            ", ".join(f"{m.removesuffix('_bytes')} {size_text(v)}" for m, v in program if v)
            or "no memory"
            for program in self.per_program
        )


@dataclass(frozen=True)
class DevicePeak:
    """A device's memory high-water mark around the cost run (``memory_stats()``).

    JAX offers no way to reset the mark, and a worker runs several regions, so
    the mark after the step is the step's own peak only when the step raised
    it (`set_by_step`); otherwise the step's peak is at most that much.
    """

    device: str  # "cuda:0"
    peak_bytes: int  # ``peak_bytes_in_use`` after the cost run
    peak_before_bytes: int  # ``peak_bytes_in_use`` before it
    in_use_before_bytes: int  # ``bytes_in_use`` before it (inputs, params, earlier arrays)

    @property
    def set_by_step(self) -> bool:
        return self.peak_bytes > self.peak_before_bytes

    def text(self) -> str:
        bound = "" if self.set_by_step else "≤ "
        return f"{self.device} peak {bound}{size_text(self.peak_bytes)}"


@dataclass(frozen=True)
class StepCost:
    """What one step's compiled programs cost, from one dedicated run after the timed runs."""

    functions: tuple[FunctionCost, ...] = ()  # by name
    # Per step, (metric, value) for each of `METRICS` any function gave.
    totals: tuple[tuple[str, float], ...] = ()
    peak_memory: tuple[DevicePeak, ...] | None = None  # None: no device reports a peak (CPU)
    # Why the cost is absent or incomplete; "" when it is all there. Absent costs are
    # never zeros: `measured` is False and `functions` is empty.
    note: str = ""
    measured: bool = True
    # What the programs' text says (`gate.witness.programs`): every collective, and each
    # donated argument no output reuses. None: not read (the cost was not measured).
    comm: Communication | None = None
    donations: tuple[UnusedDonation, ...] | None = None
    # Work by source line (`gate.results.line_work`), in file and line order. None: not
    # counted (the cost was not measured, a program's text could not be read, or a stored
    # baseline from before the gate kept it).
    lines: tuple[LineWork, ...] | None = None
    # Op time by source line, from traced runs after the cost run (`gate.results.line_times`);
    # None: not traced (``timing: off``, or the cost was not measured).
    times: OpTimes | None = None

    def total(self, metric: str) -> float | None:
        return dict(self.totals).get(metric)

    def headline(self) -> str:
        """``1.2 GFLOP/step``; "" when not measured or without a flop count."""
        flops = self.total("flops")
        return "" if not self.measured or flops is None else f"{si_text(flops, 'FLOP')}/step"


def step_cost(
    functions: tuple[FunctionCost, ...],
    peak_memory: tuple[DevicePeak, ...] | None,
    note: str = "",
    *,
    comm: Communication | None = None,
    donations: tuple[UnusedDonation, ...] | None = None,
    lines: tuple[LineWork, ...] | None = None,
) -> StepCost:
    """The step's record, its totals summed from its functions' figures."""
    totals = []
    for metric in METRICS:
        given = [f for f in (fn.figure(metric) for fn in functions) if f is not None]
        if given:
            totals.append((metric, float(sum(given))))
    ordered = tuple(sorted(functions, key=lambda fn: fn.name))
    return StepCost(
        ordered, tuple(totals), peak_memory, note, comm=comm, donations=donations, lines=lines
    )


def not_measured(note: str, peak_memory: tuple[DevicePeak, ...] | None = None) -> StepCost:
    """No cost, and why (the JAX version that lacks a hook, the step that would not run)."""
    return StepCost(peak_memory=peak_memory, note=note, measured=False)


# --- base against head ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CostChange:
    """One figure that differs between base and head, for one function or the step's total."""

    function: str | None  # None: the step's total
    metric: str
    base: float | None  # None: absent on that side (a function new in the head, or gone)
    head: float | None
    failing: bool = False  # a total beyond the rule's ``max_increase``

    @property
    def one_sided(self) -> bool:
        """A step total XLA gave on one side only: no ratio can bound it."""
        return self.function is None and (self.base is None) != (self.head is None)

    @property
    def ratio(self) -> float | None:
        """head / base, exactly; None when a side is absent or the base is 0."""
        if self.base is None or self.head is None or self.base == 0:
            return None
        return self.head / self.base

    @property
    def notable(self) -> bool:
        """Worth a reader's eye: failing, from or to nothing, or not 1.00x as its text rounds it.

        A new ``jit(isnan)`` adds a few flops to a step's millions: listed as "5.71e7 → 5.71e7
        (1.00x)" it would read as noise hiding the change, so such figures stay in the JSON
        report only."""
        ratio = self.ratio
        return self.failing or ratio is None or f"{ratio:.2f}" != "1.00"

    def text(self) -> str:
        """``jit(step): flops 2.10e6 → 4.19e6 (2.00x)``; a total reads ``total: ...``."""
        where = "total" if self.function is None else self.function
        ratio = self.ratio
        tail = f" ({ratio:.2f}x)" if ratio is not None else ""
        return f"{where}: {self.metric} {number_text(self.base)} → {number_text(self.head)}{tail}"


@dataclass(frozen=True)
class ProgramChange:
    """A compiled function the step runs in the head only (new) or in the base only (gone)."""

    name: str  # "jit(isnan)"
    new: bool
    where: str | None  # the line that ran it, on the side that has it

    def text(self, against: str) -> str:
        """``new program jit(isnan) at t.py:44``; ``program jit(f) gone (base: t.py:40)``."""
        if self.new:
            return f"new program {self.name}" + (f" at {self.where}" if self.where else "")
        return f"program {self.name} gone" + (f" ({against}: {self.where})" if self.where else "")


@dataclass(frozen=True)
class ProgramCount:
    """A function that compiled more (or fewer) programs than the other side's: its memory
    figures are sums over its programs, so they are said per program, never as growth."""

    name: str  # "jit(step)"
    base: FunctionCost
    head: FunctionCost

    def text(self, against: str) -> str:
        """``jit(step): 2 programs where the base had 1 (each: argument 168 B, temp 864 B;
        argument 168 B, temp 864 B; base: argument 168 B, temp 864 B)``."""
        head, base = self.head, self.base
        had = f"{base.programs} program" + ("" if base.programs == 1 else "s")
        memory = [
            f"{p}: {fn.programs_memory()}"
            for p, fn in (("each", head), (against, base))
            if fn.programs_memory()
        ]
        each = f" ({'; '.join(memory)})" if memory else ""
        return f"{self.name}: {head.programs} programs where the {against} had {had}{each}"


@dataclass(frozen=True)
class CostComparison:
    """Head's step cost against the base's (or the stored baseline's): every figure that changed."""

    against: str  # "base" or "baseline"
    changes: tuple[CostChange, ...]  # totals first, then per function by name
    max_increase: float | None  # the rule's threshold; None: reported, never failing
    compared: bool = True  # False: a side was not measured; ``note`` says why
    note: str = ""
    programs: tuple[ProgramChange, ...] = ()  # new ones, then gone ones, each by name
    # Functions whose count of programs differs: their memory is said per program.
    counts: tuple[ProgramCount, ...] = ()
    # The step's work line by line (`gate.results.line_work`); None where a side has no
    # line table (`lines_note` says why, when a reader should know).
    lines: LineComparison | None = None
    lines_note: str = ""
    # Op time by line, base against head (`gate.results.line_times`): what a slower verdict
    # lists; None where a side has no per-op times.
    times: LineTimeComparison | None = None
    times_note: str = ""  # why ``times`` is None, where the head was traced
    base_trace: str | None = None  # the folder of the base's trace, where it was kept
    # Where the head's policy accepts this change, and why (`gate.compare.acceptance`).
    accepted: str = ""

    @property
    def changed(self) -> bool:
        """A program came or went, a function's count of programs or a line's work changed,
        or a figure changed by more than rounds to 1.00x."""
        moved = self.lines is not None and bool(self.lines.changes)
        return bool(self.programs or self.counts) or moved or any(c.notable for c in self.changes)

    def _shown(self, change: CostChange) -> bool:
        """A notable figure of its own: not a new or gone function's, nor the summed memory of
        a function whose programs were counted apart (`ProgramCount`)."""
        if change.function in {p.name for p in self.programs}:
            return False
        counted = change.function in {c.name for c in self.counts}
        return change.notable and not (counted and change.metric in MEMORY)

    def line_listing(self, most: int | None = LINES_LISTED) -> list[str]:
        """The lines that changed, most first, then new ones, then gone ones; or why the lines
        were not compared; [] when there is nothing to say."""
        if self.lines is None:
            return [f"lines not compared: {self.lines_note}"] if self.lines_note else []
        if not self.lines.changes:
            return []
        return self.lines.listing(self.against, most)

    def listing(self) -> list[str]:
        """Every change a reader is shown, one per line: the lines that changed (most first,
        new, gone), the programs that came or went, each with its figures (those not 0), then
        functions with more or fewer programs, then the figures that changed."""
        lines = self.line_listing()
        for program in self.programs:
            own = [c for c in self.changes if c.function == program.name]
            values = [(c.metric, c.head if program.new else c.base) for c in own]
            shown = ", ".join(f"{m} {number_text(v)}" for m, v in values if v)
            lines.append(program.text(self.against) + (f": {shown}" if shown else ""))
        lines += [count.text(self.against) for count in self.counts]
        lines += [c.text() for c in self.changes if self._shown(c)]
        quiet = sum(1 for c in self.changes if not c.notable)
        if quiet:
            lines.append(f"({_figures(quiet)} within 0.5%, not listed)")
        return lines

    @property
    def unchecked(self) -> str | None:
        """Why ``max_increase`` could not bound the step's totals; None when it could, or
        when no rule asks it to. A pass would claim a bound nobody checked, so it fails."""
        if self.max_increase is None:
            return None
        if not self.compared:
            return self.note
        lacking = [c for c in self.changes if c.one_sided]
        if not lacking:
            return None
        sides = "; ".join(
            f"total {c.metric} is absent in the {'head' if c.head is None else self.against}"
            for c in lacking
        )
        return f"{sides} (XLA gave it on one side only)"

    @property
    def failing(self) -> bool:
        if self.accepted:
            return False
        return self.unchecked is not None or any(c.failing for c in self.changes)

    def headline(self, most: int = 4) -> str:
        """One line: the failing totals and what changed in the functions on the same figures,
        and where the head's policy accepts the change."""
        return self._headline(most) + accepted_text(self.accepted)

    def _headline(self, most: int) -> str:
        unchecked = self.unchecked
        if unchecked is not None:
            return (
                f"cost not checked against the {self.against}: {unchecked}, so "
                f"cost.max_increase {self.max_increase:g}x cannot bound it"
            )
        if not self.compared:
            return f"cost not compared: {self.note}"
        if not self.changes and not self.changed:
            return f"cost unchanged against the {self.against}"
        if not self.changed:
            return f"cost unchanged against the {self.against}, to within 0.5%"
        failed = {c.metric for c in self.changes if c.failing}
        # A new or gone program leads, by name and line; its own figures say no more. A
        # function with more programs says so, its memory per program, not summed.
        figures = [c for c in self.changes if self._shown(c) or c.failing]
        # The line that changed most leads: it is where a reviewer looks first. A line that is
        # a new or gone program's own place is said by that program's entry.
        places = {p.where for p in self.programs}
        changes = self.lines.changes if self.lines is not None else ()
        top = [c for c in changes if c.shown.where not in places][:1]
        shown = [
            *(change.text(self.against) for change in top),
            *(p.text(self.against) for p in self.programs),
            *(c.text(self.against) for c in self.counts),
            *(c.text() for c in figures if c.metric in failed or not failed),
        ]
        more = len(shown) - most
        lead = (
            f"cost beyond {self.max_increase:g}x the {self.against}"
            if failed and self.max_increase is not None
            else f"cost changed against the {self.against}"
        )
        return f"{lead}: {'; '.join(shown[:most])}" + (f" (+{more} more)" if more > 0 else "")


def compare_costs(
    base: StepCost, head: StepCost, rule: CostRule, *, against: str = "base"
) -> CostComparison:
    """Every figure that differs, total and per function; a total beyond the rule fails.

    Only totals fail: a function renamed or split moves work between names
    without changing the step. A total that grows from 0 fails too (it has no
    ratio). Under a rule, a side that was not measured, or a total XLA gave on one
    side only, cannot be bounded: the comparison is `CostComparison.unchecked`, a
    failure, never a pass. Without a rule both are listed and nothing fails.
    """
    if not base.measured or not head.measured:
        side, cost = (against, base) if not base.measured else ("head", head)
        return CostComparison(against, (), rule.max_increase, False, f"{side}: {cost.note}")
    changes = []
    for metric in METRICS:
        old, new = base.total(metric), head.total(metric)
        if old != new:
            # head > base x limit, not the ratio: growth from 0 has no ratio and still fails.
            limit = rule.max_increase
            failing = (
                limit is not None and old is not None and new is not None and new > old * limit
            )
            changes.append(CostChange(None, metric, old, new, failing))
    old_fns = {fn.name: fn for fn in base.functions}
    new_fns = {fn.name: fn for fn in head.functions}
    for name in sorted(old_fns.keys() | new_fns.keys()):
        for metric in ("runs", *METRICS):
            old_value = _figure(old_fns.get(name), metric)
            new_value = _figure(new_fns.get(name), metric)
            if old_value != new_value:
                changes.append(CostChange(name, metric, old_value, new_value))
    programs = [
        ProgramChange(fn.name, True, fn.where)
        for name, fn in sorted(new_fns.items())
        if name not in old_fns
    ] + [
        ProgramChange(fn.name, False, fn.where)
        for name, fn in sorted(old_fns.items())
        if name not in new_fns
    ]
    counts = tuple(
        ProgramCount(name, old_fns[name], new_fns[name])
        for name in sorted(old_fns.keys() & new_fns.keys())
        if old_fns[name].programs != new_fns[name].programs
    )
    lines, lines_note = None, ""
    if base.lines is not None and head.lines is not None:
        lines = compare_lines(base.lines, head.lines)
    elif base.lines is None and head.lines is not None:
        lines_note = f"the {against} has no line table" + (
            "; run `transfer-gate baseline` to record it" if against == "baseline" else ""
        )
    times, times_note = None, ""
    if base.times is not None and head.times is not None:
        times = compare_line_times(base.times, head.times)
        if times is None:
            times_note = head.times.note or base.times.note or "no op of the trace was the step's"
    elif head.times is not None:
        times_note = f"the {against} has no op times" + (
            "; run `transfer-gate baseline` to record them" if against == "baseline" else ""
        )
    return CostComparison(
        against,
        tuple(changes),
        rule.max_increase,
        programs=tuple(programs),
        counts=counts,
        lines=lines,
        lines_note=lines_note,
        times=times,
        times_note=times_note,
        base_trace=base.times.trace if base.times is not None else None,
    )


def _figure(fn: FunctionCost | None, metric: str) -> float | None:
    if fn is None:
        return None
    return float(fn.runs) if metric == "runs" else fn.figure(metric)


def _figures(count: int) -> str:
    return "1 figure" if count == 1 else f"{count} figures"
