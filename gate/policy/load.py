"""Policy files: find them, load them, and say exactly what is wrong with them.

A policy is read in three passes over the node tree from `yaml.compose`, so
every problem keeps its line: the YAML itself (tags, duplicate keys, aliases;
`gate.policy.yaml_check`), the schema (`gate/policy/policy.schema.json`, walked by
`gate.policy.schema`), then what the schema cannot say (unique region names, files that
must exist; `gate.policy.meaning`). Every problem
of a file is collected and raised together in one `PolicyError`. Nothing in a
policy is ever constructed beyond plain strings, numbers, booleans, lists and
mappings, so a hostile tag such as ``!!python/object/apply`` runs nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from gate.files import policy_files_in, way_out
from gate.levels import Direction, GuardLevel, GuardSpec
from gate.limits import POLICY_BYTES, TooLarge, read_within
from gate.policy.acceptance import accepted_of
from gate.policy.defaults import default
from gate.policy.meaning import check_meaning
from gate.policy.model import (
    Checks,
    CollectiveRule,
    CompareRule,
    CostRule,
    DonationRule,
    DriftRule,
    LeakRule,
    MemoryRule,
    NamedCallable,
    NamedCallables,
    Policy,
    RecompileRule,
    Region,
    TimingAction,
    TimingRule,
)
from gate.policy.nodes import callable_of, key_line, line_of, mapping_of, string_of
from gate.policy.problems import PolicyError, Problem, absolute_path, display_path
from gate.policy.schema import json_type, scalar_value, validate
from gate.policy.yaml_check import YamlCheck, yaml_error

# What other modules import from here; `gate.cli.main`, `gate.policy.resolve` and
# `gate.policy.signature` take the problem records from here too, and mypy's strict
# no-implicit-reexport accepts re-exported names only when listed.
__all__ = [
    "BUILTIN_DEFAULTS",
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "callables_of_invalid",
    "discover_policy_files",
    "load_policy",
]

# libyaml when PyYAML was built with it, as pre-commit does; both only compose.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What a region gets when neither it nor `defaults:` sets a key: the schema's defaults
# (`gate.policy.defaults`), the README's and docs/policy.md's (tests/test_docs.py).
BUILTIN_DEFAULTS: dict[str, Any] = {
    key: default(key)
    for key in (
        "guard",
        "warmup",
        "guarded_runs",
        "repeats",
        "timeout_s",
        "recompiles",
        "collectives",
        "donation",
        "compare",
    )
}
DEFAULT_RTOL: float = default("checks.rtol")
DEFAULT_ATOL: float = default("checks.atol")

_TOO_DEEP = "invalid YAML: lists and mappings nested too deeply; flatten the policy"
_TOO_LARGE_FIX = (
    "a policy names regions and their settings, not data: split it into several policy files"
)


def discover_policy_files(paths: Sequence[str], repo_root: Path) -> list[Path]:
    """The policy files named by ``paths``: files as given, folders' ``*.yaml``/``*.yml``.

    Relative paths are taken relative to ``repo_root``. Folders are searched
    recursively (hidden folders excepted): a policy left out of the run would
    be a silent pass. Returns absolute paths, sorted, each once; raises
    `PolicyError` naming every path that is missing or holds no policy.
    """
    root = absolute_path(repo_root)
    found: set[Path] = set()
    problems: list[Problem] = []
    for given in paths:
        target = absolute_path(root / given)
        try:
            target.stat()
        except FileNotFoundError:
            pass  # said below, with the other missing paths
        except OSError as exc:  # a name too long for the file system, a folder not ours to read
            problems.append(
                Problem(
                    given,
                    None,
                    "",
                    f"cannot be read ({exc.strerror}); pass a policy file or a folder",
                )
            )
            continue
        if target.is_dir():
            files = list(policy_files_in(target))
            if not files:
                problems.append(
                    Problem(
                        given,
                        None,
                        "",
                        "no policy files (*.yaml, *.yml) in this folder;"
                        " add one (see README) or pass a file",
                    )
                )
            found.update(files)
        elif target.exists():
            found.add(target)
        else:
            problems.append(
                Problem(given, None, "", "no such file or folder; pass a policy file or a folder")
            )
    for file in sorted(found):
        # A name that is not UTF-8 (Python keeps its bytes as lone surrogates) could be written
        # to no report: the suite is named after the file.
        try:
            os.fsencode(file).decode("utf-8")
        except UnicodeDecodeError:
            problems.append(
                Problem(
                    display_path(file, root),
                    None,
                    "",
                    "the file's name is not UTF-8 text, which no report can hold; rename it",
                )
            )
    if problems:
        raise PolicyError(problems)
    return sorted(found)


def load_policy(path: Path, repo_root: Path, *, write_references: bool = False) -> Policy:
    """Parse and validate one policy file.

    A relative ``path`` is taken relative to ``repo_root``. Raises `PolicyError`
    with every problem found in the file. Callables are only checked for form
    here; `gate.policy.resolve.check_callables` imports them. With ``write_references``
    (``run --write-references``) reference files need not exist yet: the run
    writes them.
    """
    root = absolute_path(repo_root)
    file = absolute_path(root / path)
    shown = display_path(file, root)

    def fail(line: int | None, message: str) -> PolicyError:
        return PolicyError([Problem(shown, line, "", message)])

    try:
        data = read_within(file, POLICY_BYTES)
    except OSError as exc:
        raise fail(None, f"cannot read the file ({exc.strerror})") from None
    except TooLarge as exc:
        raise fail(None, f"the file is {exc} for a policy; {_TOO_LARGE_FIX}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        byte = data[exc.start : exc.start + 1].hex()
        raise fail(bad_line, f"not UTF-8 text (byte 0x{byte}); save the file as UTF-8") from None
    try:
        document = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        line, message = yaml_error(exc, text)
        raise fail(line, message) from None
    except RecursionError:
        raise fail(None, _TOO_DEEP) from None
    if document is None or (json_type(document) == "null" and not document.value):
        # No document, or only `---`.
        raise fail(1, "policy is empty: start it with `version: 1` (see README)")

    checker = YamlCheck()
    try:
        violations = checker.run(document)
        if checker.walkable:
            violations += validate(document)
            violations += check_meaning(document, file.parent, root, write_references)
    except RecursionError:
        raise fail(None, _TOO_DEEP) from None
    if violations:
        problems = [Problem(shown, v.line, v.where, v.message) for v in violations]
        raise PolicyError(sorted(problems, key=lambda p: p.line or 0))
    return _build(document, Path(shown), file, write_references)


# --- building the Policy ------------------------------------------------------


def _build(document: yaml.Node, shown: Path, file: Path, write_references: bool) -> Policy:
    """The `Policy` for a document that passed every check."""
    top = mapping_of(document)
    policy_dir = file.parent
    defaults = mapping_of(top.get("defaults"))

    def value(mapping: dict[str, yaml.Node], key: str, fallback: Any) -> Any:
        node = mapping.get(key)
        return fallback if node is None else scalar_value(node)

    inherited = {
        key: value(defaults, key, v) for key, v in BUILTIN_DEFAULTS.items() if key != "guard"
    }
    default_guard = _guard(
        defaults.get("guard"), GuardSpec.uniform(GuardLevel(BUILTIN_DEFAULTS["guard"]))
    )
    default_timing = _timing(defaults.get("timing"), TimingRule())
    default_cost = _cost(defaults.get("cost"), CostRule())
    default_memory = _memory(defaults.get("memory"), MemoryRule())

    regions = []
    for region_node in top["regions"].value:
        region = mapping_of(region_node)
        checks = mapping_of(region.get("checks"))
        reference = string_of(checks.get("reference"))
        custom = checks.get("custom")
        regions.append(
            Region(
                name=str(value(region, "name", None)),
                line=line_of(region_node),
                step=callable_of(region["step"]),
                setup=callable_of(region["setup"]) if "setup" in region else None,
                boundaries=tuple(callable_of(n) for n in region["boundaries"].value)
                if "boundaries" in region
                else (),
                guard=_guard(region.get("guard"), default_guard),
                warmup=int(value(region, "warmup", inherited["warmup"])),
                guarded_runs=int(value(region, "guarded_runs", inherited["guarded_runs"])),
                repeats=int(value(region, "repeats", inherited["repeats"])),
                timeout_s=float(value(region, "timeout_s", inherited["timeout_s"])),
                recompiles=RecompileRule(value(region, "recompiles", inherited["recompiles"])),
                collectives=CollectiveRule(value(region, "collectives", inherited["collectives"])),
                donation=DonationRule(value(region, "donation", inherited["donation"])),
                compare=CompareRule(value(region, "compare", inherited["compare"])),
                timing=_timing(region.get("timing"), default_timing),
                cost=_cost(region.get("cost"), default_cost),
                memory=_memory(region.get("memory"), default_memory),
                accept=accepted_of(region.get("accept")),
                accept_line=key_line(region_node, "accept"),
                checks=Checks(
                    finite=bool(value(checks, "finite", False)),
                    reference=absolute_path(policy_dir / reference)
                    if reference is not None
                    else None,
                    rtol=float(value(checks, "rtol", DEFAULT_RTOL)),
                    atol=float(value(checks, "atol", DEFAULT_ATOL)),
                    custom=callable_of(custom) if custom is not None else None,
                    write_reference=write_references and reference is not None,
                ),
            )
        )
    path_list = top.get("python_path")
    return Policy(
        path=shown,
        version=int(value(top, "version", 1)),
        suite=str(value(top, "suite", file.stem)),
        python_path=tuple(absolute_path(policy_dir / str(scalar_value(n))) for n in path_list.value)
        if path_list is not None
        else (),
        regions=tuple(regions),
        platform=str(value(top, "platform", "")) or None,
        env=tuple(
            sorted(
                (str(scalar_value(k)), str(scalar_value(v)))
                for k, v in (top["env"].value if "env" in top else [])
            )
        ),
        drift=_drift(top.get("drift")),
    )


def _timing(node: yaml.Node | None, inherited: TimingRule) -> TimingRule:
    """A ``timing:`` setting; keys it leaves out keep ``inherited``'s (``defaults:``)."""
    if node is None:
        return inherited
    if isinstance(node, yaml.ScalarNode):  # `timing: off`, which YAML reads as false
        return replace(inherited, compare=False)
    keys = {str(scalar_value(k)): scalar_value(v) for k, v in node.value}
    return replace(
        inherited,
        compare=True,
        max_slowdown=float(keys.get("max_slowdown", inherited.max_slowdown)),
        baseline_max_slowdown=float(
            keys.get("baseline_max_slowdown", inherited.baseline_max_slowdown)
        ),
        on_regression=TimingAction(keys.get("on_regression", inherited.on_regression.value)),
        on_inconclusive=TimingAction(keys.get("on_inconclusive", inherited.on_inconclusive.value)),
        rounds=int(keys.get("rounds", inherited.rounds)),
        max_rounds=int(keys.get("max_rounds", inherited.max_rounds)),
        round_runs=int(keys.get("round_runs", inherited.round_runs)),
        boundaries=bool(keys.get("boundaries", inherited.boundaries)),
    )


def _drift(node: yaml.Node | None) -> DriftRule:
    """The ``drift:`` setting; keys it leaves out keep their defaults."""
    if node is None:
        return DriftRule()
    keys = {str(scalar_value(k)): scalar_value(v) for k, v in node.value}
    rule = DriftRule()
    return DriftRule(
        window=int(keys.get("window", rule.window)),
        runs=int(keys.get("runs", rule.runs)),
        max_step_time=float(keys.get("max_step_time", rule.max_step_time)),
        max_flops=float(keys.get("max_flops", rule.max_flops)),
        max_bytes_accessed=float(keys.get("max_bytes_accessed", rule.max_bytes_accessed)),
        max_peak_memory=float(keys.get("max_peak_memory", rule.max_peak_memory)),
    )


def _cost(node: yaml.Node | None, inherited: CostRule) -> CostRule:
    if node is None:
        return inherited
    keys = {str(scalar_value(k)): scalar_value(v) for k, v in node.value}
    limit = keys.get("max_increase", inherited.max_increase)
    work = keys.get("max_work_increase", inherited.max_work_increase)
    return CostRule(
        max_increase=None if limit is None else float(limit), max_work_increase=float(work)
    )


def _memory(node: yaml.Node | None, inherited: MemoryRule) -> MemoryRule:
    """A ``memory:`` setting; keys it leaves out keep ``inherited``'s (``defaults:``)."""
    if node is None:
        return inherited
    keys = {str(scalar_value(k)): scalar_value(v) for k, v in node.value}
    return MemoryRule(leaks=LeakRule(keys.get("leaks", inherited.leaks.value)))


def _guard(node: yaml.Node | None, inherited: GuardSpec) -> GuardSpec:
    """A guard setting; directions it leaves out keep ``inherited``'s levels."""
    if node is None:
        return inherited
    if isinstance(node, yaml.ScalarNode):
        return GuardSpec.uniform(GuardLevel(scalar_value(node)))
    by_direction = mapping_of(node)
    levels = {
        d.value: GuardLevel(scalar_value(by_direction[d.value]))
        if d.value in by_direction
        else inherited.level(d)
        for d in Direction
    }
    return GuardSpec(**levels)


# The schema's `callable` pattern: `module:qualname`, dotted on both sides.
_SPEC = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
)


def callables_of_invalid(path: Path, repo_root: Path) -> NamedCallables | None:
    """What a policy that failed validation names as callables, so that their imports
    are checked in the same run and a user sees every problem of the file at once.

    Only well-formed `module:qualname` strings at the places the format puts
    callables are taken; None when the file is not even YAML, or too large or cyclic a
    tree to walk (a policy of 25,000 regions refused for its size cost 12 s more in a
    worker importing each one's step).
    """
    root = absolute_path(repo_root)
    file = absolute_path(root / path)
    try:
        source = read_within(file, POLICY_BYTES).decode("utf-8-sig")
        document = yaml.compose(source, Loader=_Loader)
    except Exception:  # unreadable or not YAML: its own problem says so
        return None
    checker = YamlCheck()
    if document is not None:
        checker.run(document)
    if not checker.walkable:
        return None
    top = mapping_of(document)
    folders = top.get("python_path")
    python_path = tuple(
        folder
        for node in (folders.value if isinstance(folders, yaml.SequenceNode) else [])
        if (text := string_of(node)) is not None
        and (folder := absolute_path(file.parent / text)).is_dir()
        and way_out(folder, root) is None  # refused: never put on sys.path
    )
    refs: list[NamedCallable] = []

    def add(where: str, node: yaml.Node | None, boundary: bool) -> None:
        text = string_of(node)
        if node is not None and text is not None and _SPEC.fullmatch(text):
            refs.append((where, callable_of(node), boundary))

    regions = top.get("regions")
    for i, region_node in enumerate(
        regions.value if isinstance(regions, yaml.SequenceNode) else []
    ):
        region = mapping_of(region_node)
        add(f"regions[{i}].step", region.get("step"), False)
        add(f"regions[{i}].setup", region.get("setup"), False)
        boundaries = region.get("boundaries")
        if isinstance(boundaries, yaml.SequenceNode):
            for j, node in enumerate(boundaries.value):
                add(f"regions[{i}].boundaries[{j}]", node, True)
        add(f"regions[{i}].checks.custom", mapping_of(region.get("checks")).get("custom"), False)
    return NamedCallables(display_path(file, root), python_path, tuple(refs))
