"""XLA's compiled program as text (``HloModule.to_string()``): the parts the gate reads, parsed.

Text, not a proto: jaxlib hands out the text on every version the gate supports, and it
is the same in every process and on a persistent-cache hit. Only what the gate needs is
read: the header (aliases and donors), the stack-frame tables that name source lines,
and each instruction's name, shape, opcode, operands and attributes. Nothing is
evaluated; a line this parser does not follow is skipped, never guessed at.

Facts the parsing rests on, checked on jax 0.10.1, 0.10.2 and 0.12.0.1 (tests/test_collectives.py):
- an instruction is ``[ROOT ]%name = SHAPE opcode(%a, %b), attr=..., metadata={...}``;
  a tuple shape is parenthesised and may hold ``/*index=5*/`` comments;
- ``metadata={op_name="..." stack_frame_id=N}`` points into the ``StackFrames`` table,
  whose ``parent_frame_id=P`` names the caller as frame ``P - 1`` (``1``: no caller);
  older modules say ``source_file="..." source_line=N`` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_TABLE_ROW = re.compile(r"^(\d+)\s+(.*)$")
_FIELDS = re.compile(r"(\w+)=(-?\d+)")
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")

# Bits per element of each XLA primitive type (xla_data.proto); token and opaque hold none.
_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f6e2m3fn": 6, "f6e3m2fn": 6, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8, "f8e5m2": 8, "f8e5m2fnuz": 8, "f8e8m0fnu": 8,
    "token": 0, "opaque": 0,
}  # fmt: skip
# JAX's names for XLA's types, where they differ (an aval reads ``float32[8]``).
JAX_DTYPES = {
    "pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "f16": "float16",
    "bf16": "bfloat16", "f32": "float32", "f64": "float64", "c64": "complex64",
    "c128": "complex128", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "s4": "int4", "u4": "uint4",
}  # fmt: skip


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction, as far as the gate reads it."""

    name: str
    shape: str  # ``f32[8,16]{1,0}`` or ``(f32[8], s32[])``, layouts and comments included
    opcode: str
    operands: tuple[str, ...]  # instruction names, without ``%``
    attributes: str  # everything after the operand list, unparsed
    root: bool = False  # its computation's result (``ROOT``)

    def attribute(self, key: str) -> str | None:
        """The raw value of ``key=`` (a balanced ``{...}`` or one token); None when absent."""
        return attribute(self.attributes, key)


@dataclass(frozen=True)
class Frame:
    """One row of the module's stack-frame table: a source line and its caller's frame."""

    path: str
    line: int
    function: str
    parent: int  # the caller's frame number; 0: none


@dataclass(frozen=True)
class HloModule:
    """A parsed module: its header, computations and stack frames."""

    name: str
    header: str
    entry: str  # the entry computation's name
    computations: dict[str, tuple[Instruction, ...]] = field(default_factory=dict)
    frames: dict[int, Frame] = field(default_factory=dict)

    def header_field(self, key: str) -> str | None:
        return attribute(self.header, key)

    @property
    def devices(self) -> int:
        """Partitions times replicas: how many devices one run of the program spans."""
        partitions = self.header_field("num_partitions")
        replicas = self.header_field("replica_count")
        return int(partitions or 1) * int(replicas or 1)

    def defined(self) -> dict[str, Instruction]:
        """Every instruction by name (names are unique in a module)."""
        return {i.name: i for body in self.computations.values() for i in body}


def parse_module(text: str) -> HloModule:
    """The parts of ``text`` the gate reads; ValueError when it is no HLO module at all."""
    lines = text.splitlines()
    header = next((line for line in lines if line.startswith("HloModule ")), None)
    if header is None:
        raise ValueError("no 'HloModule' line: not an HLO module's text")
    name = header[len("HloModule ") :].split(",", 1)[0].strip()
    tables: dict[str, dict[int, str]] = {}
    computations: dict[str, tuple[Instruction, ...]] = {}
    entry = ""
    current: str | None = None
    body: list[Instruction] = []
    table: str | None = None
    for line in lines:
        if current is not None:
            if line.strip() == "}":
                computations[current] = tuple(body)
                current, body = None, []
                continue
            instruction = parse_instruction(line)
            if instruction is not None:
                body.append(instruction)
            continue
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = line
            tables[table] = {}
            continue
        if table is not None:
            row = _TABLE_ROW.match(line)
            if row:
                tables[table][int(row.group(1))] = row.group(2)
                continue
            table = None
        opened = _COMPUTATION.match(line)
        if opened:
            current = opened.group(2)
            if opened.group(1):
                entry = current
    return HloModule(name, header, entry, computations, _frames(tables))


def parse_instruction(line: str) -> Instruction | None:
    """One instruction line; None for anything else (a blank line, a comment)."""
    found = _INSTRUCTION.match(line)
    if found is None:
        return None
    name, rest = found.group(2), found.group(3)
    if rest.startswith("("):
        end = _closing(rest, 0)
        if end < 0:
            return None
        shape, rest = rest[: end + 1], rest[end + 1 :]
    else:
        shape, _, rest = rest.partition(" ")
    opened = _OPCODE.match(rest)
    if opened is None:
        return None
    start = opened.end() - 1
    end = _closing(rest, start)
    if end < 0:
        return None
    inside = rest[start + 1 : end]
    if "/*" in inside:
        inside = _COMMENT.sub("", inside)
    # Most operand lists are plain names: split them at once, not character by character.
    tokens = split_top(inside) if any(c in inside for c in '([{"') else inside.split(",")
    operands = tuple(token.split()[-1].lstrip("%") for token in tokens if token.strip())
    attributes = rest[end + 1 :].lstrip(", ")
    return Instruction(name, shape, opened.group(1), operands, attributes, bool(found.group(1)))


# The characters a scan stops at: brackets, the comma, and what quotes and escapes. Everything
# else is skipped by the regex engine, not a Python loop: an instruction's line is mostly
# names, shapes and metadata, and the cost run parses every line of the step's programs.
_SPECIAL = re.compile(r'[()\[\]{},"\\]')


def _unquoted(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """Each bracket and comma of ``text`` from ``start`` that is outside a double-quoted string
    (HLO quotes metadata, where brackets and commas mean nothing), with its index."""
    quoted = False
    escaped_at = -1  # the index of the character a backslash inside quotes escapes
    for found in _SPECIAL.finditer(text, start):
        i = found.start()
        if i == escaped_at:
            continue
        char = text[i]
        if quoted:
            if char == "\\":
                escaped_at = i + 1  # an escaped character, a quote included
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char != "\\":
            yield i, char


def _closing(text: str, start: int) -> int:
    """Where the bracket opened at ``start`` closes (quotes respected); -1 if it does not."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack: list[str] = []
    for i, char in _unquoted(text, start):
        if char in pairs:
            stack.append(pairs[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return i
    return -1


def split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes."""
    parts: list[str] = []
    depth = begin = 0
    for i, char in _unquoted(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[begin:i])
            begin = i + 1
    parts.append(text[begin:])
    return [p.strip() for p in parts]


def attribute(text: str, key: str) -> str | None:
    """The value of ``key=`` in an attribute list: a balanced bracket or one token."""
    if f"{key}=" not in text:  # the usual answer, without a regex
        return None
    for found in re.finditer(rf"(?:^|[\s,{{]){re.escape(key)}=", text):
        start = found.end()
        if start < len(text) and text[start] in "({[":
            end = _closing(text, start)
            return text[start : end + 1] if end >= 0 else None
        if start < len(text) and text[start] == '"':
            end = start + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            return text[start : end + 1]
        token = re.match(r"[^\s,}]*", text[start:])
        return token.group(0) if token else ""
    return None


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """``(element type, dims)`` of every array in a shape, tuple elements in order."""
    found = []
    for element, dims in _ARRAY.findall(_COMMENT.sub("", shape)):
        if element not in _BITS:
            continue
        # A dynamic dimension prints as ``<=8``: its bound is what the buffer holds.
        sizes = tuple(int(d.strip().lstrip("<=")) for d in dims.split(",") if d.strip())
        found.append((element, sizes))
    return found


def array_bytes(element: str, dims: tuple[int, ...]) -> int:
    count = 1
    for dim in dims:
        count *= dim
    return (count * _BITS[element] + 7) // 8


def shape_text(element: str, dims: tuple[int, ...]) -> str:
    """``f32[64,128]``: XLA's spelling, without the layout."""
    return f"{element}[{','.join(str(d) for d in dims)}]"


def _frames(tables: dict[str, dict[int, str]]) -> dict[int, Frame]:
    files = {k: v.strip('"') for k, v in tables.get("FileNames", {}).items()}
    functions = {k: v.strip('"') for k, v in tables.get("FunctionNames", {}).items()}
    locations = {}
    for number, row in tables.get("FileLocations", {}).items():
        values = {k: int(v) for k, v in _FIELDS.findall(row)}
        locations[number] = (
            files.get(values.get("file_name_id", 0), ""),
            values.get("line", 0),
            functions.get(values.get("function_name_id", 0), ""),
        )
    frames = {}
    for number, row in tables.get("StackFrames", {}).items():
        values = {k: int(v) for k, v in _FIELDS.findall(row)}
        path, line, function = locations.get(values.get("file_location_id", 0), ("", 0, ""))
        frames[number] = Frame(path, line, function, max(values.get("parent_frame_id", 0) - 1, 0))
    return frames


def stack(module: HloModule, metadata: str | None) -> list[Frame]:
    """The source frames of an instruction's ``metadata={...}``, innermost first."""
    if not metadata:
        return []
    frame_id = re.search(r"stack_frame_id=(\d+)", metadata)
    if frame_id is not None:
        found, seen, number = [], set(), int(frame_id.group(1))
        while number in module.frames and number not in seen:  # a malformed table cannot loop
            seen.add(number)
            found.append(module.frames[number])
            number = module.frames[number].parent
        return found
    source = re.search(r'source_file="((?:[^"\\]|\\.)*)"\s+source_line=(\d+)', metadata)
    if source is not None:
        return [Frame(source.group(1), int(source.group(2)), "", 0)]
    return []


def op_name(metadata: str | None) -> str:
    """JAX's ``op_name`` in a ``metadata={...}``, unescaped; "" when there is none."""
    found = re.search(r'op_name="((?:[^"\\]|\\.)*)"', metadata or "")
    return re.sub(r"\\(.)", r"\1", found.group(1)) if found else ""
