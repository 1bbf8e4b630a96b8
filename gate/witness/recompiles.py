"""Which function compiled again after warm-up, at which of the user's lines, and why.

Also what each function compiled in the step's first call and warm-up
(`programs_compiled`), and which of them compiled more programs there than they should
(`startup_recompiles`): more than the base's, or again at the same shapes.

`gate.jaxhooks.compiles` hands over raw compile events (JAX's name for the
function, the stack, JAX's cache-miss log); this turns them into
`Recompile` records, one per function and call line, with what changed in
readable words: ``x: float32[200,64] before, float32[201,64] now``.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Sequence

from gate.jaxhooks.compiles import CompileEvent
from gate.jaxhooks.internals import PMAP_PROGRAM_NAMES
from gate.jaxhooks.static_misses import FIRST_DIFFERS
from gate.results.line_map import IDENTITY, LineMap
from gate.results.recompile_changes import startup_pairs, told
from gate.results.records import ProgramsCompiled, Recompile
from gate.user_code import SourceLocation, UserCode

# JAX's short dtype names in its cache-miss log, as the rest of the report writes them.
_DTYPES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "c64": "complex64",
    "c128": "complex128",
}
_SHORT_DTYPE = re.compile(r"\b(" + "|".join(_DTYPES) + r")(?=\[)")
# "* at x, now f32[201,64] and before f32[200,64]"
_TYPE_CHANGE = re.compile(
    r"^\*\s+at\s+(?P<at>.+?),\s+now\s+(?P<now>.+?)\s+and before\s+(?P<was>.+)$"
)
# A static argument reads "<class '...Static'> with pytree metadata Static(val=3), so ...".
_STATIC = re.compile(r"Static\(val=(?P<val>.*?)\)(?:,|$)")
# Any other pytree node whose static fields changed (a TrainState with a new optax object).
_NODE = re.compile(r"<class '(?:[\w.]+\.)?(?P<cls>\w+)'> with pytree metadata")
_WEAK = re.compile(r"\{weak_type=(?:True|False)\}")
_METADATA = "pytree node metadata does not match"
# The gate's own line after JAX's (`gate.jaxhooks.static_misses.first_differences`).
_FIRST = re.compile(
    r"^" + re.escape(FIRST_DIFFERS.strip()) + r"\s+(?P<where>.+?): (?P<what>.+?)"
    r"(?: \(made at (?P<file>.+):(?P<line>\d+)\))?$"
)
_NEW_FUNCTION = "never seen function"
_NO_EXPLANATION = "explanation unavailable"
_CHANGE_LIMIT = 300
# One static value's share of that (jax 0.10 prints a static argument whole: a model, say).
_VALUE_LIMIT = 120


def _cut(text: str, limit: int) -> str:
    # On one line: a value's repr may hold line breaks, and a "\r" starts a line for GitHub.
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dtype_names(text: str) -> str:
    text = _SHORT_DTYPE.sub(lambda m: _DTYPES[m.group(1)], text)
    # JAX glues its weak-type documentation link onto the type; the fix hint says it better.
    return re.sub(r"https?://\S+", "", text).strip()


def explain(texts: Sequence[str], user: UserCode | None = None) -> str | None:
    """What changed, from JAX's cache-miss log for one compile; None when JAX did not say.

    Where a static value changed, the place it first differs and the line that made the
    object there (the gate's own line after JAX's), never the two values' common prefix."""
    for text in texts:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if any(_NEW_FUNCTION in line for line in lines):
            return (
                "a new function object on every call (a jax.jit wrapper, lambda or "
                "functools.partial made per call), so JAX's cache never hits"
            )
        firsts = [m for line in lines if (m := _FIRST.match(line)) is not None]
        if firsts:
            return "; ".join(_first_difference(m, user) for m in firsts)
        changes = []
        for line in lines:
            match = _TYPE_CHANGE.match(line)
            if match is not None:
                at, was, now = match["at"], match["was"], match["now"]
                statics = _STATIC.search(was), _STATIC.search(now)
                if statics[0] and statics[1]:
                    at = f"static argument {at.removeprefix('input path ')}"
                    was = _cut(statics[0]["val"], _VALUE_LIMIT)
                    now = _cut(statics[1]["val"], _VALUE_LIMIT)
                elif _METADATA in line and (node := _NODE.search(now)) is not None:
                    changes.append(
                        f"{at}: a {node['cls']} whose static fields (pytree metadata) differ "
                        "from the earlier call's"
                    )
                    continue
                changes.append(f"{at}: {_dtype_names(was)} before, {_dtype_names(now)} now")
        if changes:
            return "; ".join(changes)
        # Another reason (a static argument, the pytree, a config value): JAX's own
        # words after its header lines, on one line.
        body = [
            line
            for line in lines[1:]
            if not line.startswith(("for ", "all previously seen", "For the closest"))
        ]
        if body and not any(_NO_EXPLANATION in line for line in body):
            said = _dtype_names(" ".join(body))
            return _cut(said, _CHANGE_LIMIT)
    return None


def _first_difference(match: re.Match[str], user: UserCode | None) -> str:
    """``static argument [0][2], at [1][0][3] of its value: a new functools.partial(...) on
    each call (...), made at weight_norm.py:43``: the gate's own words, the file shown as the
    report shows files."""
    where = match["where"]
    made = ""
    if match["file"]:
        shown = user.shown(match["file"]) if user is not None else match["file"]
        made = f", made at {shown}:{match['line']}"
    return f"{where}: {match['what']}{made}"


def program_name(event: CompileEvent, user: UserCode) -> str:
    """The program as the user wrote it: ``pmap(<lambda> at train.py:25)`` where JAX names a
    pmap's program after its own wrapper (``jit(_fun)``); JAX's name everywhere else."""
    if event.written is None or event.fun_name not in PMAP_PROGRAM_NAMES:
        return event.fun_name
    traced_for, source = event.written
    name, at, where = source.rpartition(" at ")
    path, colon, line = where.rpartition(":")
    if not at or not colon:
        return f"{traced_for}({source})"
    return f"{traced_for}({name} at {user.relative(path)}:{line})"


def attribute(
    events: Sequence[CompileEvent],
    user: UserCode,
    runs: int,
    step_location: SourceLocation | None,
    *,
    failing: bool,
) -> tuple[Recompile, ...]:
    """One `Recompile` per function and call line, in the order they first compiled.

    The line is the innermost frame of the user's when JAX compiled; a jitted
    step the gate calls itself has none, and is named at its ``def``.
    """
    grouped: dict[tuple[str, SourceLocation | None], list[CompileEvent]] = {}
    for event in events:
        location = user.locate(event.stack) or step_location
        grouped.setdefault((program_name(event, user), location), []).append(event)
    found = []
    for (function, location), members in grouped.items():
        change = next((c for c in (explain(e.explanations, user) for e in members) if c), None)
        found.append(
            Recompile(
                function=function,
                location=location,
                count=len(members),
                runs=runs,
                change=change,
                failing=failing,
                source=_source(user, location),
            )
        )
    return tuple(found)


def _source(user: UserCode, location: SourceLocation | None) -> str | None:
    if location is None:
        return None
    path = location.path
    absolute = path if path.startswith("/") else str(user.repo_root / path)
    return linecache.getline(absolute, location.line).strip() or None


def weak_types_only(texts: Sequence[str]) -> bool:
    """Whether JAX's cache-miss log names type changes, and each is a weak type flipping at
    the same dtype and shape (``f32[]{weak_type=True}`` before, ``f32[]`` now)."""
    changes = [
        match
        for text in texts
        for line in text.splitlines()
        if (match := _TYPE_CHANGE.match(line.strip())) is not None
    ]
    return bool(changes) and all(
        _WEAK.sub("", _dtype_names(m["was"])) == _WEAK.sub("", _dtype_names(m["now"]))
        for m in changes
    )


def programs_compiled(
    events: Sequence[CompileEvent], user: UserCode, step_location: SourceLocation | None
) -> tuple[ProgramsCompiled, ...]:
    """The programs each function compiled in the first call and warm-up, in first-compile
    order, at the line of its last compile there (where a second program came from)."""
    grouped: dict[str, list[CompileEvent]] = {}
    for event in events:
        grouped.setdefault(program_name(event, user), []).append(event)
    found = []
    for function, members in grouped.items():
        location = user.locate(members[-1].stack) or step_location
        later = [e.explanations for e in members[1:]]
        found.append(
            ProgramsCompiled(
                function=function,
                location=location,
                count=len(members),
                change=next((c for c in (explain(texts, user) for texts in later) if c), None),
                same_shapes=bool(later) and all(weak_types_only(texts) for texts in later),
                source=_source(user, location),
            )
        )
    return tuple(found)


def startup_recompiles(
    head: Sequence[ProgramsCompiled],
    base: Sequence[ProgramsCompiled] | None,
    runs: int,
    *,
    failing: bool,
    lines: LineMap = IDENTITY,
) -> tuple[Recompile, ...]:
    """The functions that compiled more programs in the first call and warm-up than they
    should: than the base's count of the same function (``run --base``), or, with no base,
    again at the same shapes (a weak type flipping between calls, the classic).

    Against the base, a function is the base's where git's line map says its line is
    (``lines``, `gate.results.recompile_changes`), and counts only where JAX explained the
    extra program (a jitted function's tracing cache miss): an eager operation
    (``jit(multiply)``) compiles once per shape it meets and JAX explains none of them, so
    new code that multiplies at a new shape is not a recompile. A function with no
    counterpart in the base is new code, judged as without a base: only a second program at
    the same shapes is one."""
    pairs = startup_pairs(head, base, lines) if base is not None else {}
    found = []
    vs_base = base is not None
    for programs in head:
        pair = pairs.get(id(programs))
        if pair is not None:
            if programs.count <= pair.old.count or programs.change is None:
                continue
        elif programs.count < 2 or not programs.same_shapes:
            continue
        found.append(
            Recompile(
                function=programs.function,
                location=programs.location,
                count=programs.count,
                runs=runs,
                change=programs.change,
                failing=failing,
                source=programs.source,
                startup=True,
                base_count=pair.old.count if pair is not None else None,
                # What the change did to its line, and where it caused it: the programs
                # beyond the base's are the change's, whichever line compiled them.
                line_change=told(lines, programs.location, pair, new=True) if vs_base else "",
            )
        )
    return tuple(found)
