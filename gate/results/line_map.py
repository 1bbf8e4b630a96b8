"""Git's line map: which line of the base each line of the head is, as a review sees it.

A code review keeps its comments on their lines through a change; the gate keeps its findings
on theirs the same way.

``run --base`` compares two trees, and every finding names a line. A line number alone
cannot say whether two findings are one: an edit above a line moves it, a renamed file
moves every line, and an edited line has new text. The diff between the trees can
(`gate.compare.worktree` runs ``git diff -M -U0``; `parse_diff` reads it): each line of
the head is

- ``unchanged``: the diff does not touch it; it is a line of the base, at the number the
  hunks above it shift it to (in a renamed file, at the base's name: ``moved``);
- ``changed``: in a hunk that replaced base lines (`Place.replaced` names them);
- ``new``: in a hunk that replaced nothing, or in a file the base does not have.

The same map read the other way says where a base line went (`LineMap.head_line`), and
`gate.results.moves` pairs findings by it: one rule for transfers, collectives, recompiles
and work by line (unused donations have no line: they are matched by program and argument).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

UNCHANGED, CHANGED, NEW, MOVED = "unchanged", "changed", "new", "moved"
REMOVED = "removed"  # a base line the change took out, replacing it with nothing

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    """One hunk of ``git diff -U0``: base lines ``base_start..`` replaced by head lines."""

    base_start: int
    base_count: int
    head_start: int
    head_count: int


@dataclass(frozen=True)
class Place:
    """What the change did to one head line, and the base line it is (when it is one)."""

    status: str  # UNCHANGED, CHANGED, NEW or MOVED (an unchanged line of a renamed file)
    base_path: str  # the file's name in the base ("" where the base has no such file)
    # The base line it is; a changed line's, the base line at the same place in its hunk
    # (the first line replaced by the first written...); 0 for a new line.
    base_line: int
    replaced: tuple[int, ...] = ()  # a changed line: the base lines its hunk replaced

    @property
    def touched(self) -> bool:
        """Part of this change: a changed or new line."""
        return self.status in (CHANGED, NEW)


@dataclass(frozen=True)
class FileDiff:
    """One file's diff: its base name (None: new in the head) and its hunks, in order."""

    base_path: str | None
    hunks: tuple[Hunk, ...] = ()


@dataclass(frozen=True)
class LineMap:
    """The head's files, each with its base name and hunks; a file not listed is unchanged.

    Paths are relative to the repository root the gate runs in, as `SourceLocation` has them.
    """

    files: dict[str, FileDiff] = field(default_factory=dict)
    deleted: frozenset[str] = frozenset()  # base files the head does not have

    def place(self, path: str, line: int) -> Place:
        """What the change did to ``path:line`` of the head."""
        diff = self.files.get(path)
        if diff is None:
            return Place(UNCHANGED, path, line)
        if diff.base_path is None:
            return Place(NEW, "", 0)
        shift = 0
        for hunk in diff.hunks:
            if hunk.head_count and hunk.head_start <= line < hunk.head_start + hunk.head_count:
                if not hunk.base_count:
                    return Place(NEW, diff.base_path, 0)
                replaced = range(hunk.base_start, hunk.base_start + hunk.base_count)
                # The base line at the same place in the hunk (its last past its end).
                offset = min(line - hunk.head_start, hunk.base_count - 1)
                return Place(CHANGED, diff.base_path, replaced[offset], tuple(replaced))
            if _before(hunk.head_start, hunk.head_count, line):
                shift += hunk.head_count - hunk.base_count
        status = MOVED if diff.base_path != path else UNCHANGED
        return Place(status, diff.base_path, line - shift)

    def head_line(self, base_path: str, line: int) -> tuple[str, int] | None:
        """Where ``base_path:line`` of the base is in the head; None where the change
        replaced or removed it."""
        path = self._head_path(base_path)
        if path is None:
            return None
        diff = self.files.get(path)
        if diff is None:
            return path, line
        shift = 0
        for hunk in diff.hunks:
            if hunk.base_count and hunk.base_start <= line < hunk.base_start + hunk.base_count:
                return None
            if _before(hunk.base_start, hunk.base_count, line):
                shift += hunk.head_count - hunk.base_count
        return path, line + shift

    def base_status(self, base_path: str, line: int) -> str:
        """What the change did to ``base_path:line`` of the base: UNCHANGED where the head
        still has it (`head_line`), CHANGED where it replaced it with other lines, REMOVED
        where it took it out."""
        if self.head_line(base_path, line) is not None:
            return UNCHANGED
        return CHANGED if self.rewritten(base_path, line) else REMOVED

    def rewritten(self, base_path: str, line: int) -> bool:
        """Whether the change replaced ``base_path:line`` with other lines (a changed line),
        not only removed it."""
        path = self._head_path(base_path)
        diff = self.files.get(path) if path is not None else None
        return diff is not None and any(
            hunk.head_count and hunk.base_start <= line < hunk.base_start + hunk.base_count
            for hunk in diff.hunks
        )

    def _head_path(self, base_path: str) -> str | None:
        if base_path in self.deleted:
            return None
        for path, diff in self.files.items():
            if diff.base_path == base_path:
                return path
        # A base file renamed away is not the head's file of its old name (that is new).
        renamed = base_path in self.files and self.files[base_path].base_path != base_path
        return None if renamed else base_path

    def changed_lines(self, path: str) -> tuple[int, ...]:
        """The head lines of ``path`` this change wrote (changed or new), in order."""
        diff = self.files.get(path)
        if diff is None:
            return ()
        return tuple(
            line
            for hunk in diff.hunks
            for line in range(hunk.head_start, hunk.head_start + hunk.head_count)
        )

    def cause(self, path: str, line: int) -> str | None:
        """For an unchanged ``path:line``, the change that can have caused what it does now:
        the nearest changed line above it in its file, else the diff's only changed place;
        None where the gate cannot tell."""
        above = [n for n in self.changed_lines(path) if n < line]
        if above:
            return f"{path}:{above[-1]}"
        places = [(p, d.hunks[0].head_start) for p, d in self.files.items() if d.hunks]
        if len(places) == 1 and len(self.files[places[0][0]].hunks) == 1:
            where, first = places[0]
            return f"{where}:{first}"
        return None


IDENTITY = LineMap()  # no change: every line is itself


def _before(start: int, count: int, line: int) -> bool:
    """A hunk lies above ``line`` on its side: its lines end above it, or, a hunk with
    none on this side (``+12,0``: lines removed after line 12), it sits above it."""
    return start + count - 1 < line if count else start < line


def parse_diff(text: str, untracked: tuple[str, ...] = ()) -> LineMap:
    """The line map of ``git diff -M -U0 --relative`` output (``untracked``: files git does
    not know yet, new in the head)."""
    files: dict[str, FileDiff] = {}
    deleted: set[str] = set()
    hunks: list[Hunk] = []
    old: str | None = None
    new: str | None = None

    def close() -> None:
        if new is not None:
            files[new] = FileDiff(old, tuple(hunks))
        elif old is not None:
            deleted.add(old)

    for line in text.splitlines():
        if line.startswith("diff --git "):
            close()
            hunks, old, new = [], None, None
        elif line.startswith("rename from "):
            old = line[len("rename from ") :]
        elif line.startswith("rename to "):
            new = line[len("rename to ") :]
        elif line.startswith("--- "):
            old = None if line == "--- /dev/null" else _unprefixed(line[4:], "a/")
        elif line.startswith("+++ "):
            new = None if line == "+++ /dev/null" else _unprefixed(line[4:], "b/")
        else:
            found = _HUNK.match(line)
            if found:
                a, b, c, d = found.groups()
                hunks.append(
                    Hunk(int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d))
                )
    close()
    for path in untracked:
        files.setdefault(path, FileDiff(None))
    return LineMap(files, frozenset(deleted - set(files)))


def _unprefixed(name: str, prefix: str) -> str:
    name = name.split("\t", 1)[0]
    return name[len(prefix) :] if name.startswith(prefix) else name
