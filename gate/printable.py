"""Text on its way to a CI log: control characters shown, never a line a runner takes as a command.

A pull request controls much of what the gate prints: a stored baseline's fields, the step's
exception messages, its source lines, a ``--base`` ref. GitHub's runner acts on any stdout line
that starts (after blanks) with ``::`` (``::add-mask::``, ``::error file=…::``) or the older
``##[``, and a terminal acts on ESC sequences (clear the screen, an OSC 8 link). So every write
to stdout, stderr, the job summary and a ``::group::`` title goes through this module:
`printable` for a block the gate composed, `flat` for one field of it, `command` for the gate's
own workflow commands, and `say` / `write` as the writers themselves; `visible` for one field
of a page the gate writes (``transfer-gate history``). The JUnit and JSON reports keep the text
exact; only what a person or a runner reads is changed.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

# C0 and C1 controls but the line feed and the tab, DEL, the Unicode line and paragraph
# separators, the bidirectional overrides and isolates (Trojan Source, CVE-2021-42574), and
# lone surrogates, which no UTF-8 stream can write (a step's ``ValueError("\ud800")``).
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[{_CONTROLS}]")
# The same, and the line feed and the tab: nothing in one field of a page may break its line.
_ANY_CONTROL = re.compile(f"[\n\t{_CONTROLS}]")
# Every line break Python's ``str.splitlines`` knows, with the blanks around it.
_BREAKS = re.compile(r"[ \t]*[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]+\s*")
# What the gate itself writes to a terminal, and only there: colours and the live line's wipe.
_OWN_ESCAPES = re.compile(r"\x1b\[[0-9;]*m|\r\x1b\[K")
# A line a runner would act on: a workflow command, or the older ``##[command]`` form. The
# runner trims the line first, so blanks before it count too.
_COMMAND_START = re.compile(r"^(\s*)(:(?=:)|#(?=#\[))", re.MULTILINE)
# The commands the gate writes itself; nothing else is ever written as one.
_OWN_COMMANDS = re.compile(r"::(?:error|warning|notice|group|endgroup)(?: [^\n:]*)?::[^\n]*")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def _escaped(text: str, *, escapes: bool) -> str:
    if not escapes:
        return _CONTROL.sub(_shown, text)
    # The gate's own escapes kept, everything around them escaped.
    kept = []
    at = 0
    for match in _OWN_ESCAPES.finditer(text):
        kept.append(_CONTROL.sub(_shown, text[at : match.start()]))
        kept.append(match.group())
        at = match.end()
    kept.append(_CONTROL.sub(_shown, text[at:]))
    return "".join(kept)


def printable(text: str, *, escapes: bool = False) -> str:
    """``text`` safe for a CI log: control characters as ``\\x1b``, no line a runner acts on.

    Line feeds and tabs stay; a carriage return, which a log viewer takes as a new line, is
    shown as ``\\x0d``. A line that would start with ``::`` or ``##[`` gets its first character
    shown as ``\\x3a`` or ``\\x23``: still readable, never a command. ``escapes`` keeps the
    gate's own colours and line wipes, for a terminal that shows them.
    """
    text = _escaped(text, escapes=escapes)
    return _COMMAND_START.sub(_defused, text)


def _defused(match: re.Match[str]) -> str:
    return f"{match.group(1)}\\x{ord(match.group(2)):02x}"


def visible(text: str) -> str:
    """``text`` as one field of a page shows it: every control character, line breaks, tabs,
    bidirectional overrides and lone surrogates included, written as its escape (``\\u202e``).
    A page's reader sees the text as it is, never reordered or cut into lines by it."""
    return _ANY_CONTROL.sub(_shown, text)


def flat(text: str, *, escapes: bool = False) -> str:
    """``text`` as one printable line: each line break, with the blanks around it, one space.

    Spaces within a line stay, so a row aligned in columns stays aligned. ``escapes`` as for
    `printable`.
    """
    return printable(_BREAKS.sub(" ", text), escapes=escapes)


def command(line: str, *, escapes: bool = False) -> str:
    """One of the gate's own workflow commands, as built by ``workflow_command``: checked, then
    its control characters shown (``escapes`` as for `printable`: a coloured group title under
    ``FORCE_COLOR``). Anything else is a bug: the gate writes no other command."""
    if not _OWN_COMMANDS.fullmatch(line):
        raise ValueError(f"not a workflow command the gate writes: {line[:60]!r}")
    return _escaped(line, escapes=escapes)


def say(text: str = "", stream: TextIO | None = None, *, escapes: bool = False) -> None:
    """``print(text, file=stream)``, through `printable`; stdout by default."""
    write(f"{text}\n", stream, escapes=escapes)


def write(text: str, stream: TextIO | None = None, *, escapes: bool = False) -> None:
    """``stream.write(text)`` through `printable`; stdout by default."""
    (sys.stdout if stream is None else stream).write(printable(text, escapes=escapes))


def say_command(line: str, stream: TextIO | None = None) -> None:
    """One of the gate's own workflow commands on its own line (`command`); stdout by default."""
    (sys.stdout if stream is None else stream).write(command(line) + "\n")
