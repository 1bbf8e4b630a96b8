"""Replacing a class (or module) attribute of JAX's for a block, and putting the original back;
patches shared by every block active at once.

As chex's ``restrict_backends`` does, the restore checks that what it removes
is still the gate's own: if something replaced the attribute meanwhile (a
test double, another tool's patch), silently writing the original back would
throw theirs away. AssertionError names the attribute instead, and theirs
stays.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, Generic, TypeVar

Found = TypeVar("Found")  # what the patches need, looked up in this JAX before patching
Log = TypeVar("Log")  # what one active block records


@contextmanager
def attribute_replaced(
    owner: type | types.ModuleType, name: str, replacement: Any, *, label: str
) -> Iterator[None]:
    """``owner.name`` is ``replacement`` while the block runs.

    ``label`` is how refusals spell the attribute (``ArrayImpl._value``). The
    attribute must be defined on ``owner`` itself (not inherited), so the
    original can be written back exactly.
    """
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if owner.__dict__.get(name) is not replacement:
            raise AssertionError(
                f"{label} was replaced by someone else while the gate had it patched; left as it is"
            )
        setattr(owner, name, original)


class SharedPatches(Generic[Found, Log]):
    """Patches that serve every active block at once: installed by the first, removed by the last.

    Blocks may nest, or overlap across threads (a region's watch and a setup's). The
    patches are found (``find``) and installed (``install``) only while nothing is
    installed, since once patched JAX's functions would look like the gate's own; ``find``
    raises, before anything is patched, when this JAX lacks what they need. The last
    block to end closes them in ``finally``.
    """

    def __init__(
        self,
        find: Callable[[], Found],
        install: Callable[[Found], AbstractContextManager[None]],
    ) -> None:
        self._find = find
        self._install = install
        self._lock = threading.Lock()
        self._active: list[Log] = []
        self._installed: ExitStack | None = None
        self._found: Found | None = None

    def logs(self) -> list[Log]:
        """The active blocks' logs, oldest first (a copy: safe to loop over while others end)."""
        with self._lock:
            return list(self._active)

    @contextmanager
    def active(self, make_log: Callable[[Found], Log]) -> Iterator[Log]:
        """One more active block, with its log made from what was found."""
        with self._lock:
            if self._installed is None or self._found is None:
                found = self._find()
                stack = ExitStack()
                try:
                    stack.enter_context(self._install(found))
                except BaseException:
                    stack.close()
                    raise
                self._installed, self._found = stack, found
            log = make_log(self._found)
            self._active.append(log)
        try:
            yield log
        finally:
            with self._lock:
                self._active.remove(log)
                if not self._active and self._installed is not None:
                    stack, self._installed, self._found = self._installed, None, None
                    stack.close()
