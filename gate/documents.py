"""The gate's JSON documents read back: one declared schema each, every value checked on the way in.

A baseline is edited by hand and a shard's report travels between jobs, so what the gate
reads back is input like a policy: a bad value is refused before anything runs, in one
line that names the file, the key in the user's terms (``timing["p.step"].median_s``,
``accepted[0].per_step``), what was expected and the fix. The schemas are msgspec
``Struct``s (strict types, unknown keys refused, constraints such as ``ge=0``); msgspec
says where a value failed as a JSON path, and this module puts that path in the user's
terms (msgspec writes a mapping's key as ``[...]``: it is found again here).
"""

from __future__ import annotations

import enum
import json
import math
import re
import sys
import types
import typing
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from gate.limits import DOCUMENT_BYTES, DOCUMENT_NESTING, TooLarge, read_within


class Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A record of one of the gate's documents: immutable, every key it does not declare refused.

    A subclass says ``frozen=True, kw_only=True`` again: msgspec inherits them, but mypy's
    reading of the dataclass transform does not.
    """


# A count or a size the gate measured, in a document read back. XLA and JAX count in 64 bits,
# so a larger one was never measured; past 1.8e308, float() of it raises OverflowError in the
# reader that draws or compares it.
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class DocumentError(Exception):
    """The file is unreadable or not the document expected; one line naming the file and the fix."""


def encode(document: object, *, ordered: bool = True) -> str:
    """``document`` as the gate writes its files: indented, one trailing newline; keys sorted
    (stable diffs of a file people review), or, not ``ordered``, as the records declare them."""
    order: typing.Literal["sorted"] | None = "sorted" if ordered else None
    try:
        data = msgspec.json.encode(document, order=order)
    except UnicodeEncodeError:
        # A lone surrogate (a step's ``ValueError("\ud800")``) is no UTF-8: it is written as
        # the text ``\ud800``, as the JUnit report and the log show it, not the run lost.
        plain = _without_surrogates(msgspec.to_builtins(document, order=order))
        data = msgspec.json.encode(plain, order=order)
    return msgspec.json.format(data, indent=2).decode("utf-8") + "\n"


_SURROGATE = re.compile("[\ud800-\udfff]")
# Why a file may not hold one, said where a document read back does.
_SURROGATE_WHY = "half of a UTF-16 pair, which no UTF-8 text can hold"


def _surrogates_shown(text: str) -> str:
    """``text`` with each lone surrogate written as the text ``\\ud800``."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _without_surrogates(node: object) -> object:
    if isinstance(node, str):
        return _surrogates_shown(node)
    if isinstance(node, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in node.items()}
    if isinstance(node, list | tuple):  # to_builtins keeps a tuple a tuple
        return [_without_surrogates(item) for item in node]
    return node


def read_document(
    path: Path,
    *,
    formats: Collection[str],
    versions: Mapping[int, type[Any] | str],
    what: str,
    fix: str,
    shown: str | None = None,
) -> Any:
    """The document in ``path``, decoded with the schema of its version; DocumentError if not.

    ``formats``: the names its ``format`` key may have. ``versions``: each version's schema,
    or, for a version the gate can no longer read, why not. ``fix`` is what mends the whole
    file; a bad value is told "correct that key, or" that. Messages name the file ``shown``
    (as the user sees it, relative to the repository), by default ``path``.
    """
    name = str(path) if shown is None else shown
    try:
        data = read_within(path, DOCUMENT_BYTES)
    except OSError as exc:
        raise DocumentError(f"{name}: cannot read the {what} ({exc.strerror or exc})") from exc
    except TooLarge as exc:
        raise DocumentError(f"{name}: the file is {exc} for a {what}; {fix}") from None
    whole = _decoded_at_once(data, formats, versions)
    if whole is not None:
        return whole
    document = _parsed(data, name, what, fix)
    if not isinstance(document, dict) or document.get("format") not in formats:
        found = "a JSON list" if isinstance(document, list) else "no `format` of one"
        raise DocumentError(f"{name}: not a {what} ({found}); {fix}")
    version = document.get("version")
    schema = versions.get(version) if isinstance(version, int) else None
    if schema is None:
        newest = max(versions)
        if isinstance(version, int) and version > newest:
            raise DocumentError(
                f"{name}: {what} version {version} was written by a newer transfer-gate (this one "
                f"reads up to {newest}); upgrade the gate, or {fix}"
            )
        raise DocumentError(f"{name}: {what} version {version!r} is unknown; {fix}")
    if isinstance(schema, str):
        raise DocumentError(f"{name}: {what} version {version} {schema}; {fix}")
    try:
        return msgspec.json.decode(data, type=schema)
    except msgspec.ValidationError as exc:
        where, problem = _located(document, schema, exc)
        at = f"{where}: " if where else ""
        raise DocumentError(f"{name}: {at}{problem}; correct that key, or {fix}") from exc


class _Head(msgspec.Struct):
    """What says which schema reads a document; every other key is left to that schema."""

    format: object = None
    version: object = None


def _decoded_at_once(
    data: bytes, formats: Collection[str], versions: Mapping[int, type[Any] | str]
) -> Any:
    """The document, when msgspec reads it whole with its version's schema; else None.

    The common case, and a fast one: no Python objects for the JSON first, no walk over every
    number (msgspec refuses a NaN, an infinity and a number out of range itself). Whatever it
    refuses is read again the slow way, which names the key and the fix.
    """
    try:
        head = msgspec.json.decode(data, type=_Head)
    # msgspec raises RecursionError past its own depth limit: the slow way names the nesting.
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    schema = versions.get(head.version) if isinstance(head.version, int) else None
    if (
        not isinstance(head.format, str)
        or head.format not in formats
        or not isinstance(schema, type)
    ):
        return None
    try:
        return msgspec.json.decode(data, type=schema)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _parsed(data: bytes, name: str, what: str, fix: str) -> object:
    """The file's JSON, checked to be UTF-8, whole, valid and finite."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DocumentError(
            f"{name}:{line}: not UTF-8 text (byte {exc.start}); save it as UTF-8, or {fix}"
        ) from exc
    try:
        # Python's own reader, not msgspec's: it reads the NaN and Infinity that json.dump
        # writes, so that they are named at their key below instead of "malformed".
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # Cut short: nothing after the error, or a string that runs to the end of the file.
        if not text[exc.pos :].strip() or exc.msg.startswith("Unterminated string"):
            raise DocumentError(
                f"{name}:{exc.lineno}: the file ends early (was it cut short?); {fix}"
            ) from exc
        raise DocumentError(
            f"{name}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}); {fix}"
        ) from exc
    except RecursionError:
        raise DocumentError(_too_deep(name, what, fix)) from None
    except ValueError:
        # Python reads no integer of more than 4,300 digits (sys.get_int_max_str_digits()).
        raise DocumentError(f"{name}:{_long_number_line(text)}: {_digits()}; {fix}") from None
    if _nesting(document) > DOCUMENT_NESTING:
        raise DocumentError(_too_deep(name, what, fix))
    for where, value in _numbers(document, ""):
        if not math.isfinite(value):
            raise DocumentError(
                f"{name}: {where}: expected a finite number, got {_shown(value)}; "
                f"correct that key, or {fix}"
            )
    # The JSON escape "\ud800" is valid JSON, and what json.dumps writes for a lone surrogate;
    # Python reads it, msgspec refuses it with no key: it is named here.
    for where, text, is_key in _texts(document, ""):
        found = _SURROGATE.search(text)
        if found:
            holds = "the key holds the" if is_key else "the"
            raise DocumentError(
                f"{name}: {_surrogates_shown(where)}: {holds} lone surrogate "
                f"{_surrogates_shown(found.group())} ({_SURROGATE_WHY}); correct that key, or {fix}"
            )
    return document


def _nesting(document: object) -> int:
    """How deep lists and objects lie within each other in ``document``, up to one past the
    limit; walked without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        children: list[object]
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if depth <= DOCUMENT_NESTING:
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _too_deep(name: str, what: str, fix: str) -> str:
    return f"{name}: lists and objects nested more than {DOCUMENT_NESTING} deep in a {what}; {fix}"


def _long_number_line(text: str) -> int:
    """The line of the first number longer than Python reads."""
    found = re.search(f"\\d{{{sys.get_int_max_str_digits() + 1},}}", text)
    return text.count("\n", 0, found.start()) + 1 if found else 1


def _digits() -> str:
    limit = sys.get_int_max_str_digits()
    return f"a number of more than {limit} digits, longer than Python reads"


def _numbers(node: object, where: str) -> Iterator[tuple[str, float]]:
    """Every float in ``node``, with its path in the user's terms."""
    if isinstance(node, float):
        yield where, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _numbers(value, _key(where, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _numbers(value, f"{where}[{index}]")


def _texts(node: object, where: str) -> Iterator[tuple[str, str, bool]]:
    """Every string in ``node``, keys too: its path in the user's terms, the text, whether it
    is a key."""
    if isinstance(node, str):
        yield where, node, False
    elif isinstance(node, dict):
        for key, value in node.items():
            yield _key(where, key), key, True
            yield from _texts(value, _key(where, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _texts(value, f"{where}[{index}]")


def _key(where: str, key: str) -> str:
    """``timing["p.step"]`` for a region's key, ``accepted`` or ``.median_s`` for a field's."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{where}.{key}" if where else key
    return f"{where}[{json.dumps(key, ensure_ascii=False)}]"


# --- a msgspec error in the user's terms ----------------------------------------------------------

_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[\.\.\.\]")
_WORDS = {
    "float": "a number",
    "int": "a whole number",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def _located(document: object, schema: object, error: msgspec.ValidationError) -> tuple[str, str]:
    """Where in ``document`` ``error`` is, as the user writes it, and what is wrong there.

    msgspec's path names a mapping's key ``[...]``: the key is found again by checking each
    of that mapping's values on its own, then the rest of the path is read from its error.
    """
    match = _AT.match(str(error))
    assert match is not None  # the pattern matches every text
    message, path = match["message"], match["path"] or ""
    where, node, hint = "", document, schema
    for step in _STEP.finditer(path):
        field, index = step.group(1), step.group(2)
        if field is not None:
            where, node, hint = _key(where, field), _item(node, field), _field_hint(hint, field)
        elif index is not None:
            where, node, hint = f"{where}[{index}]", _item(node, int(index)), _items_hint(hint)
        else:  # a mapping's key
            return _in_mapping(where, node, _items_hint(hint), message)
    return where, _problem(message, node, hint)


def _in_mapping(where: str, node: object, hint: object, message: str) -> tuple[str, str]:
    if isinstance(node, dict):
        for key, value in node.items():
            try:
                msgspec.convert(value, hint)
            except msgspec.ValidationError as inner:
                inner_where, problem = _located(value, hint, inner)
                nested = _key(where, str(key))
                if inner_where.startswith("["):
                    return nested + inner_where, problem
                return (f"{nested}.{inner_where}" if inner_where else nested), problem
    return f"{where}[...]", _problem(message, None, None)


_MISSING = object()


def _item(node: object, key: str | int) -> object:
    if isinstance(node, dict) and isinstance(key, str):
        return node.get(key, _MISSING)
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        return node[key]
    return _MISSING


def _unwrapped(hint: object) -> object:
    """``X`` of ``X | None``: the part of an optional that holds the value."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kept = [a for a in typing.get_args(hint) if a is not type(None)]
        return kept[0] if len(kept) == 1 else hint
    return hint


def _field_hint(hint: object, field: str) -> object:
    hints = typing.get_type_hints(_unwrapped(hint)) if isinstance(_unwrapped(hint), type) else {}
    return hints.get(field)


def _items_hint(hint: object) -> object:
    """The element type of a list or tuple, the value type of a mapping."""
    args = [a for a in typing.get_args(_unwrapped(hint)) if a is not Ellipsis]
    return args[-1] if args else None


def _problem(message: str, node: object, hint: object) -> str:
    """msgspec's ``message`` about ``node`` in plain words, with the value that was found."""
    missing = re.fullmatch(r"Object missing required field `(.+)`", message)
    if missing:
        return f"missing key {json.dumps(missing[1])}"
    unknown = re.fullmatch(r"Object contains unknown field `(.+)`", message)
    if unknown:
        return f"unknown key {json.dumps(unknown[1])}"
    choices = _choices(_unwrapped(hint))
    if message.startswith("Invalid enum value") and choices:
        return f"expected one of {', '.join(choices)}, got {_shown(node)}"
    # "Expected `float | null`, got `str`": the kinds in words, and the value itself.
    text = re.sub(r", got `[^`]*`$", "", message)
    text = re.sub(
        r"`([^`]+)`",
        lambda m: " or ".join(_WORDS.get(k.strip(), k.strip()) for k in m[1].split("|")),
        text,
    )
    text = text[0].lower() + text[1:]
    return text if node is _MISSING else f"{text}, got {_shown(node)}"


def _choices(hint: object) -> list[str]:
    """The values a ``Literal`` or an enum allows, as JSON."""
    if typing.get_origin(hint) is typing.Literal:
        return [json.dumps(a) for a in typing.get_args(hint)]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return [json.dumps(member.value) for member in hint]
    return []


def _shown(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
