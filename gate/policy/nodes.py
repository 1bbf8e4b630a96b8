"""Reading values out of a policy's composed YAML node tree, keeping their lines."""

from __future__ import annotations

import yaml

from gate.policy.model import CallableRef
from gate.policy.schema import json_type, scalar_value


def mapping_of(node: yaml.Node | None) -> dict[str, yaml.Node]:
    """The string-keyed entries of a mapping node (the last of duplicates), else {}."""
    if not isinstance(node, yaml.MappingNode) or json_type(node) != "object":
        return {}
    return {
        str(k.value): v
        for k, v in node.value
        if isinstance(k, yaml.ScalarNode) and json_type(k) == "string"
    }


def string_of(node: yaml.Node | None) -> str | None:
    """The text of a string scalar; None for anything else."""
    if isinstance(node, yaml.ScalarNode) and json_type(node) == "string":
        return str(scalar_value(node))
    return None


def line_of(node: yaml.Node) -> int:
    """The 1-based line ``node`` starts on."""
    return int(node.start_mark.line) + 1


def key_line(node: yaml.Node, key: str) -> int:
    """The 1-based line of ``key`` in a mapping node; 0 when it has no such key."""
    if not isinstance(node, yaml.MappingNode):
        return 0
    return next((line_of(k) for k, _ in node.value if k.value == key), 0)


def callable_of(node: yaml.Node) -> CallableRef:
    """The `module:qualname` a validated scalar names, with its line."""
    spec = str(scalar_value(node))
    module, qualname = spec.split(":")
    return CallableRef(spec=spec, module=module, qualname=qualname, line=line_of(node))
