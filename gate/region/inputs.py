"""Fresh inputs from setup for every run, refused when the step cannot take them.

Every run gets its own: a value whose host copy was already fetched hides
the next transfer of it. A setup with a parameter (``def setup(run):``) is handed the run's
index, 0 for the first call and one more for each run after it, as a training loop hands its
step the step number: a bug that shows only as the loop's state moves on (a learning rate
computed in Python each step, compiled again each step) then shows in the region too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

from gate.jaxhooks.programs import shared_programs
from gate.policy.signature import misfit_text
from gate.region.callables import RegionCode
from gate.region.errors import RegionAbort, error_from
from gate.region.fetch_watch import FetchWatch
from gate.region.verdict import Verdict
from gate.results.errors import ErrorKind, RegionError
from gate.witness.fetches import DetectorUnavailable
from gate.witness.host_copies import array_leaves, host_copy_cached, reused_leaves

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

# The most bytes of setup's arrays the timed runs make ahead of their clocks (`timed`): one wait
# for a batch instead of one a run, and no more device memory held than this beside the step's.
TIMED_BATCH_BYTES = 64 * 2**20


@dataclass
class StepInputs:
    """Setup's outputs, made anew for each run and checked against the step."""

    code: RegionCode
    watch: FetchWatch
    verdict: Verdict  # where warnings about the inputs go
    # The last run's array leaves as setup handed them over, held (so their ids stay
    # theirs). Not the containers: a module setup hands back again, holding fresh arrays
    # (an NNX model updated in place), is no reuse; comparing it later would compare
    # what it holds now, the same on both sides.
    previous: list[Any] | None = None
    made: int = 0  # setup's calls so far: the run index the next one is handed
    last: int = 0  # the run index of the inputs made last

    @functools.cached_property
    def takes_run(self) -> bool:
        setup = self.code.callables.setup
        return setup is not None and takes_run(setup)

    def fresh(self, *, settled: bool = False) -> Inputs:
        """Setup's outputs for a watched run (or one whose outputs are judged): made under
        the detector, so that what setup reads counts as host-cached (as on a GPU) and is
        not taken for the step's fetch, and checked against the step. ``settled``: waited
        for, as `for_timing` waits (the cost run reads the devices' memory marks after)."""
        made = self._made(watched=True)
        checked = made if self.code.callables.setup is None else self._checked(made)
        return _settled(checked) if settled else checked

    def for_timing(self) -> Inputs:
        """Setup's outputs for a timed run, made and checked as `fresh` made them before.

        After the watched runs nothing is watched any more: what setup reads cannot hide a
        later fetch, and installing the detector around each call (a patch set, ~0.5 ms)
        and binding the outputs to the step again would be most of a short step's timed run.
        Waited for: setup's device work (a GPU runs it asynchronously) must be done before
        the step's clock starts, or the step is charged for it.
        """
        return _settled(self._made(watched=False))

    def timed(self, runs: int) -> Iterator[Inputs]:
        """Setup's outputs for ``runs`` timed runs, one each, as `for_timing` makes them, but
        made a batch at a time and waited for once a batch.

        Waiting costs a round trip to the device for each wait (~0.5 ms a run on a TPU v5e,
        half the gate's extra time in the timed runs), and a wait a run also keeps setup's
        device work from overlapping setup's own next call. A batch holds at most
        `TIMED_BATCH_BYTES` of arrays (at least one run's inputs), so inputs that are large
        (a model's parameters made by setup) are still made one run at a time. Each run's
        inputs are let go of as that run takes them.
        """
        left = runs
        while left > 0:
            batch = [self._made(watched=False)]
            each = max(1, _array_bytes(batch[0]))
            while len(batch) < min(left, TIMED_BATCH_BYTES // each):
                batch.append(self._made(watched=False))
            _settled(batch)
            left -= len(batch)
            batch.reverse()
            while batch:
                yield batch.pop()

    def again(self, index: int | None = None) -> Inputs:
        """The inputs of the last run made again, for the same run index (or of run ``index``,
        one read from `last` earlier): two such calls give the same arrays when setup is
        deterministic, as the comparison with the base needs."""
        return self._made(watched=True, index=self.last if index is None else index)

    def _made(self, *, watched: bool, index: int | None = None) -> Inputs:
        setup = self.code.callables.setup
        if setup is None:
            return (), {}
        if index is None:
            index, self.made = self.made, self.made + 1
        self.last = index
        try:
            # Setup's programs are shared by every region of the worker: traced once, not
            # once per region as the step's are (`gate.jaxhooks.programs`). No run's log is
            # open while it runs.
            with self.watch.detector() if watched else nullcontext(), shared_programs():
                made = setup(index) if self.takes_run else setup()
        except Exception as exc:
            raise RegionAbort(error_from(self.code.user, ErrorKind.SETUP, exc)) from exc
        if isinstance(made, tuple):
            return made, {}
        if isinstance(made, dict) and all(isinstance(k, str) for k in made):
            return (), made
        raise RegionAbort(
            RegionError(
                ErrorKind.BAD_INPUT,
                f"{self.code.setup_spec} returned {type(made).__name__}; return a tuple of "
                "positional arguments for the step (e.g. `return (params, batch)`) or a dict "
                "of keyword arguments",
                f"setup returned {made!r:.500}",
            )
        )

    def _checked(self, inputs: Inputs) -> Inputs:
        """Refuse inputs the step cannot take; warn when they could hide a transfer."""
        code = self.code
        misfit = misfit_text(code.policy, code.region, code.callables.step, inputs)
        if misfit is not None:
            raise RegionAbort(RegionError(ErrorKind.MISFIT, *misfit))
        setup = code.setup_spec
        if self.previous is not None:
            reused = reused_leaves(self.previous, inputs)
            if reused:
                self.verdict.warn(
                    f"{setup} handed back the same array objects as the last run "
                    f"({', '.join(reused[:3])}): a value fetched once hides the next fetch "
                    "of it; build new arrays in setup"
                )
        try:
            if host_copy_cached(inputs):
                self.verdict.warn(
                    f"{setup} returned arrays whose value the host already read (in setup, at "
                    "import or in an earlier run): their host copy is cached (on CPU the gate "
                    "models a GPU's cache), so the step's read of them moves nothing and a "
                    "fetch there cannot be seen; build new arrays in setup"
                )
        except DetectorUnavailable:
            pass  # this JAX keeps no visible host copy; nothing to warn about
        self.previous = array_leaves(inputs)
        return inputs


def takes_run(setup: Callable[..., Any]) -> bool:
    """Whether ``setup`` is to be handed the run's index: it has a parameter a call must give
    (one without a default), as ``def setup(run):`` has."""
    try:
        parameters = inspect.signature(setup).parameters.values()
    except (TypeError, ValueError):  # a builtin or a C callable that hides its signature
        return False
    return any(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in parameters
    )


def _array_bytes(inputs: Inputs) -> int:
    """The bytes of the arrays among ``inputs``' leaves (JAX's and NumPy's)."""
    import jax

    return sum(
        int(getattr(leaf, "nbytes", 0))
        for leaf in jax.tree_util.tree_leaves(inputs)
        if isinstance(leaf, jax.Array) or hasattr(leaf, "__array_interface__")
    )


_Made = TypeVar("_Made")


def _settled(inputs: _Made) -> _Made:
    """``inputs`` once setup's device work on them is done: no later clock or memory mark
    charges it to the step."""
    import jax

    jax.block_until_ready(inputs)
    return inputs
