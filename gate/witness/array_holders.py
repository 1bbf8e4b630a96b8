"""What holds an array: a user module's global, a closure's variable, an object's attribute.

A walk outward from the globals of the user's modules, breadth first (so the shortest way
to the arrays is named), through what Python code can reach: containers' items, functions'
closures (also behind ``jax.jit``'s ``__wrapped__``), objects' and classes' attributes. The
container that holds one of the arrays is named by the way to it,
``global 'tracker', attribute 'history' (list)``. Where the walk finds nothing, the garbage
collector's referrers are climbed from one array: a cached function (``functools.cache``,
``lru_cache``, JAX's own ``WeakrefLRUCache``), a closure or a global of any module, a
library's too, is named with its file and line; failing that, the kind of container. Run
once per leaking region, never in a timed run.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import inspect
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gate.results.leaks import Holder
from gate.user_code import UserCode, attribute_line, global_lines

# The walk stops after this many objects: a holder is almost always a few steps from a global.
_BUDGET = 200_000
_MAX_DEPTH = 8
# Values that hold nothing worth walking into.
_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, memoryview)


# Where a step of a way is made, worked out when asked: a line and its file, or None.
Place = Callable[[], "tuple[int, str] | None"]


@dataclass(frozen=True)
class _Way:
    """How the walk reached an object: from which global of which module, through what.

    Step ``i`` reaches ``objects[i]``; ``places[i]`` says where that step is made (a line and
    its file), asked only of the way finally named: reading a class's source for every
    attribute walked past would cost most of the walk.
    """

    module: types.ModuleType
    steps: tuple[str, ...]  # "global 'tracker'", "attribute 'history'", "item 3", ...
    objects: tuple[Any, ...]
    places: tuple[Place | None, ...]

    def then(self, step: str, child: Any, place: Place | None) -> _Way:
        return _Way(self.module, (*self.steps, step), (*self.objects, child), (*self.places, place))

    def made_at(self, at: int) -> tuple[int | None, str]:
        """The line (and file) that makes step ``at``: its own, else the nearest before it."""
        for place in reversed(self.places[: at + 1]):
            found = place() if place is not None else None
            if found is not None:
                return found
        return None, self.module.__file__ or ""


def find_holder(first: Sequence[Any], later: Sequence[Any], user: UserCode) -> Holder | None:
    """The container that holds ``first`` (arrays one run kept) and ``later`` (those later
    runs kept), reached from the user's modules; None if nothing reachable holds them.

    The way to one of ``first`` ends in what holds it directly; the holder named is the
    innermost container on that way that also reaches one of ``later``: the list a step
    appends its parameter tree to, not the tree.
    """
    modules = [
        m
        for m in list(sys.modules.values())
        if isinstance(m, types.ModuleType)
        and isinstance(getattr(m, "__file__", None), str)
        and user.is_user(m.__file__ or "")
    ]
    way = _walk(modules, {id(a) for a in first}, user)
    if way is None:
        with _all_in_sight():
            return _referrer(first, user, (later,))
    others = {id(a) for a in later}
    at = len(way.objects) - 1
    while at > 0 and others and not _reaches(way.objects[at], others, user):
        at -= 1
    if others and not _reaches(way.objects[at], others, user):
        at = len(way.objects) - 1  # nothing holds both: name what holds the first
    line, path = way.made_at(at)
    return Holder(
        user.relative(path), line, f"{', '.join(way.steps[: at + 1])} ({_kind(way.objects[at])})"
    )


def _walk(modules: list[types.ModuleType], targets: set[int], user: UserCode) -> _Way | None:
    """The shortest way from a module's global to an object that holds one of ``targets``."""
    queue: collections.deque[tuple[_Way, int]] = collections.deque()
    visited: set[int] = {id(m) for m in modules}
    for module in modules:
        lines = global_lines(module)
        for name, value in list(vars(module).items()):
            if name.startswith("__") or isinstance(value, types.ModuleType):
                continue
            line = lines.get(name)
            at: Place | None = None
            if line is not None:
                at = functools.partial(_at, line, module.__file__ or "")
            way = _Way(module, (f"global '{name}'",), (value,), (at,))
            queue.append((way, 0))
    walked = 0
    while queue and walked < _BUDGET:
        way, depth = queue.popleft()
        holder = way.objects[-1]
        if id(holder) in visited or isinstance(holder, _ATOMS) or _is_array(holder):
            continue
        visited.add(id(holder))
        walked += 1
        for step, child, place in _safely(holder, user):
            if id(child) in targets:
                return way
            if depth + 1 < _MAX_DEPTH and not isinstance(child, types.ModuleType):
                queue.append((way.then(step, child, place), depth + 1))
    return None


def _reaches(start: Any, targets: set[int], user: UserCode, depth: int = 4) -> bool:
    """Whether ``start`` holds one of ``targets`` within ``depth`` steps."""
    level, seen = [start], {id(start)}
    for _ in range(depth):
        following = []
        for holder in level:
            if isinstance(holder, _ATOMS) or _is_array(holder):
                continue
            for _, child, _ in _safely(holder, user):
                if id(child) in targets:
                    return True
                if id(child) not in seen and not isinstance(child, types.ModuleType):
                    seen.add(id(child))
                    following.append(child)
        level = following[:_BUDGET]
    return False


def _safely(holder: Any, user: UserCode) -> list[tuple[str, Any, Place | None]]:
    """`_children`, or none where reading them raises (a container of the user's whose
    iteration does): the walk goes on without it."""
    try:
        return list(_children(holder, user))
    except Exception:
        return []


def _children(holder: Any, user: UserCode) -> Iterator[tuple[str, Any, Place | None]]:
    """What ``holder`` refers to, each with how to name the step and where it is made.

    A library's classes and functions are not walked into: what a step keeps, it keeps in
    the user's code or in objects (a library's too) that the user's code holds.
    """
    if isinstance(holder, dict):
        for key, value in list(holder.items()):
            yield f"key {key!r:.40}", value, None
    elif isinstance(holder, (list, tuple, collections.deque)):
        for index, value in enumerate(list(holder)):
            yield f"item {index}", value, None
    elif isinstance(holder, (set, frozenset)):
        for value in list(holder):
            yield "member", value, None
    elif isinstance(holder, types.FunctionType):
        code = holder.__code__
        if not user.is_user(code.co_filename):
            return
        place = functools.partial(_at, code.co_firstlineno, code.co_filename)
        for name, cell in zip(code.co_freevars, holder.__closure__ or (), strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            yield f"closure variable '{name}' of {holder.__qualname__}", value, place
        for name, value in list((holder.__kwdefaults__ or {}).items()):
            yield f"default '{name}' of {holder.__qualname__}", value, place
        for index, value in enumerate(holder.__defaults__ or ()):
            yield f"default {index} of {holder.__qualname__}", value, place
    elif isinstance(holder, types.MethodType):
        yield "bound to", holder.__self__, None
        yield "function", holder.__func__, None
    elif isinstance(holder, functools.partial):
        yield "partial's function", holder.func, None
        for index, value in enumerate(holder.args):
            yield f"partial's argument {index}", value, None
        for name, value in holder.keywords.items():
            yield f"partial's argument '{name}'", value, None
    elif isinstance(holder, type):
        if _defined_by_user(holder, user):  # a class attribute: `history = []` in its body
            for name, value in _attributes(holder):
                yield f"attribute '{name}'", value, functools.partial(attribute_line, holder, name)
    else:
        # Read from the instance's own dict, as every attribute here: getattr could run a
        # property or a __getattr__ of the user's.
        wrapped = _own(holder).get("__wrapped__")
        if wrapped is not None:  # jax.jit's and functools.wraps's wrappers
            yield "wrapping", wrapped, None
        for name, value in _attributes(holder):
            yield f"attribute '{name}'", value, functools.partial(attribute_line, holder, name)


def _defined_by_user(cls: type, user: UserCode) -> bool:
    module = sys.modules.get(cls.__module__)
    filename = getattr(module, "__file__", None)
    return isinstance(filename, str) and user.is_user(filename)


def _at(line: int, filename: str) -> tuple[int, str]:
    return line, filename


def _own(holder: Any) -> dict[str, Any]:
    try:
        own = vars(holder)
    except TypeError:  # no __dict__
        return {}
    return own if isinstance(own, dict) else dict(own)


def _attributes(holder: Any) -> list[tuple[str, Any]]:
    """An object's (or a class's own) attributes, without calling a property."""
    found = [
        (name, value)
        for name, value in list(_own(holder).items())
        if not (name.startswith("__") and name.endswith("__"))
    ]
    for name in getattr(type(holder), "__slots__", ()):
        if isinstance(name, str):
            try:
                found.append((name, object.__getattribute__(holder, name)))
            except Exception:  # an empty slot (AttributeError), or a descriptor that raises
                continue
    return found


def _is_array(value: Any) -> bool:
    return type(value).__module__.startswith("jaxlib") and hasattr(value, "is_deleted")


def _kind(container: Any) -> str:
    return type(container).__name__


# How far up the garbage collector's referrers the climb goes, and how many it keeps a level.
_CLIMB = 6
_CLIMB_WIDTH = 2_000


def _referrer(arrays: Sequence[Any], user: UserCode, ours: Sequence[Any]) -> Holder | None:
    """What holds the first of ``arrays`` where no walk from the user's modules reached it: a
    cached function (``functools.cache``, ``lru_cache``, JAX's own caches), a closure, or a
    global of any module, a library's too. Found by climbing the garbage collector's
    referrers, one scan a level; ``ours`` are the gate's own lists that hold the arrays."""
    own = {id(arrays), *(id(o) for o in ours)}
    level: list[Any] = list(arrays[:1])
    seen = {id(a) for a in level}
    kinds: list[Any] = []
    for _ in range(_CLIMB):
        own.add(id(level))
        found = [
            r
            for r in gc.get_referrers(*level)
            if id(r) not in own and id(r) not in seen and not _is_scaffold(r, level)
        ]
        following: list[Any] = []
        for referrer in found:
            seen.add(id(referrer))
            named = _named_holder(referrer, level, user)
            if named is not None:
                return named
            if isinstance(referrer, types.FrameType):
                continue  # a frame's locals: a function still running, not a holder
            kinds.append(referrer)
            following.append(referrer)
        level = following[:_CLIMB_WIDTH]
        if not level:
            break
    container = next(
        (k for k in kinds if isinstance(k, (list, dict, tuple, set, collections.deque))), None
    )
    if container is None:
        return None
    return Holder(None, None, f"a {_kind(container)} that no module of the user's reaches")


@contextlib.contextmanager
def _all_in_sight() -> Iterator[None]:
    """The collector sees every object for the block: a worker freezes what it imported
    (`gate.isolation.leftovers`), and ``gc.get_referrers`` never looks at frozen objects, a
    module's globals and a library's caches among them. Frozen again after: the leak was just
    collected for (`gate.region.leaks`), so little of this region's garbage is frozen with it."""
    if gc.get_freeze_count() == 0:
        yield
        return
    gc.unfreeze()
    try:
        yield
    finally:
        gc.freeze()


def _is_scaffold(referrer: Any, level: list[Any]) -> bool:
    """The argument tuple of the gate's own ``gc.get_referrers(*level)`` call."""
    return (
        isinstance(referrer, tuple)
        and len(referrer) == len(level)
        and all(a is b for a, b in zip(referrer, level, strict=True))
    )


def _named_holder(referrer: Any, held: list[Any], user: UserCode) -> Holder | None:
    """``referrer`` as a holder worth naming (a cached function, a closure's function, a
    module's globals) with its file and line; None for anything else."""
    if "LRUCache" in type(referrer).__name__:  # jaxlib's WeakrefLRUCache
        owner = _global_holding(referrer)
        if owner is not None:
            module, name = owner
            line = global_lines(module).get(name)
            what = f"the cache of {module.__name__}.{name} ({type(referrer).__name__})"
            return _placed(user, module.__file__, line, what)
        return Holder(None, None, f"a {type(referrer).__name__} that no module names")
    if type(referrer).__name__ == "_lru_cache_wrapper" or hasattr(referrer, "cache_info"):
        return _cache_holder(referrer, user)
    closure = getattr(referrer, "__closure__", None)
    if isinstance(referrer, types.FunctionType) and any(closure is h for h in held):
        code = referrer.__code__
        # A decorator's wrapper (functools.wraps) carries the name of what it wraps.
        made = getattr(code, "co_qualname", code.co_name)
        if hasattr(referrer, "__wrapped__"):
            what = f"the cache of {referrer.__qualname__} (a closure of {made})"
        else:
            what = f"a closure variable of {made} (function)"
        return _placed(user, code.co_filename, code.co_firstlineno, what)
    if isinstance(referrer, dict):
        globals_of = _module_of_globals(referrer)
        if globals_of is not None:
            names = [k for k, v in referrer.items() if any(v is h for h in held)]
            if names:
                name = str(names[0])
                value = referrer[names[0]]
                return _placed(
                    user,
                    globals_of.__file__,
                    global_lines(globals_of).get(name),
                    f"global '{name}' of module {globals_of.__name__} ({_kind(value)})",
                )
    return None


def _cache_holder(wrapper: Any, user: UserCode) -> Holder:
    """A ``functools.cache``'d function (or one cached like it), named by the function it
    caches: ``the cache of embed (functools.lru_cache)``."""
    function = inspect.unwrap(wrapper)
    code = getattr(function, "__code__", None)
    name = getattr(function, "__qualname__", None) or getattr(wrapper, "__qualname__", "?")
    module = getattr(function, "__module__", None)
    if module and code is not None and not user.is_user(code.co_filename):
        name = f"{module}.{name}"
    what = f"the cache of {name} ({type(wrapper).__module__}.lru_cache)"
    if code is None:
        return Holder(None, None, what)
    return _placed(user, code.co_filename, code.co_firstlineno, what)


def _placed(user: UserCode, filename: str | None, line: int | None, what: str) -> Holder:
    """A holder in the user's file is reported at its line; one in a library's (or the
    standard library's) says its file and line in words, and is reported at the policy's line:
    an annotation belongs on a file of the repository."""
    if filename and user.is_user(filename):
        return Holder(user.relative(filename), line, what)
    if not filename:
        return Holder(None, None, what)
    where = user.shown(filename) + (f":{line}" if line else "")
    return Holder(None, None, f"{what} in {where}")


def _module_of_globals(namespace: dict[str, Any]) -> types.ModuleType | None:
    """The module whose globals ``namespace`` is, if any."""
    name = namespace.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    return module if module is not None and vars(module) is namespace else None


def _global_holding(value: Any) -> tuple[types.ModuleType, str] | None:
    """A module global that is ``value``: its module and name."""
    for referrer in gc.get_referrers(value):
        if isinstance(referrer, dict):
            module = _module_of_globals(referrer)
            if module is not None:
                for name, held in referrer.items():
                    if held is value:
                        return module, str(name)
    return None
