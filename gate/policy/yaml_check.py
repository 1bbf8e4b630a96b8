"""Pass 1 over a policy: what YAML allows but a policy must not hold.

Syntax errors become one-line messages with their line; then tags, merge
keys, duplicate keys, alias cycles and alias bombs are found on the node tree
before the schema walks it (`gate.policy.schema` relies on that).
"""

from __future__ import annotations

from typing import Any

import yaml

from gate.policy.schema import Violation, json_type, scalar_value, where_key

_CORE = "tag:yaml.org,2002:"
# An alias can make a few lines stand for billions of nodes; no real policy
# comes near this.
_MAX_NODES = 50_000


_WHILE = ("while parsing ", "while scanning ")


def yaml_error(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
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


class YamlCheck:
    """Finds what YAML allows but a policy must not hold.

    Sets `walkable` to False when the tree cannot be walked safely (an alias
    cycle, too many nodes, a scalar that does not construct).
    """

    def __init__(self) -> None:
        self.found: list[Violation] = []
        self.walkable = True
        self._sizes: dict[int, int] = {}
        self._open: set[int] = set()
        self._aliased = False

    def run(self, document: yaml.Node) -> list[Violation]:
        if self._visit(document, "") > _MAX_NODES:
            self.walkable = False
            # The real reason: aliases that multiply a few lines, or a file that is that long.
            reason = (
                "expands to more than {} values through YAML aliases; write it out plainly"
                if self._aliased
                else "holds more than {} values; a policy names regions and their settings, "
                "not data: split it into several policy files"
            )
            self._add(document, "", "the policy " + reason.format(_MAX_NODES))
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
            self._aliased = True  # only an alias reaches a node twice
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
