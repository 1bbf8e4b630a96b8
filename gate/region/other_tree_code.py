"""The other tree's code running in a region: the head's files in the base's run, or the reverse.

``run --base`` holds both trees' code in one worker (`gate.policy.trees`). Imports find each
tree's own modules, but a cache outside both trees (an installed registry's
``functools.lru_cache``, a dict in a shared package) hands out what the tree that ran first
put there: the base then runs the head's function, and its results "match". So the first
call (setup, then the step's tracing, compiling and one run) is watched: each code object that
starts is looked at once, and the first one whose file the other tree owns is kept
(`gate.user_code.UserCode.other_tree`, the rule that also names the user's line). The transfer
map's trace function, which sees every call of the step already, does the looking where there
is a map (`gate.witness.transfer_map.mapped`'s ``untraced``); a profile function does it for
setup, and for the step where there is no map.
Nothing is watched when no other tree's code is in the process: a plain run pays nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gate.user_code import UserCode


@dataclass(frozen=True)
class OtherTreeCode:
    """A function of the other tree that ran: its module, file (relative to that tree's
    root) and first line."""

    module: str
    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.function}() of module {self.module} ({self.path}:{self.line})"


class OtherTreeWatch:
    """Sees the code objects that start while it is installed; keeps the first of the other
    tree's."""

    def __init__(self, code: UserCode) -> None:
        self.code = code
        self.found: OtherTreeCode | None = None
        self._seen: set[types.CodeType] = set()

    def look(self, frame: types.FrameType) -> None:
        """Keep ``frame``'s function if it is the other tree's and none was kept yet."""
        code = frame.f_code
        if self.found is not None or code in self._seen:
            return
        self._seen.add(code)
        root = self.code.other_tree(code.co_filename)
        if root is not None:
            path = os.path.relpath(os.path.realpath(code.co_filename), root)
            module = frame.f_globals.get("__name__")
            self.found = OtherTreeCode(
                module if isinstance(module, str) else "?", path, code.co_firstlineno, code.co_name
            )

    def profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        # Called for every call and return in the process: most end at the first test.
        if event == "call":
            self.look(frame)


def other_tree_watch(code: UserCode) -> OtherTreeWatch | None:
    """A watch for the code of the trees in ``code.other_roots``; None when there are none."""
    return OtherTreeWatch(code) if code.other_roots else None


@contextmanager
def profiled(watch: OtherTreeWatch | None) -> Iterator[None]:
    """``watch`` sees every call in the block, through a profile function (threads the block
    starts too); what the user's code had installed is put back. Nothing, for no watch.

    A profile function, not a trace function: the trace function is the transfer map's
    elsewhere, and coverage's or a debugger's when the user runs the gate under one.
    """
    if watch is None:
        yield
        return
    saved, saved_threads = sys.getprofile(), threading.getprofile()
    threading.setprofile(watch.profile)
    sys.setprofile(watch.profile)
    try:
        yield
    finally:
        sys.setprofile(saved)
        threading.setprofile(saved_threads)
