"""The gate from Python: ``check_region(step, ...)`` runs one region in this process and judges it.

What a policy names as ``module:qualname`` strings is passed here as the callables
themselves, and the same engine runs them (`gate.region.engine.run_region`): the first call
with programs of the region's own (`gate.jaxhooks.programs`), warm-up, mapped and guarded
runs with every transfer charged to its line, boundaries, result checks and recompiles.
There is no worker process: the region runs in the caller's, so JAX's settings are the
caller's (docs/python-api.md).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import types
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from gate.levels import Direction, GuardLevel, GuardSpec
from gate.policy.defaults import default
from gate.policy.model import (
    CallableRef,
    Checks,
    DonationRule,
    LeakRule,
    MemoryRule,
    Policy,
    RecompileRule,
    Region,
)
from gate.report.terminal import format_region_failure
from gate.results.records import RegionResult

_Choice = TypeVar("_Choice", bound=Enum)

# A guard as a policy writes it: one level for every direction, or one per direction.
Guard = str | GuardLevel | GuardSpec | Mapping[str, str]

_CHECK_KEYS = ("finite", "reference", "rtol", "atol", "custom")


# The policy's defaults (`gate.policy.defaults`), so that a region means the same here.
_GUARD: Any = default("guard")
_WARMUP: int = default("warmup")
_GUARDED_RUNS: int = default("guarded_runs")
_RECOMPILES: str = default("recompiles")
_DONATION: str = default("donation")
_LEAKS: str = default("memory.leaks")


def check_region(
    step: Callable[..., Any],
    *,
    setup: Callable[[], Any] | None = None,
    guard: Guard = _GUARD,
    boundaries: Sequence[Callable[..., Any]] = (),
    warmup: int = _WARMUP,
    guarded_runs: int = _GUARDED_RUNS,
    repeats: int = 5,  # not the policy's 20: a test wants the verdict, not a timing
    checks: Mapping[str, Any] | None = None,
    recompiles: str | RecompileRule = _RECOMPILES,
    donation: str | DonationRule = _DONATION,
    leaks: str | LeakRule = _LEAKS,
) -> RegionResult:
    """Run ``step`` as a region in this process; its `RegionResult` (``.passed``, findings).

    The arguments mean what the policy keys of the same names mean (docs/policy.md), with
    callables in place of ``module:qualname``. ``checks`` takes the keys of the policy's
    ``checks:`` (``finite``, ``reference``, ``rtol``, ``atol``, ``custom``), and ``leaks`` the
    policy's ``memory: {leaks: ...}``. Files under the
    working directory are the user's: findings name their ``file:line``. A wrong argument
    raises `TypeError` or `ValueError`; the step's own errors are in the result.
    """
    from gate.region.callables import Callables, given_callables
    from gate.region.engine import run_region

    root = Path.cwd()
    step_ref = _ref(step, "step", root)
    custom = (checks or {}).get("custom")
    if custom is not None and not callable(custom):
        raise TypeError(
            f"checks['custom'] is {type(custom).__name__}, not callable; pass a function"
        )
    named = [(_ref(fn, "boundary", root), _boundary(fn)) for fn in boundaries]
    file, line = _defined_at(step, root) or (Path("<step>"), 0)
    region = Region(
        name=step_ref.qualname,
        line=line,
        step=step_ref,
        setup=_ref(setup, "setup", root) if setup is not None else None,
        boundaries=tuple(ref for ref, _ in named),
        guard=_guard(guard),
        warmup=_count("warmup", warmup, 0),
        guarded_runs=_count("guarded_runs", guarded_runs, 1),
        repeats=_count("repeats", repeats, 1),
        timeout_s=float(default("timeout_s")),  # only workers time out
        checks=_checks(checks, root, _ref(custom, "custom", root) if custom else None),
        recompiles=_choice(RecompileRule, recompiles, "recompiles"),
        donation=_choice(DonationRule, donation, "donation"),
        memory=MemoryRule(leaks=_choice(LeakRule, leaks, "leaks")),
    )
    policy = Policy(path=file, version=1, suite=step_ref.module, python_path=(), regions=(region,))
    code = Callables(
        step=step,
        setup=setup,
        boundaries=tuple((ref.spec, fn) for ref, fn in named),
        custom=custom,
        boundary_codes={fn.__code__: ref.spec for ref, fn in named},
    )
    with given_callables(region, code):
        # Nothing here compares step times, so no traced runs: they would name no line.
        return run_region(policy, region, repo_root=root, traced=False)


def format_failure(result: RegionResult) -> str:
    """A failing ``result`` as a test failure: the verdict and first failing ``file:line``, then
    what ``transfer-gate run`` prints for it (its row, findings, fixes), the platform last."""
    return format_region_failure(result)


def _ref(fn: Callable[..., Any], role: str, root: Path) -> CallableRef:
    """A ``module:qualname`` for ``fn``, as reports name the callables a policy names.

    There is no policy line to point at: messages name where ``fn`` itself is defined.
    """
    if not callable(fn):
        raise TypeError(f"{role} is {type(fn).__name__}, not callable; pass a function")
    inner = inspect.unwrap(fn)
    module = getattr(inner, "__module__", None) or "__main__"
    qualname = getattr(inner, "__qualname__", None) or type(fn).__name__
    found = _defined_at(fn, root)
    defined_at = None if found is None else f"{found[0].as_posix()}:{found[1]}"
    return CallableRef(f"{module}:{qualname}", module, qualname, 0, defined_at)


def _boundary(fn: Callable[..., Any]) -> types.FunctionType:
    # The gate patches a boundary's code object (`gate.region.boundary`) and tells boundaries
    # apart by their function's name: only a named, plain Python function will do.
    if not isinstance(fn, types.FunctionType) or fn.__name__ == "<lambda>":
        raise TypeError(
            f"boundary {fn!r} is not a named plain Python function; pass the `def` function "
            "that calls jax.device_get (not a lambda, a partial or a jitted function)"
        )
    return fn


def _defined_at(fn: Callable[..., Any], root: Path) -> tuple[Path, int] | None:
    """``fn``'s file (relative to ``root`` when under it) and its first line; None: no Python.

    Through ``jax.jit``'s and ``functools.wraps``' ``__wrapped__`` to the function inside; a
    lambda's first line is the lambda's own.
    """
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return None
    path = Path(os.path.realpath(code.co_filename))
    with contextlib.suppress(ValueError):  # outside the working directory: named in full
        path = path.relative_to(root.resolve())
    return path, code.co_firstlineno


def _guard(guard: Guard) -> GuardSpec:
    if isinstance(guard, GuardSpec):
        return guard
    if isinstance(guard, str | GuardLevel):
        return GuardSpec.uniform(_choice(GuardLevel, guard, "guard"))
    unknown = sorted(set(guard) - {d.value for d in Direction})
    if unknown:
        keys = ", ".join(d.value for d in Direction)
        raise ValueError(f"guard has unknown direction {unknown[0]!r}; use {keys}")
    levels = {
        d.value: _choice(GuardLevel, guard[d.value], f"guard[{d.value!r}]")
        if d.value in guard
        else GuardLevel.DISALLOW
        for d in Direction
    }
    return GuardSpec(**levels)


def _choice(kind: type[_Choice], value: str | _Choice, where: str) -> _Choice:
    """``value`` as one of ``kind``'s members; ValueError naming ``where`` and the choices."""
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(member.value for member in kind)
        raise ValueError(f"{where} is {value!r}; use one of {names}") from None


def _count(name: str, value: int, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} is {value!r}; pass an int of at least {least}")
    return value


def _checks(checks: Mapping[str, Any] | None, root: Path, custom: CallableRef | None) -> Checks:
    given = dict(checks or {})
    unknown = sorted(set(given) - set(_CHECK_KEYS))
    if unknown:
        raise ValueError(f"checks has unknown key {unknown[0]!r}; use {', '.join(_CHECK_KEYS)}")
    reference = given.get("reference")
    return Checks(
        finite=bool(given.get("finite", False)),
        # Relative to the working directory, as the user's files are.
        reference=None if reference is None else root / Path(reference),
        rtol=float(given.get("rtol", default("checks.rtol"))),
        atol=float(given.get("atol", default("checks.atol"))),
        custom=custom,
    )
