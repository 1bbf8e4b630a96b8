"""Each document the gate writes and reads back, round-tripped: written, read, the same records.

Hypothesis draws the records (every field, within what the schema allows); the stored
baseline and the JSON report are each written as the gate writes them and read back as the
gate reads them. ``merge`` refuses a bad shard report as ``run`` refuses a bad baseline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cli_helpers import run_gate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from result_samples import region, run_of, transfer

from gate.documents import read_document
from gate.report.json_report import FORMAT, VERSION, Report, render_json
from gate.results.baseline import Accepted, entry_fingerprint, entry_order, fingerprints_of
from gate.results.baseline_file import load_baseline, write_baseline
from gate.results.collectives import KINDS
from gate.results.costs import METRICS
from gate.results.machine import Machine
from gate.results.timing_baseline import (
    Figures,
    StoredCollective,
    StoredCost,
    StoredFunction,
    StoredTiming,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    # tmp_path is only written and read; a report's records are many and deep by nature.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.too_slow,
    ],
)
text = st.text(max_size=12)
counts = st.integers(0, 2**40)
amounts = st.floats(0, 1e12, allow_nan=False)
maybe = st.none().__or__

machines = st.builds(
    Machine,
    processor=text,
    cores=st.integers(1, 4096),
    platform=st.sampled_from(["cpu", "gpu", "tpu"]),
    accelerator=text,
    devices=st.integers(1, 4096),
    jax=text,
    jaxlib=text,
    cuda_driver=maybe(text),
    cuda_runtime=maybe(text),
    libtpu=maybe(text),
    transfer_gate=text,
)
accepted = st.builds(
    Accepted,
    region=st.text(min_size=1, max_size=12),
    fingerprint=st.just(""),
    direction=st.sampled_from(["host-to-device", "device-to-host", "device-to-device"]),
    kind=st.sampled_from(["implicit", "explicit"]),
    path=text,
    function=text,
    source=text,
    per_step=counts,
    first_call=counts,
    array=text,
    destination=maybe(text),
    boundary=text,
    thread=text,
    occurrence=st.integers(1, 5),
    # An entry's fingerprint is that of what it shows, or the file is refused.
).map(lambda entry: msgspec.structs.replace(entry, fingerprint=entry_fingerprint(entry)))
collectives = st.builds(
    StoredCollective,
    kind=st.sampled_from(KINDS),
    function=text,
    buffer=text,
    bytes=counts,
    runs=counts,
    axes=maybe(st.lists(text, max_size=3).map(tuple)),
    groups=text,
    path=maybe(text),
    line=maybe(counts),
    caller=maybe(text),
    source=maybe(text),
    op_name=text,
    uncounted=text,
)
costs = st.builds(
    StoredCost,
    functions=st.lists(
        st.builds(
            StoredFunction,
            name=text,
            runs=counts,
            programs=counts,
            figures=st.builds(Figures, **{m: maybe(amounts) for m in METRICS}),
        ),
        max_size=3,
    ).map(tuple),
    collectives=maybe(st.lists(collectives, max_size=3).map(tuple)),
)
timings = st.builds(
    StoredTiming,
    machine=machines,
    median_s=amounts,
    p25_s=amounts,
    p75_s=amounts,
    samples=st.lists(amounts, min_size=1, max_size=5).map(tuple),
    cost=maybe(costs),
)


def test_the_stored_figures_are_the_cost_metrics() -> None:
    assert Figures.__struct_fields__ == METRICS


@SETTINGS
@given(
    entries=st.lists(accepted, max_size=4),
    timing=st.dictionaries(st.text(max_size=12), timings, max_size=3),
)
def test_the_baseline_reads_back_as_written(
    tmp_path: Path, entries: list[Accepted], timing: dict[str, StoredTiming]
) -> None:
    path = tmp_path / "baseline.json"
    write_baseline(path, entries, timing)
    stored = load_baseline(path)
    assert stored.accepted == tuple(sorted(entries, key=entry_order))
    assert stored.timing == timing
    assert stored.no_timing is None


# The report's records as hypothesis draws them from their types: figures finite (JSON has
# none other) and integers as the gate's counts are (`gate.documents.Count`: none negative,
# within 64 bits).
_FINITE = st.floats(allow_nan=False, allow_infinity=False)
st.register_type_strategy(float, _FINITE)
st.register_type_strategy(int, st.integers(0, 2**63 - 1))
# A region's machine keeps its constraints (cores and devices at least 1), as the baseline's.
st.register_type_strategy(Machine, machines)


@settings(SETTINGS, max_examples=25)
@given(report=st.from_type(Report))
def test_the_json_report_reads_back_as_written(tmp_path: Path, report: Report) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(msgspec.json.encode(report))
    read = read_document(
        path, formats=(FORMAT,), versions={VERSION: Report}, what="report", fix="fix"
    )
    assert read == report


def test_a_run_reads_back_as_the_report_it_wrote() -> None:
    run = run_of(region("leaky", transfers=(transfer(),)), region("clean"))
    text_written = render_json(run, fingerprints_of(run))
    report = msgspec.json.decode(text_written, type=Report)
    assert [r.classname for s in report.suites for r in s.regions] == ["train.leaky", "train.clean"]
    assert render_json(run, fingerprints_of(run)) == text_written
    assert json.loads(msgspec.json.encode(report)) == json.loads(text_written)


# --- merge refuses a bad shard -------------------------------------------------------------------


def _shard(tmp_path: Path, name: str, change: Any = None) -> Path:
    run = run_of(region(name))
    document = json.loads(render_json(run, fingerprints_of(run)))
    if change is not None:
        change(document)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(suites={}), "suites: expected a list, got {}"),
        (
            lambda d: d["suites"][0]["regions"][0].update(status="sideways"),
            'suites[0].regions[0].status: expected one of "passed", "failed", "error", '
            'got "sideways"',
        ),
        (
            lambda d: d["suites"][0]["regions"][0].update(wall_s=float("nan")),
            "suites[0].regions[0].wall_s: expected a finite number, got NaN",
        ),
    ],
)
def test_merge_refuses_a_bad_shard_report_naming_it_in_one_line(
    tmp_path: Path, change: Any, problem: str
) -> None:
    good = _shard(tmp_path, "a")
    bad = _shard(tmp_path, "b", change)
    done = run_gate(tmp_path, "merge", "out.json", good.name, bad.name)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: b.json: {problem}; correct that key, or run that shard again: merge takes the "
        "reports `transfer-gate run --json` wrote, of one gate version"
    ]
    assert not (tmp_path / "out.json").exists()


def test_merge_refuses_a_cut_shard_report(tmp_path: Path) -> None:
    good = _shard(tmp_path, "a")
    cut = tmp_path / "b.json"
    cut.write_text(good.read_text()[:-40])
    done = run_gate(tmp_path, "merge", "out.json", good.name, cut.name)
    assert done.returncode == 2, done
    [line] = done.stderr.splitlines()
    assert line.startswith("error: b.json:1: the file ends early (was it cut short?); run that")
