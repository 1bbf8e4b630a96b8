"""The other tree's code running in a region: the head's files in the base's run, or the reverse.

``run --base`` holds both trees' code in one worker (`gate.policy.trees`). Imports find each
tree's own modules, but a cache outside both trees (an installed registry's
``functools.lru_cache``, a dict in a shared package) hands out what the tree that ran first
put there: the base then runs the head's function, and its results "match". So while a
region's first call runs (setup, tracing, compiling and one run of the step), a profile
function looks once at each code object that starts and notes the first one whose file the
other tree owns (`gate.user_code.UserCode.other_tree`, the rule that also names the user's
line). It is installed only when another tree's code is in the process: a plain run pays
nothing, and the comparison's first-call times carry the same cost on both sides.
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

    def profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        # Called for every call and return in the process: most end at the first test.
        if event != "call" or self.found is not None:
            return
        code = frame.f_code
        if code in self._seen:
            return
        self._seen.add(code)
        root = self.code.other_tree(code.co_filename)
        if root is not None:
            path = os.path.relpath(os.path.realpath(code.co_filename), root)
            module = frame.f_globals.get("__name__")
            self.found = OtherTreeCode(
                module if isinstance(module, str) else "?", path, code.co_firstlineno, code.co_name
            )


@contextmanager
def watching_other_trees(code: UserCode) -> Iterator[OtherTreeWatch | None]:
    """Watch the block for code of the trees in ``code.other_roots``; None when there are none.

    A profile function, not a trace function: the transfer map's `sys.settrace` runs in the
    same block, and the two do not meet. Threads the block starts are watched too; what the
    user's code had installed is put back.
    """
    if not code.other_roots:
        yield None
        return
    watch = OtherTreeWatch(code)
    saved, saved_threads = sys.getprofile(), threading.getprofile()
    threading.setprofile(watch.profile)
    sys.setprofile(watch.profile)
    try:
        yield watch
    finally:
        sys.setprofile(saved)
        threading.setprofile(saved_threads)
