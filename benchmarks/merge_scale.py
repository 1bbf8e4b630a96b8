"""``transfer-gate merge`` at scale: shards of many JUnit properties, and of many JSON regions.

    .venv/bin/python -m benchmarks merge_scale [--properties 40000] [--regions 20000] [--shards 4]

JUnit: ``--shards`` reports of one suite (one policy file run in several shards), holding
``--properties`` distinct ``<property>`` elements between them, each shard's also repeated in
the next (the merge must unite them) and a testcase a property. JSON: ``--regions`` regions
made from one real report (`history_scale.template_report` runs the gate once), split over the
shards, plus one region in two shards (the merge must warn of it). Each merge runs as its own
``transfer-gate merge`` process: wall time, and the CPU time it took, which the machine's other
load changes less. The figures are docs/performance.md's ("Merging shards").
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.history_scale import template_report

GATE = Path(sys.executable).parent / "transfer-gate"


def junit_shards(folder: Path, properties: int, shards: int) -> list[Path]:
    """``shards`` JUnit reports of one suite holding ``properties`` distinct properties."""
    per_shard = properties // shards
    paths = []
    for shard in range(shards):
        suite = ET.Element("testsuite", name="p", file="policies/p.yaml")
        holder = ET.SubElement(suite, "properties")
        # This shard's own, then the next shard's again: every property is in two shards.
        for owner in (shard, (shard + 1) % shards):
            for number in range(owner * per_shard, (owner + 1) * per_shard):
                ET.SubElement(holder, "property", name=f"region{number}", value=str(number))
        for number in range(shard * per_shard, (shard + 1) * per_shard):
            ET.SubElement(suite, "testcase", name=f"region{number}", classname="p")
        path = folder / f"shard-{shard}.xml"
        root = ET.Element("testsuites")
        root.append(suite)
        ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
        paths.append(path)
    return paths


def json_shards(template: dict[str, Any], folder: Path, regions: int, shards: int) -> list[Path]:
    """``shards`` JSON reports of one suite holding ``regions`` regions, one of them twice."""
    [suite] = template["suites"]
    kinds = suite["regions"]
    per_shard = regions // shards
    paths = []
    for shard in range(shards):
        report = copy.deepcopy(template)
        made = []
        numbers = list(range(shard * per_shard, (shard + 1) * per_shard))
        if shard == 1:
            numbers.append(0)  # region 0 again: a duplicate the merge names
        for number in numbers:
            region = copy.deepcopy(kinds[number % len(kinds)])
            region["name"] = f"step{number:05d}"
            region["classname"] = f"{suite['name']}.step{number:05d}"
            made.append(region)
        report["suites"][0]["regions"] = made
        path = folder / f"shard-{shard}.json"
        path.write_text(json.dumps(report))
        paths.append(path)
    return paths


def timed_merge(output: Path, inputs: list[Path]) -> str:
    """``transfer-gate merge OUTPUT INPUTS``, timed: one line of figures and its last line."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [GATE, "merge", output, *inputs], capture_output=True, text=True, timeout=3600, check=False
    )
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    said = (done.stdout or done.stderr).strip().splitlines()
    size = sum(p.stat().st_size for p in inputs) / 1e6
    return (
        f"{took:.1f} s wall, {cpu:.1f} s CPU, exit {done.returncode} ({size:.0f} MB in): "
        f"{said[-1] if said else ''}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--properties", type=int, default=40_000)
    parser.add_argument("--regions", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="merge-scale-") as temporary:
        work = Path(temporary)
        xml = junit_shards(work, args.properties, args.shards)
        print(f"JUnit, {args.properties} properties in {args.shards} shards: ", end="", flush=True)
        print(timed_merge(work / "merged.xml", xml))
        reports = json_shards(template_report(work), work, args.regions, args.shards)
        print(f"JSON, {args.regions} regions in {args.shards} shards: ", end="", flush=True)
        print(timed_merge(work / "merged.json", reports))
    return 0
