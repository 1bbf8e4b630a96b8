"""A region kept loaded after its run, for ``run --base``: more timed runs, its outputs on the host.

The comparison with the base interleaves the two trees' timed runs in rounds
(`gate.compare.session`), so after its normal run a region stays in its worker,
imported and warmed up, and times as many more runs as each round asks for, as the
engine's own timed runs do (the call blocks on the outputs; boundaries interposed and
timed; setup untimed), on the core the round names (`gate.region.cores`), except that
setup runs once for all of them (`HeldRegion.sample`).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gate.jaxhooks.programs import RegionPrograms
from gate.region.boundary import BoundaryMonitor
from gate.region.callables import RegionCode
from gate.region.cores import pin
from gate.region.errors import RegionAbort, error_from
from gate.region.inputs import Inputs, StepInputs
from gate.region.outputs import host_leaves
from gate.results.comparison import StepOutputs, StepSamples
from gate.results.errors import ErrorKind
from gate.results.line_times import OpTimes


@dataclass
class HeldRegion:
    """A region that ran to its end in this worker, ready for more timed runs."""

    code: RegionCode
    inputs: StepInputs
    call: Callable[[Inputs], Any]  # the engine's own step call, blocking on the outputs
    monitor: BoundaryMonitor
    programs: RegionPrograms  # the region's own jit cache context, as in its run
    # The step deleted an input of a turn's first run (it donates it): setup for every run.
    donates: bool = False
    # The inputs every turn's runs take, made by setup for the first turn (unless it donates).
    turn_inputs: Inputs | None = None
    # Its traced runs, left for when the comparison asks (`gate.region.cost_phase`); None
    # when its step time is not compared or its cost run measured nothing.
    traced_later: Callable[[], OpTimes] | None = None

    def op_times(self) -> OpTimes | None:
        """The traced runs' op times by line, under the region's own programs, as its cost run
        made them; None where there are none to make (`traced_later`)."""
        if self.traced_later is None:
            return None
        with self.programs.entered():
            return self.traced_later()

    def sample(self, runs: int, cpu: int | None = None) -> StepSamples:
        """``runs`` more timed runs on ``cpu`` (None: any); an error of the step ends the round.

        Every turn's runs share one call of setup, the first turn's, unless the step donates
        its inputs (JAX deletes a donated array): a run times the step, and setup cost a
        short step several times its own time (on the 2-core machine, setup's ~1.1 ms
        against a 0.1 ms step; once a turn, after the other tree's turn had the core, 1.3 ms
        against a turn's 1.9 ms of runs, docs/performance-log.md). Both trees' turns are
        timed alike, so the comparison is unchanged; the watched runs, not these, are what
        need fresh inputs. The inputs live as long as the region is held: one set of them,
        which its turns needed anyway.
        """
        step_s: list[float] = []
        names = [name for name, _ in self.code.callables.boundaries]
        boundary_s: dict[str, list[float]] = {name: [] for name in names}
        try:
            pin(cpu)
            self.programs.keep_hooks()  # until the region is let go of
            with (
                self.programs.entered(),
                self.monitor.installed(self.code.callables.boundaries),
            ):
                for run in range(runs):
                    if self.turn_inputs is None or self.donates:
                        self.turn_inputs = self.inputs.for_timing()
                    inputs = self.turn_inputs
                    if names:  # a boundary's own times, run by run; none to reset else
                        self.monitor.reset_costs()
                    start = time.perf_counter()
                    try:
                        self.call(inputs)
                    except Exception as exc:
                        raise RegionAbort(error_from(self.code.user, ErrorKind.STEP, exc)) from exc
                    step_s.append(time.perf_counter() - start)
                    if run == 0 and not self.donates:  # the later runs reuse these inputs
                        self.donates = _deleted(inputs)
                    for cost in self.monitor.costs(1) if names else ():
                        boundary_s.setdefault(cost.name, []).append(cost.total_s)
        except RegionAbort as abort:
            return StepSamples(tuple(step_s), error=abort.error)
        return StepSamples(
            tuple(step_s),
            tuple((name, tuple(v)) for name, v in sorted(boundary_s.items())),
        )

    def outputs(self, outputs: Any, run: int | None = None) -> StepOutputs:
        """``outputs`` (one run's, from setup's inputs) on the host, and whether setup repeats;
        ``run``: that run's index, where setup has made others since (`Inputs.again`)."""
        _, leaves = host_leaves(outputs)
        # The inputs of the run whose outputs these are, twice: the same when setup repeats.
        first, count = _digest(self.inputs.again(run))
        second, _ = _digest(self.inputs.again(run))
        module = sys.modules.get(self.code.region.step.module)
        step_file = getattr(module, "__file__", None)
        return StepOutputs(
            tuple(leaves),
            first if first == second else None,
            count,
            os.path.abspath(step_file) if step_file else None,
        )


def _deleted(inputs: Inputs) -> bool:
    """Whether the step deleted one of its input arrays (it donated it)."""
    import jax

    return any(
        leaf.is_deleted()
        for leaf in jax.tree_util.tree_leaves(inputs)
        if hasattr(leaf, "is_deleted")
    )


def _digest(inputs: Inputs) -> tuple[str, int]:
    """A hash of the array leaves of ``inputs`` (paths, dtypes, shapes, bytes), and their count."""
    _, leaves = host_leaves(inputs)
    digest = hashlib.sha256()
    for path, value in leaves:
        digest.update(f"{path}\x1f{value.dtype}\x1f{value.shape}\x1e".encode())
        digest.update(value.tobytes())
    return digest.hexdigest(), len(leaves)


# What `gate.region.engine.run_region` hands a region that ran to its end, with its last outputs.
Keep = Callable[[HeldRegion, Any], None]
