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

import math
from dataclasses import dataclass

from gate.policy.model import CostRule
from gate.results.collectives import Communication
from gate.results.constants import EmbeddedConstant, new_constants
from gate.results.donations import ReusedDonation, UnusedDonation
from gate.results.line_map import LineMap
from gate.results.line_times import (
    LineTimeChange,
    LineTimeComparison,
    OpTimes,
    compare_line_times,
)
from gate.results.line_work import (
    LINE_METRICS,
    LineChange,
    LineComparison,
    LineWork,
    compare_lines,
)
from gate.text import accepted_text, number_text, si_text, size_text

WORK = ("flops", "bytes_accessed", "transcendentals")
# A line whose work is unchanged heads a slower verdict only where its op time grew beyond
# this many times the drift of every such line in the traced runs (`evidenced_times`).
TIME_NOISE = 2.0
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
    # Its loops whose trip count is unknown, each counted once a run ("1 loop whose
    # trip count ..."); "" where every loop's runs are counted (`gate.witness.costs.Loops`).
    loops: str = ""

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
    # Each donated argument an output reuses: what a head that stopped donating one is
    # compared with. None: not read (as ``donations``, or a stored baseline from before the
    # gate kept them).
    reused: tuple[ReusedDonation, ...] | None = None
    # Work by source line (`gate.results.line_work`), in file and line order. None: not
    # counted (the cost was not measured, a program's text could not be read, or a stored
    # baseline from before the gate kept it).
    lines: tuple[LineWork, ...] | None = None
    # Op time by source line, from traced runs after the cost run (`gate.results.line_times`);
    # None: not traced (``timing: off``, or the cost was not measured).
    times: OpTimes | None = None
    # Arrays compiled into its programs as constants, of 1 MiB or more
    # (`gate.results.constants`); None: not read (a program's text could not be, a stored
    # baseline from before the gate kept them).
    constants: tuple[EmbeddedConstant, ...] | None = None
    # Its work counts each loop's trip count (`gate.witness.costs.Loops`); False for a stored
    # baseline recorded before the gate did, whose loops' bodies count once.
    loops_counted: bool = True
    # Some loop ran more than once a run, so counting its trip count added work: only then
    # do figures that counted loops once differ from these.
    loops_added: bool = False

    def total(self, metric: str) -> float | None:
        return dict(self.totals).get(metric)

    def headline(self) -> str:
        """``1.2 GFLOP/step``; "" when not measured or without a flop count. A loop whose trip
        count is unknown makes it a floor: ``≥ 1.2 GFLOP/step``."""
        flops = self.total("flops")
        if not self.measured or flops is None:
            return ""
        floor = "≥ " if any(fn.loops for fn in self.functions) else ""
        return f"{floor}{si_text(flops, 'FLOP')}/step"


def step_cost(
    functions: tuple[FunctionCost, ...],
    peak_memory: tuple[DevicePeak, ...] | None,
    note: str = "",
    *,
    comm: Communication | None = None,
    donations: tuple[UnusedDonation, ...] | None = None,
    lines: tuple[LineWork, ...] | None = None,
    constants: tuple[EmbeddedConstant, ...] | None = None,
) -> StepCost:
    """The step's record, its totals summed from its functions' figures."""
    totals = []
    for metric in METRICS:
        given = [f for f in (fn.figure(metric) for fn in functions) if f is not None]
        if given:
            totals.append((metric, float(sum(given))))
    ordered = tuple(sorted(functions, key=lambda fn: fn.name))
    return StepCost(
        ordered,
        tuple(totals),
        peak_memory,
        note,
        comm=comm,
        donations=donations,
        lines=lines,
        constants=constants,
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
    failing: bool = False  # a total beyond a bound of the rule (`bound`)
    # The rule's key whose bound it crossed and that bound: ``max_work_increase`` (a work
    # total, set or by default) or ``max_increase``; "" where it crossed none.
    bound: str = ""
    limit: float | None = None

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
    # The policy's region whose ``cost:`` accepts an intended increase, and the line where
    # its entry starts (0: unknown): the failing message names the edit there.
    region: str = ""
    policy_line: int = 0
    max_work_increase: float | None = None  # the rule's bound on the work totals
    # Constants the head's programs embed that the other side's do not: each fails.
    new_constants: tuple[EmbeddedConstant, ...] = ()
    # Why the work totals are not bounded by ``max_work_increase`` (a side counted each
    # loop's body once); "" where they are.
    work_note: str = ""
    # Where the head's policy accepts this change, and why (`gate.compare.acceptance`).
    accepted: str = ""

    @property
    def changed(self) -> bool:
        """A program came or went, a function's count of programs or a line's work changed,
        or a figure changed by more than rounds to 1.00x."""
        moved = self.lines is not None and bool(self.lines.changes)
        came = bool(self.programs or self.counts or self.new_constants)
        return came or moved or any(c.notable for c in self.changes)

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
        lines = [f"new {c.text()}: {c.fix}" for c in self.new_constants] + self.line_listing()
        for program in self.programs:
            own = [c for c in self.changes if c.function == program.name]
            values = [(c.metric, c.head if program.new else c.base) for c in own]
            shown = ", ".join(f"{m} {number_text(v)}" for m, v in values if v)
            lines.append(program.text(self.against) + (f": {shown}" if shown else ""))
        lines += [count.text(self.against) for count in self.counts]
        lines += [c.text() for c in self.changes if self._shown(c)]
        if self.work_note and any(c.metric in WORK for c in self.changes):
            lines.append(self.work_note)
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
        return (
            self.unchecked is not None
            or bool(self.new_constants)
            or any(c.failing for c in self.changes)
        )

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
        if self.new_constants:
            # A new constant leads: it is the change a reader acts on, with its fix.
            first, rest = self.new_constants[0], len(self.new_constants) - 1
            others = f" (+{rest} more)" if rest else ""
            lead = f"new {first.text()}, not in the {self.against}{others}: {first.fix}"
            return "; ".join([lead, *(c.text() for c in self.changes if c.failing)])
        failing = [c for c in self.changes if c.failing]
        failed = {c.metric for c in failing}
        # A new or gone program leads, by name and line; its own figures say no more. A
        # function with more programs says so, its memory per program, not summed.
        figures = [c for c in self.changes if self._shown(c) or c.failing]
        # Under a failing total, the line whose work in it grew most leads: the cause, not the
        # line whose other figures moved most. Otherwise the line that changed most: it is
        # where a reviewer looks first. A line that is a new or gone program's own place is
        # said by that program's entry. Never a line only compiled differently, nor the ops
        # of no source line.
        places = {p.where for p in self.programs}
        grown = self.grown_line(failed)
        changes = self.lines.changes if self.lines is not None else ()
        top = (
            [grown]
            if grown is not None
            else [c for c in changes if c.leads and c.shown.where not in places][:1]
        )
        # No line the change wrote does work of its own: name the change that compiled the
        # unchanged code differently, where the line map can tell (issue 57's `unroll=`).
        cause = self.lines.cause if self.lines is not None and not top else ""
        shown = [
            *(
                [
                    f"the change at {cause} compiled unchanged code differently (no line it wrote "
                    "does work of its own)"
                ]
                if cause
                else []
            ),
            *(change.text(self.against) for change in top),
            *(p.text(self.against) for p in self.programs),
            *(c.text(self.against) for c in self.counts),
            *(c.text() for c in figures if c.metric in failed or not failed),
        ]
        more = len(shown) - most
        if not failing:
            lead = f"cost changed against the {self.against}"
            return f"{lead}: {'; '.join(shown[:most])}" + (f" (+{more} more)" if more > 0 else "")
        bounds = dict.fromkeys((c.bound, c.limit) for c in failing)
        what = "work" if all(b == "max_work_increase" for b, _ in bounds) else "cost"
        beyond = " and ".join(f"{limit:g}x" for _, limit in bounds)
        lead = f"{what} beyond {beyond} the {self.against}"
        tail = f" (+{more} more)" if more > 0 else ""
        return f"{lead}: {'; '.join(shown[:most])}{tail}; {self.acceptance()}"

    def evidenced_times(self, at_least_s: float = 0.0) -> list[LineTimeChange]:
        """The lines whose op time grew by more than ``at_least_s`` and whose change rests on
        evidence, most grown first: their work changed (exactly, by `compare_lines`), or their
        time grew beyond what the traced runs' noise moved the lines whose work did not.

        The traced runs are few and share the machine: every line's time can drift together
        by a noise of 1.2x. That drift is the (lower) median head/base ratio of the other lines
        whose work is unchanged; such a line is evidence only beyond `TIME_NOISE` times it.
        Without a line table (the work not compared), every line that grew is named."""
        if self.times is None:
            return []
        grew = [c for c in self.times.changes if c.grown_s > max(at_least_s, 0.0)]
        if self.lines is None:
            return grew
        worked = {
            (side.path, side.line)
            for change in self.lines.changes
            for side in (change.base, change.head)
            if side is not None
        }

        def place(change: LineTimeChange) -> tuple[str, int] | None:
            line = change.head if change.head is not None else change.base
            return None if line is None else (line.path, line.line)

        def ratio(change: LineTimeChange) -> float | None:
            if change.base is None or change.head is None or change.base.seconds <= 0:
                return None
            return change.head.seconds / change.base.seconds

        same_work = [
            (c, r) for c in self.times.changes if place(c) not in worked and (r := ratio(c))
        ]

        def beyond_drift(change: LineTimeChange) -> bool:
            # The other lines' drift: the line's own growth must not widen its own bound.
            others = sorted(r for c, r in same_work if c is not change)
            drift = others[(len(others) - 1) // 2] if others else 1.0
            return (ratio(change) or 0.0) > TIME_NOISE * max(drift, 1.0)

        return [c for c in grew if place(c) in worked or beyond_drift(c)]

    def grown_line(self, metrics: set[str] | frozenset[str]) -> LineChange | None:
        """The line whose work in ``metrics`` grew most (a new line's all of it), among those
        that may head a verdict (`LineChange.leads`); None where no such line's did, or the
        lines were not compared."""
        if self.lines is None or not metrics:
            return None

        counted = [m for m in LINE_METRICS if m in metrics]
        if not counted:
            return None

        def growth(change: LineChange) -> float:
            return max(
                (change.head.figure(m) if change.head else 0.0)
                - (change.base.figure(m) if change.base else 0.0)
                for m in counted
            )

        grown = [c for c in self.lines.changes if c.leads and growth(c) > 0]
        return max(grown, key=growth, default=None)

    def acceptance(self) -> str:
        """The one reviewed edit that accepts the failing totals as intended: each crossed key
        of the region's ``cost:``, set just above the growth (for the stored baseline, also
        recording it again)."""
        needed: dict[str, float] = {}
        for change in self.changes:
            if not change.failing:
                continue
            # 2 decimals up: the ratio itself, printed, may round below the growth.
            ratio = change.ratio
            value = math.inf if ratio is None else math.ceil(ratio * 100) / 100
            # A work total beyond both bounds is accepted only when both are raised.
            work = self.max_work_increase if change.metric in WORK else None
            # The work bound never fails growth from 0 (`_total_change`): nothing to raise.
            work = work if ratio is not None else None
            for key, limit in (("max_work_increase", work), ("max_increase", self.max_increase)):
                if limit is not None and value > limit:
                    needed[key] = max(needed.get(key, 1.0), value)
        keys = ", ".join(f"{k}: {v:g}" for k, v in needed.items() if not math.isinf(v))
        where = f"region {self.region}" if self.region else "the region"
        if self.policy_line:
            where += f" (policy line {self.policy_line})"
        edits = [f"`cost: {{{keys}}}` in {where}"] if keys else []
        if any(math.isinf(v) for v in needed.values()):
            # No ratio accepts growth from 0 under max_increase: only leaving it unset does.
            edits.append(f"no `max_increase` in {where} (a total grew from 0)")
        edit = " and ".join(edits)
        if self.against == "baseline":
            return f"if intended, record the baseline again, or accept it with {edit}"
        # Against the base, this pull request's own acceptance (``accept: {cost: ...}``,
        # `gate.compare.acceptance`) is the edit the message ends with; the bound is the rule
        # every later change meets.
        return f"if every later change may do this too, raise the bound: {edit}"


def compare_costs(
    base: StepCost,
    head: StepCost,
    rule: CostRule,
    *,
    against: str = "base",
    lines: LineMap | None = None,
    region: str = "",
    policy_line: int = 0,
) -> CostComparison:
    """Every figure that differs, total and per function; a total beyond the rule fails.

    Only totals fail: a function renamed or split moves work between names
    without changing the step. A work total (`WORK`) fails beyond ``max_work_increase``,
    which has a default; any total beyond ``max_increase``, where set, and one that
    grows from 0 under it too (it has no ratio). Under ``max_increase``, a side that was
    not measured, or a total XLA gave on one side only, cannot be bounded: the comparison
    is `CostComparison.unchecked`, a failure, never a pass. ``lines``: git's line map
    (``run --base``), which pairs the work by line (`compare_lines`).
    """
    if not base.measured or not head.measured:
        side, cost = (against, base) if not base.measured else ("head", head)
        return CostComparison(against, (), rule.max_increase, False, f"{side}: {cost.note}")
    changes = []
    # A baseline whose loops counted their bodies once is no bound on work that counts them
    # all: a scan over 12 layers would read 12x. Its work is listed, not failed by default.
    work_note = ""
    uncounted = not (base.loops_counted and head.loops_counted)
    if uncounted and (base.loops_added or head.loops_added):
        work_note = (
            f"work not bounded: the {against} counted each loop's body "
            "once (recorded before the gate counted trip counts); run `transfer-gate baseline` "
            "to record it again"
        )
    for metric in METRICS:
        old, new = base.total(metric), head.total(metric)
        if old != new:
            bounded = not (work_note and metric in WORK)
            changes.append(_total_change(metric, old, new, rule, bounded=bounded))
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
    work, lines_note = None, ""
    if base.lines is not None and head.lines is not None:
        work = compare_lines(base.lines, head.lines, lines)
    elif base.lines is None and head.lines is not None:
        lines_note = f"the {against} has no line table" + (
            "; run `transfer-gate baseline` to record it" if against == "baseline" else ""
        )
    constants: tuple[EmbeddedConstant, ...] = ()
    if base.constants is not None and head.constants is not None:
        constants = new_constants(base.constants, head.constants)
    times, times_note = None, ""
    if base.times is not None and head.times is not None:
        times = compare_line_times(base.times, head.times, lines)
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
        lines=work,
        lines_note=lines_note,
        times=times,
        times_note=times_note,
        base_trace=base.times.trace if base.times is not None else None,
        region=region,
        policy_line=policy_line,
        max_work_increase=None if work_note else rule.max_work_increase,
        new_constants=constants,
        work_note=work_note,
    )


def _total_change(
    metric: str, old: float | None, new: float | None, rule: CostRule, *, bounded: bool = True
) -> CostChange:
    """A step total that changed, failing where it crossed a bound of ``rule``; listed only
    where not ``bounded`` (the sides counted loops differently)."""
    if not bounded:
        return CostChange(None, metric, old, new)
    bounds: list[tuple[str, float]] = []
    if metric in WORK and old:  # a default never fails growth from 0: it has no ratio
        bounds.append(("max_work_increase", rule.max_work_increase))
    if rule.max_increase is not None:
        bounds.append(("max_increase", rule.max_increase))
    # head > base x limit, not the ratio: growth from 0 has no ratio and still fails.
    crossed = [
        (limit, key)
        for key, limit in bounds
        if old is not None and new is not None and new > old * limit
    ]
    if not crossed:
        return CostChange(None, metric, old, new)
    limit, key = min(crossed)  # the tightest bound it crossed is the one it is said beyond
    return CostChange(None, metric, old, new, True, key, limit)


def _figure(fn: FunctionCost | None, metric: str) -> float | None:
    if fn is None:
        return None
    return float(fn.runs) if metric == "runs" else fn.figure(metric)


def _figures(count: int) -> str:
    return "1 figure" if count == 1 else f"{count} figures"
