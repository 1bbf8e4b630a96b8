"""What no line of a CI log, job summary or page the gate writes may hold raw."""

from __future__ import annotations

import re

# What the gate writes as a workflow command itself; every other line starting with "::" (after
# blanks, which GitHub's runner trims) or "##[" would be a command the input smuggled in.
OWN_COMMAND = re.compile(r"::(error|warning|group|endgroup)( [^:]*)?::.*")
COMMAND_START = re.compile(r"^\s*(::|##\[)")
# Raw control characters but the line feed and the tab, and lone surrogates.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def safe_for_a_log(name: str, text: str) -> None:
    """No raw control character in ``text``, and no line a runner acts on but the gate's own."""
    for number, line in enumerate(text.split("\n"), 1):
        assert not RAW_CONTROL.search(line), f"{name}:{number}: raw control character: {line!r}"
        if COMMAND_START.match(line):
            # The payload may sit in the message of one of the gate's own, escaped.
            assert OWN_COMMAND.fullmatch(line), f"{name}:{number}: not the gate's own: {line!r}"
            assert not line.startswith("::error file=README.md"), f"{name}:{number}: {line!r}"
