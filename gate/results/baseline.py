"""The baseline: implicit transfers a repository has accepted, so the gate fails only new ones.

A finding is matched by a fingerprint that survives unrelated edits: the
region and every part of the finding's `Site` (direction, kind, boundary,
thread, the array moved), with the line's file, enclosing function and text
(whitespace-normalised) for its location, plus its rank among identical
findings of that function. Line numbers are left out on purpose: code added
above a line must not turn an accepted transfer into a new one. The array
counts as its dtype, rank and every dimension but the leading one: a new batch
size is the same array, a different array (other dtype or feature dimensions)
is a new transfer. A finding no entry's fingerprint matches may still have only moved
(another file, same function and text): `gate.results.moves` pairs it with the entry it
left, and it does not fail.

The fingerprint is a hash of what the finding's entry shows (`entry_fingerprint`): a
finding is first written as its entry, then hashed, so an entry's own fields say which
transfer it accepts. The baseline file refuses an entry whose fingerprint is not that of
its fields (issue 54: an entry showing an accepted line with a new line's fingerprint).

The file (`gate.results.baseline_file`) is JSON, sorted and indented, one entry per
accepted line, so a reviewer sees in the PR diff when someone accepts a new transfer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal, cast

import msgspec

from gate.documents import Record
from gate.results.findings import Finding, group
from gate.results.line_map import IDENTITY, MOVED, LineMap
from gate.results.moves import Spot, matched, moved_only, transfer_key
from gate.results.records import RegionResult, RunResult, Transfer
from gate.text import counted
from gate.user_code import SourceLocation

DEFAULT_NAME = "transfer-gate-baseline.json"
# How a note that says what accepts a failure against the stored baseline begins.
NEXT_STEP = "next step: "
# Where an entry written before destinations were fingerprinted is also found, under its
# fingerprint without one (`Accepted.destination` is None).
_LEGACY = "legacy:"


Times = Annotated[int, msgspec.Meta(ge=0)]
DirectionLabel = Literal["host-to-device", "device-to-host", "device-to-device"]


class Accepted(Record, frozen=True, kw_only=True, omit_defaults=True):
    """One accepted line: what it is, and how often it may move data.

    A record of the baseline file's schema: msgspec refuses an entry with a value of the
    wrong kind (``per_step: -3``, ``direction: "sideways"``) as it reads the file. Every
    field but the counts (and the fingerprint itself) is part of the fingerprint
    (`entry_fingerprint`); those at their defaults are left out of the file.
    """

    region: Annotated[str, msgspec.Meta(min_length=1)]  # suite.region
    fingerprint: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{16}$")]
    direction: DirectionLabel
    kind: Literal["implicit", "explicit"]
    path: str
    function: str
    source: str
    per_step: Times
    first_call: Times
    array: str  # the array's fingerprint part, e.g. "float32[*,16,16,1]" or "y float32[*,64]"
    # On a mesh, the spec it landed in ("P('data')"), part of the fingerprint; "" for none.
    # None in an entry written before destinations were fingerprinted: it is matched
    # by the fingerprint without one (`_LEGACY`), so an older baseline keeps working.
    destination: str | None = None
    # The declared boundary it ran in, and the user's thread that moved it; "" for none.
    boundary: str = ""
    thread: str = ""
    # Which of several identical lines (same region, function, text, array...) it is,
    # counted from the top of the file: 2 for the second ``float(loss)`` in one function.
    occurrence: Annotated[int, msgspec.Meta(ge=1)] = 1

    def describe(self) -> str:
        to = f" to {self.destination}" if self.destination else ""
        scope = "".join(
            f", {label} {value}"
            for label, value in (
                ("in boundary", self.boundary),
                ("on thread", self.thread),
                ("occurrence", str(self.occurrence) if self.occurrence != 1 else ""),
            )
            if value
        )
        return (
            f"{self.kind} {self.direction} {self.array}{to} in {self.path} ({self.function}"
            f"{scope}): {self.source}"
        )


def entry_fingerprint(entry: Accepted) -> str:
    """The fingerprint of the transfer ``entry`` shows: a hash of its region and every field
    that says which transfer it is, its counts left out.

    A finding's fingerprint is its entry's (`fingerprints`), so an entry whose fingerprint
    is not this one accepts another transfer than it shows (`gate.results.baseline_file`
    refuses it). The parts are hashed in the order fingerprints have always had, so every
    baseline written before keeps its fingerprints.
    """
    return _hashed(_identity(entry), entry.occurrence)


def _identity(entry: Accepted) -> tuple[str, ...]:
    """What makes ``entry`` the transfer it is, but which of identical ones (`occurrence`)."""
    # "y float32[*,64]": the argument's name, then the array's class, which has no blank.
    argument, _, array = entry.array.rpartition(" ")
    return (
        entry.region,
        entry.direction.replace("-", "_"),
        entry.kind,
        entry.path,
        entry.function,
        _normalized(entry.source),
        entry.boundary,
        entry.thread,
        array,
        # On one device there is none, and an entry written before destinations were
        # fingerprinted has None: both are hashed as before destinations were read.
        *((entry.destination,) if entry.destination else ()),
        argument,
    )


def _hashed(identity: tuple[str, ...], occurrence: int) -> str:
    # surrogatepass: a lone surrogate in a field (which UTF-8 cannot hold) is hashed, not a crash.
    text = "\x1f".join((*identity, str(occurrence - 1)))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _normalized(source: str | None) -> str:
    return " ".join((source or "").split())


def array_class(dtype: str | None, shape: tuple[int, ...] | None) -> str:
    """``float32[*,16,16,1]``: dtype, rank and every dimension but the leading (batch) one."""
    if dtype is None:
        return "undescribed"
    if shape is None:
        return f"{dtype}[?]"
    dims = ["*", *(str(d) for d in shape[1:])] if shape else []
    return f"{dtype}[{','.join(dims)}]"


def _shown(region: str, finding: Finding, *, destinations: bool) -> Accepted:
    """``finding`` as its baseline entry shows it, before it is ranked and fingerprinted.

    Every part of the finding's `Site` shows here (tests/test_findings.py checks it): a part
    added to `Site` must be too, or two findings would share one entry. The location shows
    by file, function and text, never by line number; the array by its class, after the name
    of the jitted call's argument where the gate found one. ``destinations=False``: as a
    baseline written before destinations were fingerprinted has it (``destination`` None).
    """
    where = finding.location
    destination = finding.destination.spec if finding.destination else ""
    return Accepted(
        region=region,
        fingerprint="",
        direction=cast(DirectionLabel, finding.direction.label),
        kind="explicit" if finding.explicit else "implicit",
        path=where.path if where else "",
        function=where.function if where else "",
        source=_normalized(finding.source),
        per_step=finding.per_step,
        first_call=finding.first_call,
        array=_array_label(finding),
        destination=destination if destinations else None,
        boundary=finding.boundary or "",
        thread=finding.thread or "",
    )


def _array_label(finding: Finding) -> str:
    """The entry's ``array``: ``float32[*,64]``, or ``y float32[*,64]`` when named."""
    array = array_class(finding.dtype, finding.shape)
    return f"{finding.argument} {array}" if finding.argument else array


def entries(
    region: str, findings: Sequence[Finding], *, destinations: bool = True
) -> dict[Finding, Accepted]:
    """Each finding of one region as its baseline entry, fingerprint and all.

    Identical findings (the same entry but for the line number) are told apart by their
    ``occurrence``, counted by line. ``destinations=False``: as a baseline written before
    destinations were fingerprinted has them (identical on one device, where there is none).
    """
    seen: dict[tuple[str, ...], int] = {}
    result: dict[Finding, Accepted] = {}
    # By line, then in the order the findings come (JAX's argument order at one line).
    ordered = sorted(findings, key=lambda f: f.location.line if f.location else 0)
    for finding in ordered:
        shown = _shown(region, finding, destinations=destinations)
        identity = _identity(shown)
        occurrence = seen.get(identity, 0) + 1
        seen[identity] = occurrence
        result[finding] = msgspec.structs.replace(
            shown, occurrence=occurrence, fingerprint=_hashed(identity, occurrence)
        )
    return result


def fingerprints(
    region: str, findings: Sequence[Finding], *, destinations: bool = True
) -> dict[Finding, str]:
    """A stable fingerprint for each finding of one region: its entry's (`entries`)."""
    shown = entries(region, findings, destinations=destinations)
    return {finding: entry.fingerprint for finding, entry in shown.items()}


def fingerprints_of(run: RunResult) -> dict[str, dict[Finding, str]]:
    """Each region's findings (all of them, failing or not) with their fingerprints, by classname.

    What the JSON report prints beside each finding, so a tool can match it to a baseline entry.
    """
    return {
        region.classname: fingerprints(region.classname, group(region.transfers))
        for region in run.regions
    }


def accepted_from(run: RunResult) -> list[Accepted]:
    """Every failing finding of ``run``, as baseline entries."""
    accepted = [
        entry
        for region in run.regions
        for entry in entries(
            region.classname, [f for f in group(region.transfers) if f.failing]
        ).values()
    ]
    return sorted(accepted, key=entry_order)


def entry_order(entry: Accepted) -> tuple[str, ...]:
    return (entry.region, entry.path, entry.function, entry.source, entry.fingerprint)


def apply_baseline(run: RunResult, accepted: Sequence[Accepted], command: str) -> RunResult:
    """``run`` with accepted transfers no longer failing and fixed ones reported.

    A finding fails when it is new, or when it happens more often than its
    entry accepts. ``command`` is what ratchets the baseline down, quoted in
    the report when an accepted transfer has disappeared.
    """
    by_region = _by_region(accepted)
    suites = []
    for suite in run.suites:
        regions = tuple(
            _judge(region, by_region.get(region.classname, {}), command) for region in suite.regions
        )
        suites.append(replace(suite, regions=regions))
    return replace(run, suites=tuple(suites))


def _by_region(accepted: Sequence[Accepted]) -> dict[str, dict[str, Accepted]]:
    """Each region's entries by fingerprint (an older entry's under `_LEGACY` too)."""
    by_region: dict[str, dict[str, Accepted]] = {}
    for entry in accepted:
        prints = by_region.setdefault(entry.region, {})
        prints[entry.fingerprint] = entry
        if entry.destination is None:
            prints[_LEGACY + entry.fingerprint] = entry
    return by_region


def uncovered(run: RunResult, accepted: Sequence[Accepted], other: str) -> list[str]:
    """``suite.region: new since OTHER: <the finding, at file:line>`` for each failing finding
    of ``run`` that ``accepted`` does not cover (new, or more often): what accepting ``run``'s
    transfers adds to ``accepted``, in the words of a failure."""
    by_region = _by_region(accepted)
    return [
        f"{region.classname}: {note}"
        for region in run.regions
        for note in _forgive(region, by_region.get(region.classname, {}), other)[2]
    ]


def rebaselined(
    run: RunResult, existing: Sequence[Accepted]
) -> tuple[list[Accepted], list[Accepted]]:
    """The entries accepting ``run``'s transfers, and the ``existing`` ones ``run`` did not cover.

    A run of some regions (``--region``) re-baselines those and keeps the others' entries.
    """
    ran = {region.classname for region in run.regions}
    return accepted_from(run), [entry for entry in existing if entry.region not in ran]


def _judge(region: RegionResult, accepted: dict[str, Accepted], command: str) -> RegionResult:
    if region.error is not None and not region.transfers:
        return region  # nothing ran far enough to say what was fixed
    prints, transfers, notes = _accepted(region, accepted, "the baseline", in_base=False)
    # What the base has too (``run --base``) still happens: its entries are not fixed.
    judged = [f for f in group(region.transfers) if f.failing or f.sample.in_base]
    current = {
        *prints.values(),
        *fingerprints(region.classname, judged).values(),
        *fingerprints(region.classname, judged, destinations=False).values(),
    }
    fixed = tuple(
        entry.describe()
        for print_, entry in sorted(accepted.items())
        if print_ not in current and not print_.startswith(_LEGACY) and region.error is None
    )
    scoped = transfers_command(command, region)
    if fixed:
        notes.append(
            f"{counted(len(fixed), 'accepted transfer')} no longer "
            f"{'happens' if len(fixed) == 1 else 'happen'}; ratchet the baseline down "
            f"with `{scoped}`"
        )
    if any(t.failing for t in transfers):
        notes.append(transfers_next_step(scoped))
    return replace(region, transfers=transfers, notes=(*region.notes, *notes), fixed=fixed)


def transfers_next_step(scoped: str) -> str:
    """The note that says how ``scoped`` (`transfers_command`) accepts a region's transfers."""
    return (
        f"{NEXT_STEP}`{scoped}` accepts every transfer this region makes now, listing each "
        "it adds; it leaves the region's stored timing and every other region as they are"
    )


def without_baseline(region: RegionResult, command: str) -> RegionResult:
    """``region``, run with no baseline file, with the next step that accepts its failing
    transfers (the file that command writes), as a run with a baseline says it."""
    if not region.failing_transfers:
        return region
    note = transfers_next_step(transfers_command(command, region))
    return replace(region, notes=(*region.notes, note))


def next_step(region: RegionResult, part: Literal["timing", "transfers"]) -> str | None:
    """The note that says what accepts ``region``'s failure against the stored baseline in
    ``part``, for the end of that failure's own testcase; None when there is none."""
    flag = f"--{part}-only`"
    return next((n for n in region.notes if n.startswith(NEXT_STEP) and flag in n), None)


def accept_command(paths: Sequence[str], baseline: str) -> str:
    """``transfer-gate baseline PATH... --baseline FILE``: what re-records this baseline."""
    return " ".join(["transfer-gate baseline", *paths, "--baseline", baseline])


def transfers_command(command: str, region: RegionResult) -> str:
    """The command that accepts ``region``'s transfers alone, as they are now."""
    return f"{command} --region {region.classname} --transfers-only"


def accept_base(
    region: RegionResult, base: RegionResult, lines: LineMap = IDENTITY
) -> tuple[RegionResult, int]:
    """``region`` with its failing transfers that ``base`` has too accepted, and how many findings.

    ``run --base``: the base tree's transfer map is the baseline, and a finding is the
    base's when git's line map says it is (`gate.results.moves`): on the line its line was,
    on the line its change replaced (same function, direction, kind and array), or moved
    there. So only what the change brought in fails, and each transfer says what the
    change did to its line. ``base`` is the same region run from the base tree under the
    head's policy.
    """
    findings = [f for f in group(region.transfers) if f.failing]
    theirs = [f for f in group(base.transfers) if f.failing]
    pairs = {
        pair.new: pair for pair in matched(findings, theirs, _finding_spot, _finding_spot, lines)
    }
    notes: list[str] = []
    forgiven: set[Transfer] = set()
    for finding in findings:
        pair = pairs.get(finding)
        label = line_change(lines, finding.location, new=finding not in pairs)
        if pair is None:
            notes.append(f"new since the base: {finding.headline()} ({label})")
            continue
        was = pair.old
        if finding.per_step > was.per_step or finding.first_call > was.first_call:
            notes.append(
                f"more often than the base: {finding.headline()} ({label}; the base: "
                f"{was.per_step}x per step, {was.first_call}x on the first call)"
            )
            continue
        if pair.how == MOVED:
            function = was.location.function if was.location else "?"
            notes.append(
                f"moved since the base, not new: {finding.headline()} (the base has it at "
                f"{was.where()}, {function}: {_normalized(was.source)})"
            )
        forgiven.update(finding.members)
    transfers = tuple(
        replace(
            t,
            failing=False if t in forgiven else t.failing,
            accepted=t.accepted or t in forgiven,
            in_base=t in forgiven,
            line_change=line_change(lines, t.location, new=t.failing and t not in forgiven),
        )
        for t in region.transfers
    )
    kept = sum(1 for finding in group(transfers) if finding.sample.in_base)
    return replace(region, transfers=transfers, notes=(*region.notes, *notes)), kept


def labelled(region: RegionResult, lines: LineMap) -> RegionResult:
    """``region`` judged against itself, the base having its code (``run --base``,
    `gate.compare.footprint`: comments or layout changed, if anything), with each finding
    that says what the change did to its line saying it by git's ``lines``: a comment added to
    a line is a changed line, though its code and findings are the base's."""
    transfers = tuple(
        replace(t, line_change=line_change(lines, t.location)) if t.line_change else t
        for t in region.transfers
    )
    recompiles = tuple(
        replace(r, line_change=line_change(lines, r.location)) if r.line_change else r
        for r in region.recompiles
    )
    return replace(region, transfers=transfers, recompiles=recompiles)


def line_change(lines: LineMap, where: SourceLocation | None, *, new: bool = False) -> str:
    """What the change did to ``where``, as a reader is told: ``changed line``, ``new line``,
    ``moved from a.py:3``, ``unchanged line``; a ``new`` finding on an unchanged line, what
    caused it where the gate can tell (``unchanged line; the change at a.py:9 caused it``)."""
    if where is None:
        return "no line of your code"
    place = lines.place(where.path, where.line)
    if place.status == MOVED:
        return f"moved from {place.base_path}:{place.base_line}"
    if place.touched:
        return f"{place.status} line"
    cause = lines.cause(where.path, where.line) if new else None
    if not new:
        return "unchanged line"
    return (
        f"unchanged line; the change at {cause} caused it"
        if cause
        else "unchanged line, outside this change"
    )


def _finding_spot(finding: Finding) -> Spot:
    where = finding.location
    what = (
        finding.direction.label,
        finding.kind,
        _array_label(finding),
        finding.destination.spec if finding.destination else "",
        finding.boundary or "",
        finding.thread or "",
    )
    return Spot(
        where.path if where else "",
        where.line if where else 0,
        where.function if where else "",
        what,
        _finding_move_key(finding),
    )


def _accepted(
    region: RegionResult, accepted: dict[str, Accepted], other: str, *, in_base: bool
) -> tuple[dict[Finding, str], tuple[Transfer, ...], list[str]]:
    """The one rule both befores follow (the base tree's map, the stored file): each failing
    finding ``accepted`` covers stops failing (``in_base``: because the base has it too); the
    others are said. Returns the failing findings' fingerprints, the region's transfers so
    judged, and the notes."""
    prints, forgiven, notes = _forgive(region, accepted, other)
    transfers = tuple(
        replace(t, failing=False, accepted=True, in_base=in_base)
        if t.failing and t in forgiven
        else t
        for t in region.transfers
    )
    return prints, transfers, notes


def _forgive(
    region: RegionResult, accepted: dict[str, Accepted], other: str
) -> tuple[dict[Finding, str], set[Transfer], list[str]]:
    """The failing findings' fingerprints, the transfers ``accepted`` covers, notes on the rest."""
    findings = [f for f in group(region.transfers) if f.failing]
    prints = fingerprints(region.classname, findings)
    legacy = fingerprints(region.classname, findings, destinations=False)
    matched = {
        finding: accepted.get(print_) or accepted.get(_LEGACY + legacy[finding])
        for finding, print_ in prints.items()
    }
    # What exact matching left over on both sides may have only moved (`gate.results.moves`).
    used = {id(entry) for entry in matched.values() if entry is not None}
    unused = [e for k, e in accepted.items() if not k.startswith(_LEGACY) and id(e) not in used]
    unmatched = [finding for finding, entry in matched.items() if entry is None]
    moved = dict(moved_only(unmatched, unused, _finding_move_key, _entry_move_key))
    notes: list[str] = []
    forgiven: set[Transfer] = set()
    for finding in prints:
        entry = matched[finding]
        if entry is None and finding in moved:
            entry = moved[finding]
            prints[finding] = entry.fingerprint  # the entry is current: not "no longer happens"
            notes.append(
                f"moved since {other}, not new: {finding.headline()} ({other} has it in "
                f"{entry.path}, {entry.function}: {entry.source})"
            )
        if entry is None:
            notes.append(f"new since {other}: {finding.headline()}")
            continue
        if finding.per_step > entry.per_step or finding.first_call > entry.first_call:
            notes.append(
                f"more often than {other} accepts: {finding.headline()} "
                f"(accepted: {entry.per_step}x per step, {entry.first_call}x on the first call)"
            )
            continue
        forgiven.update(finding.members)
    return prints, forgiven, notes


def _finding_move_key(finding: Finding) -> tuple[str, ...] | None:
    where = finding.location
    return transfer_key(
        finding.direction.label,
        finding.kind,
        function=where.function if where else "",
        source=finding.source or "",
        array=_array_label(finding),
        destination=finding.destination.spec if finding.destination else "",
    )


def _entry_move_key(entry: Accepted) -> tuple[str, ...] | None:
    return transfer_key(
        entry.direction,
        entry.kind,
        function=entry.function,
        source=entry.source,
        array=entry.array,
        destination=entry.destination or "",
    )


def default_path(paths: Sequence[str], repo_root: Path, default_folder: str) -> Path:
    """``<policy folder>/transfer-gate-baseline.json``, next to the policies."""
    first = Path(paths[0]) if paths else Path(default_folder)
    if not first.is_absolute():
        first = repo_root / first
    try:
        folder_given = first.is_dir()
    except OSError:  # a name too long to look at: the policy reader says so, in one line
        first, folder_given = repo_root / default_folder, True
    folder = first if folder_given or not first.suffix else first.parent
    return folder / DEFAULT_NAME
