"""``transfer-gate merge OUT IN...``: one report from the reports of several shards.

The kind of report is read from the file suffix, and each kind has its own
merger in `MERGERS`: JUnit (``.xml``) and the gate's JSON report (``.json``).

JUnit: testsuites with the same name and file (one policy file run in
several shards) become one testsuite again, as in an unsharded run. Every
testcase is kept as it is, with its failure or error, its system-out and
its file/line; the suite's properties are united; ``tests``, ``failures``,
``errors``, ``skipped`` and ``time`` are counted again from what the merged
report holds. The report is written atomically, like the gate's own.
"""

from __future__ import annotations

import math
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gate.documents import DocumentError, encode
from gate.files import write_text_atomically
from gate.limits import DOCUMENT_BYTES, DOCUMENT_NESTING, TooLarge, read_within
from gate.printable import say
from gate.report.json_report import RegionDoc, Report, SuiteDoc, read_report
from gate.report.junit import write_report_file
from gate.results.provenance import Provenance
from gate.text import counted


class MergeError(Exception):
    """An input cannot be merged; the message is one line: the file, what is wrong, the fix."""


@dataclass(frozen=True)
class MergeSummary:
    inputs: int
    suites: int
    tests: int
    failures: int
    errors: int
    duplicates: tuple[str, ...]  # ``classname: name`` of testcases found more than once
    # JUnit ``<skipped>`` cases (an inconclusive timing, a region new since the base):
    # said apart, so that a merge never reads "all passed" over them.
    skipped: int = 0

    def describe(self, output: Path) -> str:
        counts = ", ".join(
            counted(n, noun)
            for n, noun in (
                (self.suites, "suite"),
                (self.tests, "test"),
                (self.failures, "failure"),
                (self.errors, "error"),
            )
        )
        if self.skipped:
            counts += f", {self.skipped} skipped"
        return f"merged {counted(self.inputs, 'report')} into {output}: {counts}"


Merger = Callable[[Path, Sequence[Path]], MergeSummary]


def merge_reports(output: Path, inputs: Sequence[Path]) -> MergeSummary:
    """Merge `inputs` into `output` with the merger for their suffix; MergeError if impossible."""
    if not inputs:
        raise MergeError("merge needs at least one input report: merge OUT.xml IN.xml...")
    suffixes = {path.suffix.lower() for path in (output, *inputs)}
    if len(suffixes) > 1:
        listed = ", ".join(sorted(s or "(none)" for s in suffixes))
        raise MergeError(
            f"the output and the inputs must be reports of one kind, found suffixes {listed}; "
            "merge .xml with .xml"
        )
    (suffix,) = suffixes
    merger = MERGERS.get(suffix)
    if merger is None:
        known = ", ".join(sorted(MERGERS))
        raise MergeError(
            f"{output}: cannot tell what kind of report '{suffix or '(no suffix)'}' is; "
            f"merge takes {known} files (JUnit, JSON)"
        )
    return merger(output, inputs)


def main_merge(output: str, inputs: Sequence[str]) -> int:
    """The ``merge`` command: 0 when the merged report was written; MergeError otherwise."""
    summary = merge_reports(Path(output), [Path(p) for p in inputs])
    for duplicate in summary.duplicates:
        say(
            f"warning: testcase {duplicate} is in more than one input; were two shards the same?",
            sys.stderr,
        )
    say(summary.describe(Path(output)))
    return 0


# --- JUnit ---------------------------------------------------------------------------------------

_COUNTED = ("tests", "failures", "errors", "skipped", "disabled", "time")


def merge_junit(output: Path, inputs: Sequence[Path]) -> MergeSummary:
    """Merge JUnit reports (root ``<testsuites>`` or ``<testsuite>``) into `output`."""
    suites: dict[tuple[str, str], list[ET.Element]] = {}
    for path in inputs:
        root = _read_junit(path)
        for suite in [root] if root.tag == "testsuite" else root.findall("testsuite"):
            suite_key = (suite.get("name", ""), suite.get("file", ""))
            suites.setdefault(suite_key, []).append(suite)

    merged_root = ET.Element("testsuites")
    merged = [_merge_suites(parts) for parts in suites.values()]
    totals = dict.fromkeys(("tests", "failures", "errors", "disabled"), 0)
    total_time = 0.0
    for suite in merged:
        for attribute in totals:
            totals[attribute] += int(suite.get(attribute, "0"))
        total_time += _number(suite.get("time"))
    for attribute, count in totals.items():
        merged_root.set(attribute, str(count))
    merged_root.set("time", _time(total_time))
    merged_root.extend(merged)

    ET.indent(merged_root, space="\t")
    text = '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(merged_root, encoding="unicode")
    write_report_file(output, (text + "\n").encode("utf-8"))
    return MergeSummary(
        inputs=len(inputs),
        suites=len(merged),
        tests=totals["tests"],
        failures=totals["failures"],
        errors=totals["errors"],
        duplicates=_duplicates(merged),
        skipped=sum(int(suite.get("skipped", "0")) for suite in merged),
    )


def _read_junit(path: Path) -> ET.Element:
    try:
        data = read_within(path, DOCUMENT_BYTES)
    except TooLarge as exc:
        raise MergeError(
            f"{path}: the file is {exc} for a JUnit report; check that it is the shard's report"
        ) from None
    except FileNotFoundError:
        raise MergeError(
            f"{path}: no such file; check that every shard's job wrote and uploaded its report"
        ) from None
    except OSError as exc:
        raise MergeError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise MergeError(
            f"{path}: not well-formed XML ({exc}); was it cut short? Run that shard again"
        ) from exc
    # ElementTree writes (and indents) a tree recursively: a shard nested 200,000 deep would
    # end the merge with a RecursionError. A JUnit report nests five deep.
    if _nesting(root) > DOCUMENT_NESTING:
        raise MergeError(
            f"{path}: elements nested more than {DOCUMENT_NESTING} deep; not a JUnit report"
        )
    if root.tag not in ("testsuites", "testsuite"):
        raise MergeError(
            f"{path}: not a JUnit report (its root element is <{root.tag}>, "
            "not <testsuites> or <testsuite>)"
        )
    return root


def _merge_suites(parts: list[ET.Element]) -> ET.Element:
    """One ``<testsuite>`` from its parts, in the order the XSD wants its children."""
    first = parts[0]
    suite = ET.Element("testsuite")
    for key, value in first.attrib.items():
        if key not in _COUNTED:
            suite.set(key, value)

    # United in the order first met, in a dict: a list's `in` made the merge quadratic.
    properties: dict[tuple[str, str], None] = {}
    outs: list[str] = []
    errs: list[str] = []
    cases: list[ET.Element] = []
    for part in parts:
        for prop in part.iterfind("properties/property"):
            properties.setdefault((prop.get("name", ""), prop.get("value", "")))
        outs.extend(e.text or "" for e in part.findall("system-out"))
        errs.extend(e.text or "" for e in part.findall("system-err"))
        cases.extend(part.findall("testcase"))

    if properties:
        holder = ET.SubElement(suite, "properties")
        for name, value in properties:
            ET.SubElement(holder, "property", {"name": name, "value": value})
    for tag, texts in (("system-out", outs), ("system-err", errs)):
        if any(texts):
            ET.SubElement(suite, tag).text = "".join(texts)
    suite.extend(cases)

    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("disabled", str(sum(int(_number(p.get("disabled"))) for p in parts)))
    suite.set("time", _time(sum(_suite_time(p) for p in parts)))
    return suite


def _suite_time(suite: ET.Element) -> float:
    if suite.get("time") is not None:
        return _number(suite.get("time"))
    return sum(_number(case.get("time")) for case in suite.findall("testcase"))


def _number(text: str | None) -> float:
    """A count or a time from another tool's report; 0 when absent or unreadable.

    Times and `disabled` inform, they judge nothing: a report that spells one
    oddly is still merged rather than refused.
    """
    try:
        number = float(text) if text is not None else 0.0
    except ValueError:
        return 0.0
    # `disabled="1e999"` reads as infinity, which no count or time can be.
    return number if math.isfinite(number) and number >= 0 else 0.0


def _nesting(root: ET.Element) -> int:
    """How deep elements lie within ``root``, up to one past the limit; without recursion."""
    deepest = 0
    stack = [(root, 1)]
    while stack:
        element, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= DOCUMENT_NESTING:
            stack.extend((child, depth + 1) for child in element)
    return deepest


def _time(seconds: float) -> str:
    # Plain decimals: some readers (and tests/junit.xsd) reject 1e-05.
    return f"{seconds:.3f}"


def _duplicates(suites: list[ET.Element]) -> tuple[str, ...]:
    seen: set[tuple[str, str]] = set()
    repeated: list[str] = []
    for suite in suites:
        for case in suite.findall("testcase"):
            key = (case.get("classname", ""), case.get("name", ""))
            if key in seen:
                repeated.append(f"{key[0]}: {key[1]}")
            seen.add(key)
    return tuple(dict.fromkeys(repeated))


# --- JSON ----------------------------------------------------------------------------------------


def merge_json(output: Path, inputs: Sequence[Path]) -> MergeSummary:
    """Merge the gate's JSON reports: suites of one policy file become one again.

    Each input is read with the report's own schema (`gate.report.json_report.Report`),
    every value checked: a shard's report that is cut short or edited is refused, by name.
    """
    suites: dict[tuple[str, str], SuiteDoc] = {}
    # Each suite's regions, gathered in order: one tuple per suite made at the end, not one
    # per shard (a tuple grown shard by shard copies every region before it again).
    regions_of: dict[tuple[str, str], list[RegionDoc]] = {}
    gate_versions = set()
    runs: list[tuple[Path, Provenance]] = []
    for path in inputs:
        try:
            report = read_report(
                path,
                "run that shard again: merge takes the reports `transfer-gate run --json` "
                "wrote, of one gate version",
            )
        except DocumentError as exc:
            raise MergeError(str(exc)) from exc
        gate_versions.add(report.gate_version)
        if report.run is not None:
            runs.append((path, report.run))
        for suite in report.suites:
            key = (suite.name, suite.policy)
            suites.setdefault(key, suite)
            regions_of.setdefault(key, []).extend(suite.regions)
    merged = tuple(
        msgspec.structs.replace(suite, regions=tuple(regions_of[key]))
        for key, suite in suites.items()
    )
    regions = [r for suite in merged for r in suite.regions]
    joined = Report(
        gate_version=", ".join(sorted(gate_versions)),
        passed=all(r.status == "passed" for r in regions),
        run=_one_run(runs),
        suites=merged,
    )
    write_text_atomically(output, encode(joined, ordered=False))
    # Counted once: list.count per region made the merge quadratic in its regions.
    counts = Counter(r.classname for r in regions)
    return MergeSummary(
        inputs=len(inputs),
        suites=len(suites),
        tests=len(regions),
        failures=sum(1 for r in regions if r.status == "failed"),
        errors=sum(1 for r in regions if r.status == "error"),
        duplicates=tuple(name for name, count in counts.items() if count > 1),
    )


def _one_run(runs: Sequence[tuple[Path, Provenance]]) -> Provenance | None:
    """The shards' one commit, started when the first shard started; MergeError if the shards
    measured different commits (a history would draw them as one point)."""
    if not runs:
        return None
    (first_path, first), *rest = runs
    for path, run in rest:
        if run.commit != first.commit or run.repository != first.repository:
            raise MergeError(
                f"{path}: measured {run.short()}, but {first_path} measured {first.short()}; "
                "merge the shards of one run (one commit) only"
            )
    return msgspec.structs.replace(first, run_at=min(run.run_at for _, run in runs))


MERGERS: dict[str, Merger] = {".xml": merge_junit, ".json": merge_json}
