"""Pass 3 over a policy: what the schema cannot say.

Unique region names, folders and reference files that must exist, numbers
that must be finite; each problem keeps the line of the node it is about.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import yaml

from gate.files import way_out
from gate.policy.defaults import default
from gate.policy.nodes import line_of, mapping_of, string_of
from gate.policy.problems import absolute_path, display_path
from gate.policy.schema import Violation, json_type, scalar_value, where_key

_COST_KEYS = ("max_increase", "max_work_increase")


def check_meaning(
    document: yaml.Node, policy_dir: Path, root: Path, write_references: bool
) -> list[Violation]:
    """What ``document`` gets wrong that its schema allows, each with its line.

    With ``write_references`` a reference file need not exist yet: the run writes it.
    """
    found: list[Violation] = []
    top = mapping_of(document)
    folder = display_path(policy_dir, root)

    path_list = top.get("python_path")
    if isinstance(path_list, yaml.SequenceNode):
        for i, item in enumerate(path_list.value):
            written = string_of(item)
            if written is None:
                continue
            target = absolute_path(policy_dir / written)
            out = way_out(target, root)
            if out is not None:
                found.append(
                    Violation(
                        line_of(item),
                        f"python_path[{i}]",
                        f"folder {written} {out}; a policy, "
                        "which a pull request can change, imports only from the repository: "
                        "move that code into it, or install it into the environment (pip "
                        "install) so that it imports without python_path",
                    )
                )
            elif not target.is_dir():
                what = "is a file, not a folder" if target.exists() else "does not exist"
                found.append(
                    Violation(
                        line_of(item),
                        f"python_path[{i}]",
                        f"folder {display_path(target, root)} {what} (python_path is relative to"
                        f" the policy's folder, {folder}/); fix the path",
                    )
                )

    found += _check_drift(top.get("drift"))
    defaults = mapping_of(top.get("defaults"))
    found += _check_finite(defaults, "defaults", ("timeout_s",))
    found += _check_timing(defaults.get("timing"), "defaults.timing")
    found += _check_finite(mapping_of(defaults.get("cost")), "defaults.cost", _COST_KEYS)
    regions = top.get("regions")
    names: dict[str, tuple[int, int]] = {}
    for i, region_node in enumerate(
        regions.value if isinstance(regions, yaml.SequenceNode) else []
    ):
        where = f"regions[{i}]"
        region = mapping_of(region_node)
        name_node = region.get("name")
        name = string_of(name_node)
        if name_node is not None and name is not None:
            if name in names:
                j, line = names[name]
                found.append(
                    Violation(
                        line_of(name_node),
                        f"{where}.name",
                        f"duplicate region name {name!r} (also regions[{j}] on line {line});"
                        " names must be unique within a file",
                    )
                )
            else:
                names[name] = (i, line_of(name_node))
        found += _check_finite(region, where, ("timeout_s",))
        found += _check_timing(region.get("timing"), f"{where}.timing")
        found += _check_finite(mapping_of(region.get("cost")), f"{where}.cost", _COST_KEYS)
        checks = mapping_of(region.get("checks"))
        found += _check_finite(checks, f"{where}.checks", ("rtol", "atol"))
        reference = checks.get("reference")
        written = string_of(reference)
        out = None if written is None else way_out(policy_dir / written, root)
        if reference is not None and out is not None:
            # `run --write-references` writes it: never outside the repository.
            found.append(
                Violation(
                    line_of(reference),
                    f"{where}.checks.reference",
                    f"reference {written} {out}; a policy "
                    "names only files inside the repository: keep the reference there (beside "
                    "the policy, say)",
                )
            )
        elif reference is not None and written is not None and not write_references:
            message = _reference_problem(absolute_path(policy_dir / written), root)
            if message is not None:
                found.append(Violation(line_of(reference), f"{where}.checks.reference", message))
    return found


def _check_timing(node: yaml.Node | None, where: str) -> list[Violation]:
    timing = mapping_of(node)
    found = _check_finite(timing, where, ("max_slowdown", "baseline_max_slowdown"))
    rounds, most = timing.get("rounds"), timing.get("max_rounds")
    if (
        isinstance(rounds, yaml.ScalarNode)
        and isinstance(most, yaml.ScalarNode)
        and json_type(rounds) == json_type(most) == "integer"
        and scalar_value(rounds) > scalar_value(most)
    ):
        found.append(
            Violation(
                line_of(most),
                where_key(where, "max_rounds"),
                f"max_rounds ({most.value}) is below rounds ({rounds.value}); "
                "raise max_rounds or lower rounds",
            )
        )
    return found


def _check_drift(node: yaml.Node | None) -> list[Violation]:
    drift = mapping_of(node)
    found = _check_finite(
        drift, "drift", ("max_step_time", "max_flops", "max_bytes_accessed", "max_peak_memory")
    )
    window = drift.get("window")
    runs = drift.get("runs")
    window_value = (
        scalar_value(window)
        if isinstance(window, yaml.ScalarNode) and json_type(window) == "integer"
        else default("drift.window")
    )
    runs_value = (
        scalar_value(runs)
        if isinstance(runs, yaml.ScalarNode) and json_type(runs) == "integer"
        else default("drift.runs")
    )
    if (window is not None or runs is not None) and window_value < 2 * runs_value:
        # The rank test compares `runs` at each end of the window: they must not overlap.
        at = window if window is not None else runs
        assert at is not None
        found.append(
            Violation(
                line_of(at),
                where_key("drift", "window" if window is not None else "runs"),
                f"window ({window_value}) holds fewer than twice runs ({runs_value}), so the "
                "step time's rank test could never run; raise window or lower runs",
            )
        )
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
                        line_of(node),
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
