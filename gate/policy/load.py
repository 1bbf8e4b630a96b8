"""Policy files: find them, load them, and say exactly what is wrong with them.

A policy is read in three passes over the node tree from `yaml.compose`, so
every problem keeps its line: the YAML itself (tags, duplicate keys, aliases),
the schema (`gate/policy/policy.schema.json`, walked by `gate.policy.schema`), then what the
schema cannot say (unique region names, files that must exist). Every problem
of a file is collected and raised together in one `PolicyError`. Nothing in a
policy is ever constructed beyond plain strings, numbers, booleans, lists and
mappings, so a hostile tag such as ``!!python/object/apply`` runs nothing.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gate.policy.levels import Direction, GuardLevel, GuardSpec
from gate.policy.model import CallableRef, Checks, Policy, Region
from gate.policy.schema import Violation, json_type, scalar_value, validate, where_key

# libyaml when PyYAML was built with it, as pre-commit does; both only compose.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What a region gets when neither it nor `defaults:` sets a key (see README).
BUILTIN_DEFAULTS: dict[str, Any] = {
    "guard": "disallow",
    "warmup": 2,
    "guarded_runs": 3,
    "repeats": 20,
    "timeout_s": 600,
}
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8

_CORE = "tag:yaml.org,2002:"
_TOO_DEEP = "invalid YAML: lists and mappings nested too deeply; flatten the policy"
# An alias can make a few lines stand for billions of nodes; no real policy
# comes near this.
_MAX_NODES = 50_000


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a policy, located as precisely as it can be."""

    path: str  # relative to the repo root when under it
    line: int | None  # 1-based; None when the whole file (or path) is at fault
    where: str  # e.g. ``regions[0].guard``; empty for the file or its top level
    message: str  # what is wrong, then the fix

    def __str__(self) -> str:
        location = self.path if self.line is None else f"{self.path}:{self.line}"
        parts = [p for p in (location, self.where) if p]
        return ": ".join([*parts, self.message])


class PolicyError(Exception):
    """One or more problems with one or more policy files."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def display_path(path: Path, repo_root: Path) -> str:
    """``path`` relative to ``repo_root`` (POSIX style) when under it, else absolute."""
    absolute = _absolute(path)
    try:
        return absolute.relative_to(_absolute(repo_root)).as_posix() or "."
    except ValueError:
        return absolute.as_posix()


def discover_policy_files(paths: Sequence[str], repo_root: Path) -> list[Path]:
    """The policy files named by ``paths``: files as given, folders' ``*.yaml``/``*.yml``.

    Relative paths are taken relative to ``repo_root``. Folders are searched
    recursively (hidden folders excepted): a policy left out of the run would
    be a silent pass. Returns absolute paths, sorted, each once; raises
    `PolicyError` naming every path that is missing or holds no policy.
    """
    root = _absolute(repo_root)
    found: set[Path] = set()
    problems: list[Problem] = []
    for given in paths:
        target = _absolute(root / given)
        if target.is_dir():
            files = [
                p
                for p in target.rglob("*")
                if p.suffix in (".yaml", ".yml")
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(target).parts)
            ]
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
    root = _absolute(repo_root)
    file = _absolute(root / path)
    shown = display_path(file, root)

    def fail(line: int | None, message: str) -> PolicyError:
        return PolicyError([Problem(shown, line, "", message)])

    try:
        text = file.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise fail(None, f"cannot read the file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        data = file.read_bytes()
        bad_line = data[: exc.start].count(b"\n") + 1
        byte = data[exc.start : exc.start + 1].hex()
        raise fail(bad_line, f"not UTF-8 text (byte 0x{byte}); save the file as UTF-8") from None
    try:
        document = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        line, message = _yaml_error(exc, text)
        raise fail(line, message) from None
    except RecursionError:
        raise fail(None, _TOO_DEEP) from None
    if document is None or (json_type(document) == "null" and not document.value):
        # No document, or only `---`.
        raise fail(1, "policy is empty: start it with `version: 1` (see README)")

    checker = _YamlCheck()
    try:
        violations = checker.run(document)
        if checker.walkable:
            violations += validate(document)
            violations += _check_meaning(document, file.parent, root, write_references)
    except RecursionError:
        raise fail(None, _TOO_DEEP) from None
    if violations:
        problems = [Problem(shown, v.line, v.where, v.message) for v in violations]
        raise PolicyError(sorted(problems, key=lambda p: p.line or 0))
    return _build(document, Path(shown), file, write_references)


# --- pass 1: the YAML itself --------------------------------------------------


_WHILE = ("while parsing ", "while scanning ")


def _yaml_error(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The line and a one-line message for a YAML syntax error."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "syntax error"
        column = f"column {mark.column + 1}"
        context, started = exc.context, exc.context_mark
        if context and problem.startswith("but "):
            # e.g. "expected a single document in the stream, but found another document"
            message = f"{context}, {problem} ({column})"
        elif context and started is not None and context.startswith(_WHILE):
            what = context.removeprefix("while parsing ").removeprefix("while scanning ")
            message = f"{problem} ({column}, in {what} from line {started.line + 1})"
        else:
            message = f"{problem} ({column})"
        if "nesting depth" in problem:  # libyaml's limit
            fix = "; flatten the policy"
        elif isinstance(exc, yaml.scanner.ScannerError | yaml.parser.ParserError):
            fix = "; check indentation and quoting"
        elif "undefined alias" in problem:
            fix = "; define the anchor (&name) before its alias (*name)"
        elif context and "single document" in context:
            fix = "; a policy is one YAML document: remove the second `---`"
        else:
            fix = ""
        return mark.line + 1, f"invalid YAML: {message}{fix}"
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        return line, f"invalid YAML: control character {char!r} is not allowed; remove it"
    return None, f"invalid YAML: {' '.join(str(exc).split())}"


class _YamlCheck:
    """Finds what YAML allows but a policy must not hold.

    Sets `walkable` to False when the tree cannot be walked safely (an alias
    cycle, too many nodes, a scalar that does not construct).
    """

    def __init__(self) -> None:
        self.found: list[Violation] = []
        self.walkable = True
        self._sizes: dict[int, int] = {}
        self._open: set[int] = set()

    def run(self, document: yaml.Node) -> list[Violation]:
        if self._visit(document, "") > _MAX_NODES:
            self.walkable = False
            self._add(
                document,
                "",
                f"the policy expands to more than {_MAX_NODES} values through YAML aliases;"
                " write it out plainly",
            )
        return self.found

    def _add(self, node: yaml.Node, where: str, message: str) -> None:
        self.found.append(Violation(node.start_mark.line + 1, where, message))

    def _visit(self, node: yaml.Node, where: str) -> int:
        """Check ``node`` once; return how many nodes it stands for, aliases expanded."""
        key = id(node)
        if key in self._open:
            self.walkable = False
            self._add(node, where, "a YAML alias refers to the list or mapping it is in; remove it")
            return 0
        if key in self._sizes:
            return self._sizes[key]
        size = 1
        if json_type(node) is None:
            self._add(node, where, _bad_tag(node.tag))
        elif isinstance(node, yaml.ScalarNode):
            try:
                scalar_value(node)
            except Exception:
                self.walkable = False
                self._add(node, where, f"{node.value!r} is not a valid {_short(node.tag)} value")
        else:
            self._open.add(key)
            if isinstance(node, yaml.SequenceNode):
                for i, item in enumerate(node.value):
                    size += self._visit(item, f"{where}[{i}]")
            elif isinstance(node, yaml.MappingNode):
                size += self._visit_mapping(node, where)
            self._open.discard(key)
        self._sizes[key] = size
        return size

    def _visit_mapping(self, node: yaml.MappingNode, where: str) -> int:
        size = 0
        first_line: dict[tuple[str | None, Any], int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == f"{_CORE}merge":
                self._add(
                    key_node,
                    where,
                    "YAML merge keys (<<) are not supported;"
                    " write the keys out, or put shared settings under `defaults:`",
                )
                continue
            size += self._visit(key_node, where)
            name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            if isinstance(key_node, yaml.ScalarNode) and json_type(key_node) is not None:
                try:
                    identity = (json_type(key_node), scalar_value(key_node))
                    seen = first_line.setdefault(identity, key_node.start_mark.line + 1)
                except Exception:
                    seen = None  # already reported by _visit
                line = key_node.start_mark.line + 1
                if seen is not None and seen != line:
                    self._add(
                        key_node,
                        where,
                        f"duplicate key {name!r} on lines {seen} and {line}; keep one",
                    )
            size += self._visit(value_node, where_key(where, name))
        return size


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


def _bad_tag(tag: str) -> str:
    return (
        f"YAML tag {_short(tag)} is not allowed: a policy holds only plain values"
        " (strings, numbers, true/false, lists, mappings); remove the tag"
    )


# --- pass 3: what the schema cannot say ---------------------------------------


def _mapping(node: yaml.Node | None) -> dict[str, yaml.Node]:
    """The string-keyed entries of a mapping node (the last of duplicates), else {}."""
    if not isinstance(node, yaml.MappingNode) or json_type(node) != "object":
        return {}
    return {
        str(k.value): v
        for k, v in node.value
        if isinstance(k, yaml.ScalarNode) and json_type(k) == "string"
    }


def _string(node: yaml.Node | None) -> str | None:
    if isinstance(node, yaml.ScalarNode) and json_type(node) == "string":
        return str(scalar_value(node))
    return None


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _check_meaning(
    document: yaml.Node, policy_dir: Path, root: Path, write_references: bool
) -> list[Violation]:
    found: list[Violation] = []
    top = _mapping(document)
    folder = display_path(policy_dir, root)

    path_list = top.get("python_path")
    if isinstance(path_list, yaml.SequenceNode):
        for i, item in enumerate(path_list.value):
            written = _string(item)
            if written is None:
                continue
            target = _absolute(policy_dir / written)
            if not target.is_dir():
                what = "is a file, not a folder" if target.exists() else "does not exist"
                found.append(
                    Violation(
                        _line(item),
                        f"python_path[{i}]",
                        f"folder {display_path(target, root)} {what} (python_path is relative to"
                        f" the policy's folder, {folder}/); fix the path",
                    )
                )

    found += _check_finite(_mapping(top.get("defaults")), "defaults", ("timeout_s",))
    regions = top.get("regions")
    names: dict[str, tuple[int, int]] = {}
    for i, region_node in enumerate(
        regions.value if isinstance(regions, yaml.SequenceNode) else []
    ):
        where = f"regions[{i}]"
        region = _mapping(region_node)
        name_node = region.get("name")
        name = _string(name_node)
        if name_node is not None and name is not None:
            if name in names:
                j, line = names[name]
                found.append(
                    Violation(
                        _line(name_node),
                        f"{where}.name",
                        f"duplicate region name {name!r} (also regions[{j}] on line {line});"
                        " names must be unique within a file",
                    )
                )
            else:
                names[name] = (i, _line(name_node))
        found += _check_finite(region, where, ("timeout_s",))
        checks = _mapping(region.get("checks"))
        found += _check_finite(checks, f"{where}.checks", ("rtol", "atol"))
        reference = checks.get("reference")
        written = _string(reference)
        if reference is not None and written is not None and not write_references:
            message = _reference_problem(_absolute(policy_dir / written), root)
            if message is not None:
                found.append(Violation(_line(reference), f"{where}.checks.reference", message))
    return found


def _check_finite(
    mapping: dict[str, yaml.Node], where: str, keys: Sequence[str]
) -> list[Violation]:
    found = []
    for key in keys:
        node = mapping.get(key)
        if isinstance(node, yaml.ScalarNode) and json_type(node) == "number":
            value = scalar_value(node)
            # -inf already breaks the schema's minimum; nan and inf pass it.
            if math.isnan(value) or value == math.inf:
                found.append(
                    Violation(
                        _line(node),
                        where_key(where, key),
                        f"expected a finite number, got {node.value}",
                    )
                )
    return found


_REGENERATE = "regenerate it with `transfer-gate run --write-references`"


def _reference_problem(file: Path, root: Path) -> str | None:
    """Why ``file`` cannot serve as a reference, or None when it can."""
    # numpy only when a policy has a reference: `validate` stays quick.
    import numpy as np

    shown = display_path(file, root)
    if not file.exists():
        return (
            f"reference file {shown} does not exist (the path is relative to the policy's"
            " folder); create it with `transfer-gate run --write-references` or fix the path"
        )
    if file.is_dir():
        return f"reference {shown} is a folder; name an .npz file made with numpy.savez"
    try:
        with file.open("rb") as stream:
            magic = stream.read(6)
        if magic == b"\x93NUMPY":
            return f"reference {shown} is a single .npy array; save it with numpy.savez as .npz"
        if not magic.startswith(b"PK"):
            # np.load would try it as a pickle and say so, which misleads.
            return f"reference {shown} is not a valid .npz file (not a zip archive); " + _REGENERATE
        with np.load(file, allow_pickle=False) as loaded:
            names = list(loaded.files)
            for name in names:
                loaded[name]  # reading each array is what finds a truncated or pickled one
    except Exception as exc:
        return f"reference {shown} is not a valid .npz file ({_one_line(exc)}); " + _REGENERATE
    if not names:
        return f"reference {shown} holds no arrays; " + _REGENERATE
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- building the Policy ------------------------------------------------------


def _build(document: yaml.Node, shown: Path, file: Path, write_references: bool) -> Policy:
    """The `Policy` for a document that passed every check."""
    top = _mapping(document)
    policy_dir = file.parent
    defaults = _mapping(top.get("defaults"))

    def value(mapping: dict[str, yaml.Node], key: str, fallback: Any) -> Any:
        node = mapping.get(key)
        return fallback if node is None else scalar_value(node)

    inherited = {
        key: value(defaults, key, v) for key, v in BUILTIN_DEFAULTS.items() if key != "guard"
    }
    default_guard = _guard(defaults.get("guard"), GuardSpec.uniform(GuardLevel.DISALLOW))

    regions = []
    for region_node in top["regions"].value:
        region = _mapping(region_node)
        checks = _mapping(region.get("checks"))
        reference = _string(checks.get("reference"))
        custom = checks.get("custom")
        regions.append(
            Region(
                name=str(value(region, "name", None)),
                line=_line(region_node),
                step=_callable(region["step"]),
                setup=_callable(region["setup"]) if "setup" in region else None,
                boundaries=tuple(_callable(n) for n in region["boundaries"].value)
                if "boundaries" in region
                else (),
                guard=_guard(region.get("guard"), default_guard),
                warmup=int(value(region, "warmup", inherited["warmup"])),
                guarded_runs=int(value(region, "guarded_runs", inherited["guarded_runs"])),
                repeats=int(value(region, "repeats", inherited["repeats"])),
                timeout_s=float(value(region, "timeout_s", inherited["timeout_s"])),
                checks=Checks(
                    finite=bool(value(checks, "finite", False)),
                    reference=_absolute(policy_dir / reference) if reference is not None else None,
                    rtol=float(value(checks, "rtol", DEFAULT_RTOL)),
                    atol=float(value(checks, "atol", DEFAULT_ATOL)),
                    custom=_callable(custom) if custom is not None else None,
                    write_reference=write_references and reference is not None,
                ),
            )
        )
    path_list = top.get("python_path")
    return Policy(
        path=shown,
        version=int(value(top, "version", 1)),
        suite=str(value(top, "suite", file.stem)),
        python_path=tuple(_absolute(policy_dir / str(scalar_value(n))) for n in path_list.value)
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
    )


def _guard(node: yaml.Node | None, inherited: GuardSpec) -> GuardSpec:
    """A guard setting; directions it leaves out keep ``inherited``'s levels."""
    if node is None:
        return inherited
    if isinstance(node, yaml.ScalarNode):
        return GuardSpec.uniform(GuardLevel(scalar_value(node)))
    by_direction = _mapping(node)
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

# (where, ref, must be a plain function): one callable a policy names.
NamedCallable = tuple[str, CallableRef, bool]


@dataclass(frozen=True)
class NamedCallables:
    """The callables an invalid policy still names recognisably, and where to import from."""

    path: str  # as problems show it
    python_path: tuple[Path, ...]
    refs: tuple[NamedCallable, ...]


def callables_of_invalid(path: Path, repo_root: Path) -> NamedCallables | None:
    """What a policy that failed validation names as callables, so that their imports
    are checked in the same run and a user sees every problem of the file at once.

    Only well-formed `module:qualname` strings at the places the format puts
    callables are taken; None when the file is not even YAML.
    """
    root = _absolute(repo_root)
    file = _absolute(root / path)
    try:
        document = yaml.compose(file.read_bytes().decode("utf-8-sig"), Loader=_Loader)
    except Exception:  # unreadable or not YAML: its own problem says so
        return None
    top = _mapping(document)
    folders = top.get("python_path")
    python_path = tuple(
        folder
        for node in (folders.value if isinstance(folders, yaml.SequenceNode) else [])
        if (text := _string(node)) is not None
        and (folder := _absolute(file.parent / text)).is_dir()
    )
    refs: list[NamedCallable] = []

    def add(where: str, node: yaml.Node | None, boundary: bool) -> None:
        text = _string(node)
        if node is not None and text is not None and _SPEC.fullmatch(text):
            refs.append((where, _callable(node), boundary))

    regions = top.get("regions")
    for i, region_node in enumerate(
        regions.value if isinstance(regions, yaml.SequenceNode) else []
    ):
        region = _mapping(region_node)
        add(f"regions[{i}].step", region.get("step"), False)
        add(f"regions[{i}].setup", region.get("setup"), False)
        boundaries = region.get("boundaries")
        if isinstance(boundaries, yaml.SequenceNode):
            for j, node in enumerate(boundaries.value):
                add(f"regions[{i}].boundaries[{j}]", node, True)
        add(f"regions[{i}].checks.custom", _mapping(region.get("checks")).get("custom"), False)
    return NamedCallables(display_path(file, root), python_path, tuple(refs))


def _callable(node: yaml.Node) -> CallableRef:
    spec = str(scalar_value(node))
    module, qualname = spec.split(":")
    return CallableRef(spec=spec, module=module, qualname=qualname, line=_line(node))


def _absolute(path: Path) -> Path:
    # abspath, not resolve(): a symlinked policy keeps the name it was given.
    return Path(os.path.abspath(path))
