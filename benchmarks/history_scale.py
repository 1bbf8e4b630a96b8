"""``transfer-gate history`` at scale: 1,000 reports of 100 regions, the page made and used.

    .venv/bin/python -m benchmarks history_scale [--reports 1000] [--regions 100]

Runs the gate once on a throwaway repository for one real JSON report (a clean region and one
with an implicit transfer), then writes ``--reports`` reports of ``--regions`` regions made
from it, each a commit a day later with its own step times, FLOPs and, halfway, a change of
machine. It times ``transfer-gate history DIR --out SITE --check`` (its own process: wall time, and
the CPU time it took, which the machine's other load changes less), and opens the page in
headless Chromium with a probe that measures, inside the page:
the time to its load event, the mean time of one keyboard move along a chart (the point's
text shown), and the time to build the largest region's table when it is opened. The figures
are docs/performance.md's ("History: 1,000 reports of 100 regions").
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GATE = Path(sys.executable).parent / "transfer-gate"

STEPS = """
import jax
import numpy as np


@jax.jit
def step(x):
    return x * 2.0 + 1.0


def inputs():
    return (jax.device_put(np.zeros(256, np.float32)),)


def leaky(x):
    return step(np.zeros(256, np.float32))
"""
POLICY = """version: 1
defaults: {warmup: 1, guarded_runs: 1, repeats: 20}
regions:
  - {name: clean, step: mod:step, setup: mod:inputs}
  - {name: leaky, step: mod:leaky, setup: mod:inputs}
"""

# Measured inside the page: load, a hundred keyboard moves, the largest table opened.
PROBE = """<pre id="probe"></pre><script>
window.addEventListener("load",function(){
var out={load_ms:performance.now()},svg=document.querySelectorAll("svg.chart")[0];
svg.focus();var t0=performance.now();
for(var i=0;i<100;i++){svg.dispatchEvent(new KeyboardEvent("keydown",{key:"ArrowLeft"}));}
out.move_ms=(performance.now()-t0)/100;
var details=document.querySelector("details[data-region]");
details.addEventListener("toggle",function(){out.table_ms=performance.now()-t1;
out.rows=details.querySelectorAll("tbody tr").length;
document.getElementById("probe").textContent=JSON.stringify(out);});
var t1=performance.now();details.open=true;
});</script>"""


def template_report(work: Path) -> dict[str, Any]:
    """One real report of the two regions, from a real run in a throwaway git repository."""
    repo = work / "repo"
    (repo / "policies").mkdir(parents=True)
    (repo / "mod.py").write_text(STEPS)
    (repo / "policies/p.yaml").write_text(POLICY)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "GIT_CONFIG_GLOBAL": os.devnull}
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=repo, check=True, env=env)
    subprocess.run(
        [GATE, "run", "-q", "--json", "map.json"], cwd=repo, env=env, capture_output=True,
        timeout=300, check=False,
    )  # fmt: skip
    report: dict[str, Any] = json.loads((repo / "map.json").read_text())
    return report


def make_reports(template: dict[str, Any], folder: Path, reports: int, regions: int) -> int:
    """``reports`` reports of ``regions`` regions each; the bytes written."""
    noise = random.Random(0)
    [suite] = template["suites"]
    kinds = suite["regions"]
    folder.mkdir(parents=True)
    written = 0
    for index in range(reports):
        report = copy.deepcopy(template)
        report["run"]["commit"] = f"{index:08x}" + "c" * 32
        day = time.gmtime(1767225600 + 86400 * index)
        report["run"]["commit_date"] = time.strftime("%Y-%m-%dT12:00:00+00:00", day)
        report["run"]["run_at"] = time.strftime("%Y-%m-%dT12:30:00+00:00", day)
        made = []
        for number in range(regions):
            region = copy.deepcopy(kinds[number % len(kinds)])
            region["name"] = f"step{number:03d}"
            region["classname"] = f"{suite['name']}.step{number:03d}"
            scale = (1 + number / regions) * (1 + 0.0004 * index) * noise.uniform(0.95, 1.05)
            region["timing_samples"] = [s * scale for s in region["timing_samples"]]
            region["timing"] = {
                k: (v * scale if k.endswith("_s") else v) for k, v in region["timing"].items()
            }
            region["cost"]["totals"]["flops"] *= 1 + index // 250
            if index >= reports // 2:
                region["machine"]["cores"] = 64
            made.append(region)
        report["suites"][0]["regions"] = made
        text = json.dumps(report)
        (folder / f"run-{index:04d}.json").write_text(text)
        written += len(text)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--regions", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="history-scale-") as temporary:
        work = Path(temporary)
        template = template_report(work)
        size = make_reports(template, work / "main", args.reports, args.regions)
        print(f"{args.reports} reports of {args.regions} regions: {size / 1e6:.0f} MB of JSON")
        started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [GATE, "history", work / "main", "--out", work / "site", "--check"],
            cwd=work / "repo", capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        took = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        # Wall time depends on what else the machine runs; the CPU time it took much less so.
        print(
            f"transfer-gate history --check: {took:.1f} s wall, {cpu:.1f} s CPU, "
            f"exit {done.returncode}"
        )
        print(done.stdout.splitlines()[0] if done.stdout else done.stderr)
        page = work / "site/index.html"
        print(f"index.html: {page.stat().st_size / 1e6:.1f} MB")
        probed = work / "probed.html"
        probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
        browser = next(filter(None, map(shutil.which, ("chromium", "google-chrome"))), None)
        if browser is None:
            print("no Chromium: the page's figures need `apt-get install chromium`")
            return 1
        started = time.perf_counter()
        dom = subprocess.run(
            [
                browser, "--headless", "--no-sandbox", "--disable-gpu",
                f"--user-data-dir={work / 'profile'}", "--virtual-time-budget=60000",
                "--dump-dom", probed.as_uri(),
            ],
            capture_output=True, text=True, timeout=600, check=False,
        ).stdout  # fmt: skip
        opened = time.perf_counter() - started
        found = json.loads(dom.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0])
        print(
            f"Chromium: page loaded in {found['load_ms'] / 1000:.1f} s, one keyboard move "
            f"{found['move_ms']:.2f} ms, a region's table of {found['rows']} rows in "
            f"{found['table_ms']:.0f} ms (the whole headless run {opened:.1f} s)"
        )
    return 0
