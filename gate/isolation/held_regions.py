"""What a worker keeps between requests: the region it holds, and its outputs until they are sent
(on the host with the job's reply, or on the device until `Fetch` asks, `Job.fetch_later`).

A worker runs one tree's code (``run --base`` starts the base's regions in workers of their own,
`gate.compare.session`), each request with the tree's root and its policy's python_path first
on `sys.path` (`gate.policy.resolve.running_from`). It holds at most one region, loaded for
more timed runs (`gate.region.held`), and lets go of it when the next job comes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from gate.isolation.protocol import Check, Checked, Job, Turns
from gate.policy.resolve import running_from
from gate.region.cores import unpin

if TYPE_CHECKING:  # the region engine is imported only when a region runs
    from gate.region.held import HeldRegion, Keep
from gate.results.comparison import StepOutputs, StepSamples
from gate.results.errors import RegionError, gate_fault
from gate.results.line_times import OpTimes
from gate.user_code import UserCode


class HeldRegions:
    """The region this worker holds, and a held region's outputs until they are sent."""

    def __init__(self) -> None:
        self.region: HeldRegion | None = None
        self._outputs: StepOutputs | None = None
        # A `fetch_later` job's region, its outputs as the step returned them, and the index of
        # the run they came from (the region's later phases call setup again), until `fetch`
        # or the next job.
        self._unfetched: tuple[HeldRegion, object, int | None] | None = None

    def release(self) -> None:
        """Let go of the held region, if any: a new job replaces it (the gate is done with it)."""
        self._unfetched = None
        region, self.region = self.region, None
        if region is not None:
            region.programs.let_go(region.code.callables.step)
        unpin()  # its timed runs' core: the new region compiles on every core

    def keeper(self, job: Job) -> Keep | None:
        """What keeps ``job``'s region when it runs to its end, if the job asks for that."""
        if not (job.hold or job.outputs):
            return None

        def keep(region: HeldRegion, outputs: object) -> None:
            """Hold ``region`` with its outputs on the host (or as they are, for `fetch`).
            Raises what fetching them raises: the user's setup failing is the region's error
            (`RegionAbort`), anything else a gate fault (`run_job`), never a comparison
            quietly not made."""
            if job.fetch_later:
                self._unfetched = (region, outputs, region.inputs.last)
            else:
                self._outputs = region.outputs(outputs)
            if job.hold:
                self.region = region

        return keep

    def fetch(self) -> tuple[StepOutputs | None, RegionError | None]:
        """The kept outputs on the host, as `keep` would have fetched them: with the region's
        tree on `sys.path` and its own programs; the user's setup failing as it repeats is
        the region's error. (None, None) when none are kept (a gate bug, said by the parent)."""
        from gate.region.errors import RegionAbort

        if self._unfetched is None:
            return None, None
        (region, outputs, run), self._unfetched = self._unfetched, None
        try:
            with _running(region), region.programs.entered():
                return region.outputs(outputs, run), None
        except RegionAbort as abort:
            return None, abort.error
        except Exception as exc:  # a gate bug: the comparison says so, never passes quietly
            return None, gate_fault("fetching this region's outputs", exc)

    def take_outputs(self) -> StepOutputs | None:
        """The held region's outputs, until they are sent."""
        outputs, self._outputs = self._outputs, None
        return outputs

    def time(self, job: Turns) -> tuple[StepSamples, ...]:
        """Each turn's timed runs, in order; the first that fails is the last."""
        region = self.region
        if region is None:
            doing = "asking for timed runs of a region this worker does not hold"
            return (StepSamples((), error=gate_fault(doing)),)
        done: list[StepSamples] = []
        for turn in job.turns:
            try:
                with _running(region):
                    samples = region.sample(turn.runs, turn.cpu)
            except Exception as exc:  # a gate bug; the step's own error is in the samples
                samples = StepSamples((), error=gate_fault("timing this region", exc))
            done.append(samples)
            if samples.error is not None:
                break
        return tuple(done)

    def trace(self) -> OpTimes | None:
        """The held region's traced runs, on every core (a round pinned the last turn's); None
        when no region is held or it has none to make."""
        unpin()
        region = self.region
        if region is None:
            return None
        try:
            with _running(region):
                return region.op_times()
        except Exception as exc:  # a gate bug: said where the lines would have been
            fault = gate_fault("tracing this region", exc)
            return OpTimes.not_traced(fault.message)

    def check(self, job: Check) -> Checked:
        """Import what ``job`` names from its tree: the problems found."""
        from gate.policy.resolve import check_callables, check_named
        from gate.region.fetch_watch import watching_reads

        paths = tuple(p for policy in job.policies for p in policy.python_path)
        # A module that reads an array when imported leaves it cached on the host: the
        # detector must know, as when a region imports it (`gate.region.engine`).
        with running_from(job.root), watching_reads(UserCode(job.root, paths)):
            problems = [p for policy in job.policies for p in check_callables(policy, job.root)]
            for named in job.named:
                problems += check_named(named.path, named.refs, named.python_path, job.root)
        return Checked(job.number, tuple(problems))


def _running(region: HeldRegion) -> AbstractContextManager[None]:
    """``region``'s tree is where its code runs from, as in its run."""
    return running_from(region.code.user.repo_root, region.code.policy.python_path)
