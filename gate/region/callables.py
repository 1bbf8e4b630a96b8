"""A region's imported code, and where in the user's files its pieces are."""

from __future__ import annotations

import functools
import inspect
import linecache
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.policy.model import Policy, Region
from gate.policy.resolve import import_boundary, import_callable
from gate.user_code import SourceLocation, UserCode


@dataclass(frozen=True)
class Callables:
    """A region's imported code."""

    step: Callable[..., Any]
    setup: Callable[..., Any] | None
    boundaries: tuple[tuple[str, types.FunctionType], ...]
    custom: Callable[[Any], Any] | None
    # Each boundary's own code object, taken before the gate interposes it:
    # the frames of a boundary's body run this code.
    boundary_codes: dict[types.CodeType, str] = field(default_factory=dict)


# Code handed over already imported (`gate.api.check_region`), for the one region it belongs to:
# the engine then runs it exactly as it runs code a policy names.
_GIVEN: ContextVar[tuple[Region, Callables] | None] = ContextVar("given_callables", default=None)


@contextmanager
def given_callables(region: Region, callables: Callables) -> Iterator[None]:
    """While the block runs, `import_region` returns ``callables`` for ``region``."""
    token = _GIVEN.set((region, callables))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def import_region(policy: Policy, region: Region) -> Callables:
    """Import what ``region`` names; `ResolveError` if anything doesn't import."""
    given = _GIVEN.get()
    if given is not None and given[0] is region:
        return given[1]
    paths = policy.python_path
    boundaries = [(ref.spec, import_boundary(ref, paths)) for ref in region.boundaries]
    custom = region.checks.custom
    return Callables(
        step=import_callable(region.step, paths),
        setup=import_callable(region.setup, paths) if region.setup else None,
        boundaries=tuple(boundaries),
        custom=import_callable(custom, paths) if custom else None,
        boundary_codes={fn.__code__: name for name, fn in boundaries},
    )


@dataclass(frozen=True)
class RegionCode:
    """One region of a policy, its imported code, and which files are the user's."""

    policy: Policy
    region: Region
    user: UserCode
    callables: Callables

    @property
    def setup_spec(self) -> str:
        """How messages name setup: its ``module:qualname``."""
        return self.region.setup.spec if self.region.setup else "setup"

    def step_location(self) -> SourceLocation | None:
        """Where the step is defined (through ``jax.jit``'s ``__wrapped__``), if it is Python."""
        return self._step_location

    @functools.cached_property
    def _step_location(self) -> SourceLocation | None:
        # Asked by every mapped run and error of the region: read from the source once.
        return self.definition(self.callables.step)

    def definition(self, fn: Callable[..., Any]) -> SourceLocation | None:
        """The ``def`` line of ``fn`` (through decorators' ``__wrapped__``), if it is the user's."""
        code = getattr(inspect.unwrap(fn), "__code__", None)
        if code is None or not self.user.is_user(code.co_filename):
            return None
        line = code.co_firstlineno
        # co_firstlineno is the first decorator's line; name the `def` itself.
        for offset in range(20):
            text = linecache.getline(code.co_filename, line + offset).lstrip()
            if text.startswith(("def ", "async def ")):
                line += offset
                break
        return SourceLocation(self.user.relative(code.co_filename), line, code.co_name)

    def source_line(self, location: SourceLocation | None) -> str | None:
        """The text of ``location``'s line, stripped; None where there is none."""
        if location is None:
            return None
        path = Path(location.path)
        if not path.is_absolute():
            path = self.user.repo_root / path
        return linecache.getline(str(path), location.line).strip() or None

    def boundary_in(self, frames: list[traceback.FrameSummary]) -> str | None:
        """The innermost declared boundary whose body is among ``frames``."""
        by_code = {
            (code.co_filename, code.co_name): name
            for code, name in self.callables.boundary_codes.items()
        }
        for frame in reversed(frames):
            name = by_code.get((frame.filename, frame.name))
            if name is not None:
                return name
        return None
