"""JSON reports as main's runs would have written them, made from one real report."""

from __future__ import annotations

import copy
import json
from pathlib import Path


def stepped(
    template: dict,
    index: int,
    *,
    median: float,
    flops: float | None = None,
    cores: int | None = None,
    status: str | None = None,
) -> dict:
    """``template`` as run ``index`` of main would have written it: its commit a day later, each
    region's step times scaled to ``median``, and the FLOPs, machine and status given."""
    report = copy.deepcopy(template)
    report["run"]["commit"] = f"{index:02d}" + "c" * 38
    report["run"]["commit_date"] = f"2026-04-{index + 1:02d}T12:00:00+00:00"
    report["run"]["run_at"] = f"2026-04-{index + 1:02d}T12:30:00+00:00"
    for suite in report["suites"]:
        for region in suite["regions"]:
            scale = median / region["timing"]["median_s"]
            region["timing_samples"] = [s * scale for s in region["timing_samples"]]
            region["timing"] = {
                k: (v * scale if k.endswith("_s") else v) for k, v in region["timing"].items()
            }
            if flops is not None:
                region["cost"]["totals"]["flops"] = flops
            if cores is not None:
                region["machine"]["cores"] = cores
            if status is not None:
                region["status"] = status
    if status is not None:
        report["passed"] = status == "passed"
    return report


def write_reports(folder: Path, reports: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, report in enumerate(reports):
        (folder / f"run-{i:03d}.json").write_text(json.dumps(report))
    return folder
