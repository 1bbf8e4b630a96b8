"""Validate a PyYAML node tree against the policy's JSON Schema, keeping line numbers.

`jsonschema` works on plain data, where every line number is gone; walking the
nodes from `yaml.compose` instead lets each problem point at the line to fix,
and keeps `jsonschema` out of the gate's runtime dependencies. Only the part of
JSON Schema (draft 2020-12) that ``policy.schema.json`` uses is supported, and
any other keyword is refused, so the schema cannot quietly outgrow the walker.
The test suite checks that this walker and `jsonschema` agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from gate.policy.defaults import shipped_schema
from gate.text import closest, did_you_mean, suggesting

Schema = Mapping[str, Any]

_CORE = "tag:yaml.org,2002:"

# The JSON type each core YAML tag stands for. A timestamp is not a JSON type:
# it matches no `type`, so an unquoted date is reported instead of passing.
# Other tags are reported by `gate.policy.yaml_check` before the walk, skipped here.
_JSON_TYPES = {
    f"{_CORE}str": "string",
    f"{_CORE}int": "integer",
    f"{_CORE}float": "number",
    f"{_CORE}bool": "boolean",
    f"{_CORE}null": "null",
    f"{_CORE}timestamp": "timestamp",
    f"{_CORE}seq": "array",
    f"{_CORE}map": "object",
}

_TYPE_PHRASES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
    "array": "a list",
    "object": "a mapping",
}

# Keywords that only annotate; the walker reads `description` and `examples`
# for its messages.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "examples", "default"})
_KEYWORDS = _ANNOTATIONS | {
    "type",
    "properties",
    "additionalProperties",
    "required",
    "enum",
    "const",
    "items",
    "minItems",
    "minimum",
    "exclusiveMinimum",
    "pattern",
    "oneOf",
    "anyOf",
    "$ref",
}


@dataclass(frozen=True)
class Violation:
    """One way a node breaks the schema."""

    line: int  # 1-based
    where: str  # e.g. ``regions[0].guard``; empty for the top level
    message: str


@cache
def policy_schema() -> Schema:
    """The schema of policy format version 1, as shipped in the package."""
    return shipped_schema()


def json_type(node: yaml.Node) -> str | None:
    """The JSON type of ``node`` (``timestamp`` for dates); None for a non-core tag."""
    return _JSON_TYPES.get(node.tag)


def scalar_value(node: yaml.Node) -> Any:
    """The Python value of a core-tagged scalar, built as `yaml.safe_load` would build it.

    A fresh constructor per call: `SafeConstructor` caches every node it has
    built, and the nodes of one policy should not outlive its loading.
    """
    return yaml.constructor.SafeConstructor().construct_object(node)


def validate(node: yaml.Node, schema: Schema | None = None) -> list[Violation]:
    """Every violation of ``schema`` (default: the policy's) under ``node`` (no alias cycles)."""
    root = policy_schema() if schema is None else schema
    return _Walker(root).check(node, root, "")


def where_key(where: str, key: str) -> str:
    """The location of ``key`` inside the mapping at ``where``."""
    return f"{where}.{key}" if where else key


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(a: object, b: object) -> bool:
    # As in JSON Schema (and jsonschema): true is not 1, but 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _literal(value: object) -> str:
    """A schema value as a policy would spell it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def describe(node: yaml.Node) -> str:
    """What ``node`` is, for "got ..." in a message: ``string 'ten'``, ``a list``."""
    kind = json_type(node)
    if kind == "array":
        return "a list"
    if kind == "object":
        return "a mapping"
    if kind == "null":
        return "nothing (an empty value)"
    if kind == "string":
        return f"string {scalar_value(node)!r}"
    if kind == "timestamp":
        return f"the date {node.value!r}"
    if kind is None:
        return f"a {node.tag} value"
    return f"{kind} {node.value}"


class _Walker:
    def __init__(self, root: Schema) -> None:
        self.root = root

    def deref(self, schema: Schema) -> Schema:
        ref = schema.get("$ref")
        if ref is None:
            return schema
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            raise ValueError(f"unsupported $ref {ref!r}: only {prefix}NAME")
        return self.deref(self.root["$defs"][ref.removeprefix(prefix)])

    def check(self, node: yaml.Node, schema: Schema, where: str) -> list[Violation]:
        unknown = set(schema) - _KEYWORDS
        if unknown:
            noun = "keyword" if len(unknown) == 1 else "keywords"
            raise ValueError(f"schema {noun} {sorted(unknown)} not supported here")
        kind = json_type(node)
        if kind is None:
            return []  # a non-core tag: yaml_check reports it
        found: list[Violation] = []
        if "$ref" in schema:
            found += self.check(node, self.deref(schema), where)
        if "type" in schema and not self._type_matches(node, schema):
            found.append(self._type_violation(node, schema, where))
            return found  # nothing else about the value makes sense now
        found += self._check_value(node, schema, where)
        if kind == "array":
            found += self._check_array(node, schema, where)
        elif kind == "object":
            found += self._check_object(node, schema, where)
        for keyword in ("oneOf", "anyOf"):
            if keyword in schema:
                found += self._check_choice(node, schema[keyword], where, one=keyword == "oneOf")
        return found

    def _type_matches(self, node: yaml.Node, schema: Schema) -> bool:
        wanted = schema["type"]
        types = [wanted] if isinstance(wanted, str) else list(wanted)
        kind = json_type(node)
        if kind in types:
            return True
        if kind == "integer" and "number" in types:
            return True
        if kind == "number" and "integer" in types:
            # JSON Schema counts 2.0 as an integer.
            value = scalar_value(node)
            return isinstance(value, float) and value.is_integer()
        return False

    def _type_violation(self, node: yaml.Node, schema: Schema, where: str) -> Violation:
        wanted = schema["type"]
        types = [wanted] if isinstance(wanted, str) else list(wanted)
        expected = " or ".join(_TYPE_PHRASES[t] for t in types)
        return Violation(
            _line(node), where, f"expected {expected}, got {describe(node)}{_hint(node, types)}"
        )

    def _check_value(self, node: yaml.Node, schema: Schema, where: str) -> list[Violation]:
        if not isinstance(node, yaml.ScalarNode):
            if "const" in schema or "enum" in schema:
                return [self._const_violation(node, schema, where)]
            return []
        value = scalar_value(node)
        line = _line(node)
        if "const" in schema and not _equal(value, schema["const"]):
            return [self._const_violation(node, schema, where)]
        if "enum" in schema and not any(_equal(value, v) for v in schema["enum"]):
            return [self._const_violation(node, schema, where)]
        # JSON Schema patterns are unanchored, like re.search.
        if (
            "pattern" in schema
            and isinstance(value, str)
            and not re.search(schema["pattern"], value)
        ):
            what = schema.get("description", f"matching {schema['pattern']}")
            return [Violation(line, where, f"{value!r} is not {what}")]
        if _is_number(value):
            if "minimum" in schema and value < schema["minimum"]:
                bound = f">= {schema['minimum']}"
                return [Violation(line, where, self._bound_message(node, schema, bound))]
            if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
                bound = f"> {schema['exclusiveMinimum']}"
                return [Violation(line, where, self._bound_message(node, schema, bound))]
        return []

    def _bound_message(self, node: yaml.Node, schema: Schema, bound: str) -> str:
        noun = _TYPE_PHRASES.get(schema.get("type", "number"), "a number")
        return f"expected {noun} {bound}, got {node.value}"

    def _const_violation(self, node: yaml.Node, schema: Schema, where: str) -> Violation:
        got = describe(node)
        if "const" in schema:
            message = f"expected {_literal(schema['const'])}, got {got}"
            if "description" in schema:
                message += f" ({schema['description']})"
            return Violation(_line(node), where, message)
        choices = [_literal(v) for v in schema["enum"]]
        if isinstance(node, yaml.ScalarNode):
            value = str(scalar_value(node))
            close = did_you_mean(value, choices)
            message = f"unknown value {value!r}{close}; use one of: {', '.join(choices)}"
        else:
            message = f"expected one of {', '.join(choices)}, got {got}"
        return Violation(_line(node), where, message)

    def _check_array(self, node: yaml.Node, schema: Schema, where: str) -> list[Violation]:
        items: list[yaml.Node] = node.value
        found: list[Violation] = []
        if "minItems" in schema and len(items) < schema["minItems"]:
            need = schema["minItems"]
            fix = f" ({schema['description']})" if "description" in schema else ""
            got = f"{len(items)}" if items else "none"
            found.append(
                Violation(
                    _line(node),
                    where,
                    f"expected at least {need} {_plural(need, 'entry', 'entries')}, got {got}{fix}",
                )
            )
        if "items" in schema:
            for i, item in enumerate(items):
                found += self.check(item, schema["items"], f"{where}[{i}]")
        return found

    def _check_object(self, node: yaml.Node, schema: Schema, where: str) -> list[Violation]:
        props: Mapping[str, Schema] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool | dict):
            raise ValueError("additionalProperties must be a boolean or a schema")
        found: list[Violation] = []
        present: set[str] = set()
        suggested: set[str] = set()
        pairs: list[tuple[yaml.Node, yaml.Node]] = node.value
        for key_node, value_node in pairs:
            key_type = json_type(key_node)
            if key_type is None:
                continue  # a non-core tag, e.g. a merge key: yaml_check reports it
            if key_type != "string":
                if extra is not False:
                    continue
                found.append(
                    Violation(
                        _line(key_node),
                        where,
                        f"unknown key {key_node.value} (YAML reads it as {describe(key_node)},"
                        f" not a name; valid keys: {', '.join(props)})",
                    )
                )
                continue
            key = str(scalar_value(key_node))
            present.add(key)
            if key in props:
                found += self.check(value_node, props[key], where_key(where, key))
            elif isinstance(extra, dict):
                found += self.check(value_node, extra, where_key(where, key))
            elif extra is False:
                close = closest(key, list(props))
                if close is not None:
                    suggested.add(close)
                fix = suggesting(close) or f" (valid keys: {', '.join(props)})"
                found.append(Violation(_line(key_node), where, f"unknown key {key!r}{fix}"))
        for key in schema.get("required", ()):
            # A misspelt required key is already reported as "did you mean".
            if key not in present and key not in suggested:
                fix = _fix_for_missing(key, self.deref(props.get(key, {})), props.get(key, {}))
                found.append(Violation(_line(node), where, f"missing required key {key!r}{fix}"))
        return found

    def _check_choice(
        self, node: yaml.Node, branches: Sequence[Schema], where: str, *, one: bool
    ) -> list[Violation]:
        results = [(branch, self.check(node, branch, where)) for branch in branches]
        passing = sum(1 for _, found in results if not found)
        if passing == 1 or (passing > 1 and not one):
            return []
        if passing > 1:
            return [
                Violation(_line(node), where, "matches more than one form; the schema is ambiguous")
            ]
        # No branch fits. When exactly one branch wants this node's type, its
        # problems are the useful ones ("unknown value 'dissalow'"); otherwise
        # say which forms would do.
        typed = [found for branch, found in results if self._could_be(node, branch)]
        if len(typed) == 1:
            return typed[0]
        forms = " or ".join(self._form(branch) for branch in branches)
        return [Violation(_line(node), where, f"expected {forms}, got {describe(node)}")]

    def _could_be(self, node: yaml.Node, branch: Schema) -> bool:
        schema = self.deref(branch)
        return "type" not in schema or self._type_matches(node, schema)

    def _form(self, branch: Schema) -> str:
        schema = self.deref(branch)
        if "description" in branch:
            return str(branch["description"])
        if "description" in schema:
            return str(schema["description"])
        types = schema.get("type", "a value")
        return _TYPE_PHRASES.get(types, str(types)) if isinstance(types, str) else str(types)


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _fix_for_missing(key: str, schema: Schema, as_written: Schema) -> str:
    examples = as_written.get("examples") or schema.get("examples")
    if examples and isinstance(examples[0], str | int | float | bool):
        return f" (add `{key}: {_literal(examples[0])}`)"
    if "description" in schema:
        return f" ({schema['description']})"
    return ""


def _hint(node: yaml.Node, wanted: Sequence[str]) -> str:
    """A fix for the commonest type slips in YAML."""
    kind = json_type(node)
    if kind == "string" and {"number", "integer"} & set(wanted):
        text = str(scalar_value(node))
        try:
            float(text)
        except ValueError:
            return ""
        if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"'):
            return " (remove the quotes)"
        if "e" in text.lower() and "." not in text:
            # YAML 1.1, which PyYAML follows, needs a dot in a float: 1e-5 is a string.
            return f" (YAML reads {text} as a string; write it with a dot, e.g. 1.0e-5)"
        return ""
    if kind in ("integer", "number", "boolean", "timestamp") and "string" in wanted:
        return " (quote it)"
    if kind in ("string", "integer", "number") and wanted == ["array"]:
        return f" (write a list: [{node.value}])"
    return ""
