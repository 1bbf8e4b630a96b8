"""Scale-out: ``run --shard K/N`` and ``merge OUT IN...``."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate, validate_junit
from result_samples import STEPS, policy_yaml, region_yaml

from gate.cli.exit_codes import ExitCode
from gate.levels import GuardLevel, GuardSpec
from gate.plan import Plan, Shard, UnknownRegionError, parse_shard, select_shard
from gate.policy.model import CallableRef, Checks, Policy, Region
from gate.report.merge import MergeError, merge_reports

# --- parsing and splitting -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "shard"), [("1/1", Shard(1, 1)), ("3/4", Shard(3, 4))])
def test_parse_shard(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard
    assert str(shard) == text


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "1", "a/b", "-1/2", "1/2/3", ""])
def test_parse_shard_refuses_what_is_not_k_of_n(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--shard 1/"):
        parse_shard(text)


def fake_policy(suite: str, *names: str) -> Policy:
    ref = CallableRef("mod:step", "mod", "step", 1)
    checks = Checks(False, None, 1e-5, 1e-8, None)
    regions = tuple(
        Region(
            name,
            i + 1,
            ref,
            None,
            (),
            GuardSpec.uniform(GuardLevel.DISALLOW),
            1,
            1,
            1,
            60.0,
            checks,
        )
        for i, name in enumerate(names)
    )
    return Policy(Path(f"policies/{suite}.yaml"), 1, suite, (), regions)


POLICIES = [
    fake_policy("train", *(f"step{i}" for i in range(7))),
    fake_policy("eval", "a", "b", "c"),
    fake_policy("serve", "predict"),
]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 11, 12, 20])
def test_every_region_lands_in_exactly_one_shard(count: int) -> None:
    shards = [select_shard(POLICIES, Shard(k, count)) for k in range(1, count + 1)]
    seen = Counter(key for shard in shards for key in shard.regions)
    everything = {f"{p.suite}.{r.name}" for p in POLICIES for r in p.regions}
    assert set(seen) == everything
    assert set(seen.values()) == {1}
    sizes = [len(shard.regions) for shard in shards]
    assert max(sizes) - min(sizes) <= 1
    assert all(shard.total == len(everything) for shard in shards)


def test_the_split_does_not_depend_on_policy_order() -> None:
    forward = [select_shard(POLICIES, Shard(k, 3)).regions for k in (1, 2, 3)]
    backward = [select_shard(POLICIES[::-1], Shard(k, 3)).regions for k in (1, 2, 3)]
    assert forward == backward
    # Pinned: the split is sorted keys dealt round-robin, the same on every machine.
    assert sorted(forward[0]) == ["eval.a", "serve.predict", "train.step2", "train.step5"]


def test_shards_split_the_regions_the_command_line_selected() -> None:
    only = frozenset({"a", "train.step1", "serve.predict"})
    first = select_shard(POLICIES, Shard(1, 2), only)
    second = select_shard(POLICIES, Shard(2, 2), only)
    assert first.regions | second.regions == {"eval.a", "train.step1", "serve.predict"}
    assert not first.regions & second.regions
    assert first.total == 3


def test_an_empty_shard_says_so() -> None:
    empty = select_shard(POLICIES, Shard(12, 12))
    assert empty.regions == frozenset()
    assert "no regions to run" in empty.describe()
    assert "zero tests" in empty.describe()
    assert select_shard(POLICIES, Shard(1, 12)).describe() == (
        "shard 1/12: running 1 of 11 regions"
    )


def _names(plan: Plan) -> list[str]:
    return [f"{policy.suite}.{region.name}" for policy, regions in plan.steps for region in regions]


def test_a_plan_of_everything_keeps_the_policies_order() -> None:
    plan = Plan.make(POLICIES[::-1])
    assert _names(plan) == ["serve.predict", "eval.a", "eval.b", "eval.c"] + [
        f"train.step{i}" for i in range(7)
    ]
    assert plan.shard is None


def test_a_plan_selects_by_name_or_suite_and_name() -> None:
    plan = Plan.make(POLICIES, ["b", "train.step3", "predict"])
    assert _names(plan) == ["train.step3", "eval.b", "serve.predict"]
    assert [policy.suite for policy, _ in plan.steps] == ["train", "eval", "serve"]


def test_a_plan_refuses_a_region_no_policy_defines() -> None:
    with pytest.raises(UnknownRegionError, match=r"^--region eval\.nope: no such region\b"):
        Plan.make(POLICIES, ["a", "eval.nope"])


def test_a_sharded_plan_runs_the_shards_regions_of_the_selected_ones() -> None:
    only = ["a", "train.step1", "serve.predict"]
    first = Plan.make(POLICIES, only, Shard(1, 2))
    second = Plan.make(POLICIES, only, Shard(2, 2))
    assert first.shard == select_shard(POLICIES, Shard(1, 2), frozenset(only))
    assert sorted(_names(first) + _names(second)) == ["eval.a", "serve.predict", "train.step1"]
    assert set(_names(first)) == first.shard.regions


# --- through the real CLI: sharded runs merged equal one run -------------------------------------

SHARDED_STEPS = (
    STEPS
    + """

def broken(x):
    raise ValueError("boom")


def finite(outputs):
    return False
"""
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checked = "    checks: {finite: true, custom: mod:finite}\n"
    return make_repo(
        tmp_path_factory.mktemp("sharded"),
        {
            "mod.py": SHARDED_STEPS,
            "policies/train.yaml": policy_yaml(
                region_yaml("clean", "step"),
                region_yaml("leaky", "leaky"),
                region_yaml("checked", "step", checked),
            ),
            "policies/eval.yaml": policy_yaml(
                region_yaml("broken", "broken"), region_yaml("also_leaky", "leaky")
            ),
        },
    )


def outcomes(path: Path) -> Counter[tuple[str | None, ...]]:
    """Each testcase as (suite, classname, name, outcome, file, line), and how often."""
    found: Counter[tuple[str | None, ...]] = Counter()
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            outcome = next((c.tag for c in case if c.tag in ("failure", "error")), "pass")
            found[
                (
                    suite.get("name"),
                    case.get("classname"),
                    case.get("name"),
                    outcome,
                    case.get("file"),
                    case.get("line"),
                )
            ] += 1
    return found


def test_shards_merged_give_the_same_testcases_as_one_run(repo: Path) -> None:
    whole = run_gate(repo, "run", "--junit", "reports/whole.xml", report="reports/whole.xml")
    assert whole.returncode == ExitCode.REGION_FAILED, whole
    whole.junit()

    shards = []
    for k in (1, 2):
        name = f"reports/shard-{k}.xml"
        shard = run_gate(repo, "run", "--shard", f"{k}/2", "--junit", name, report=name)
        assert shard.returncode == ExitCode.REGION_FAILED, shard
        assert f"shard {k}/2: running " in shard.stdout
        shard.junit()
        shards.append(shard.report)
    assert not set(outcomes(shards[0])) & set(outcomes(shards[1]))

    merged = run_gate(
        repo, "merge", "reports/merged.xml", *(str(p.relative_to(repo)) for p in shards)
    )
    assert merged.returncode == ExitCode.OK, merged
    assert "merged 2 reports into reports/merged.xml: 2 suites, 6 tests" in merged.stdout
    validate_junit(repo / "reports/merged.xml")
    assert outcomes(repo / "reports/merged.xml") == outcomes(whole.report)

    # What the PR tools and people read survives the merge untouched: every child
    # (failure, error, system-out) with its attributes and text, as its shard wrote it.
    def texts(*paths: Path) -> dict[tuple[str | None, str | None], tuple[str, ...]]:
        return {
            (c.get("classname"), c.get("name")): tuple(
                f"{e.tag}:{sorted(e.attrib.items())}:{e.text}" for e in c
            )
            for path in paths
            for c in ET.parse(path).getroot().iter("testcase")
        }

    assert texts(repo / "reports/merged.xml") == texts(*shards)
    whole_props = {p.get("name") for p in ET.parse(whole.report).getroot().iter("property")}
    merged_props = {
        p.get("name") for p in ET.parse(repo / "reports/merged.xml").getroot().iter("property")
    }
    assert merged_props == whole_props


def test_sharded_json_reports_merge_into_the_unsharded_map(repo: Path) -> None:
    def regions(path: Path) -> dict[str, tuple[object, ...]]:
        document = json.loads(path.read_text())
        return {
            r["classname"]: (r["status"], [(t["path"], t["line"], t["direction"], t["per_step"])
                                           for t in r["transfers"]], r["error"] is None)
            for suite in document["suites"]
            for r in suite["regions"]
        }  # fmt: skip

    whole = run_gate(repo, "run", "--json", "reports/whole.json")
    assert whole.returncode == ExitCode.REGION_FAILED, whole
    for k in (1, 2):
        run_gate(repo, "run", "--shard", f"{k}/2", "--json", f"reports/s{k}.json")
    merged = run_gate(
        repo, "merge", "reports/merged.json", "reports/s1.json", "reports/s2.json",
        report="reports/merged.json",
    )  # fmt: skip
    assert merged.returncode == ExitCode.OK, merged
    assert regions(repo / "reports/merged.json") == regions(repo / "reports/whole.json")
    document = json.loads((repo / "reports/merged.json").read_text())
    assert document["passed"] is False
    assert [s["name"] for s in document["suites"]] == [
        s["name"] for s in json.loads((repo / "reports/whole.json").read_text())["suites"]
    ]


def test_an_empty_shard_writes_a_valid_report_and_passes(repo: Path) -> None:
    run = run_gate(
        repo, "run", "--shard", "9/9", "--junit", "reports/e.xml", report="reports/e.xml"
    )
    assert run.returncode == ExitCode.OK, run
    assert "shard 9/9: no regions to run (the 5 selected are split over 9 shards)" in run.stdout
    assert "0 passed, 0 failed" in run.stdout
    assert list(run.junit().iter("testcase")) == []


def test_shard_and_region_filter_together(repo: Path) -> None:
    run = run_gate(
        repo, "run", "--region", "clean", "--region", "broken", "--shard", "2/2",
        "--junit", "reports/f.xml", report="reports/f.xml",
    )  # fmt: skip
    assert "shard 2/2: running 1 of 2 regions" in run.stdout, run
    names = [c.get("classname") for c in run.junit().iter("testcase")]
    assert names == ["train.clean"]


@pytest.mark.parametrize("value", ["0/2", "2/1", "x"])
def test_a_bad_shard_is_a_usage_error(repo: Path, value: str) -> None:
    run = run_gate(repo, "run", "--shard", value)
    assert run.returncode == ExitCode.USAGE, run
    assert "--shard" in run.stderr


# --- merge on its own ----------------------------------------------------------------------------

SUITE_A = """<?xml version="1.0" ?>
<testsuites disabled="0" errors="0" failures="1" tests="2" time="0.5">
\t<testsuite disabled="0" errors="0" failures="1" name="train" skipped="0" tests="2" \
time="0.5" file="policies/train.yaml">
\t\t<properties>
\t\t\t<property name="a.policy" value="policies/train.yaml:4"/>
\t\t</properties>
\t\t<testcase name="a: transfers" time="0.250000" classname="train.a" file="mod.py" line="12">
\t\t\t<failure type="transfer" message="implicit host-to-device at mod.py:12">body &amp; more
line two</failure>
\t\t\t<system-out>Step time: median 1 ms</system-out>
\t\t</testcase>
\t\t<testcase name="a: result checks" classname="train.a" file="policies/train.yaml" line="4"/>
\t</testsuite>
</testsuites>
"""

SUITE_B = """<?xml version="1.0" ?>
<testsuite disabled="0" errors="1" failures="0" name="train" skipped="0" tests="1" \
time="0.25" file="policies/train.yaml">
\t<properties>
\t\t<property name="b.policy" value="policies/train.yaml:9"/>
\t</properties>
\t<testcase name="b: transfers" time="0.250000" classname="train.b" file="mod.py" line="30">
\t\t<error type="step" message="step raised: boom">Traceback</error>
\t</testcase>
</testsuite>
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_merge_joins_suites_of_one_policy_and_recounts(tmp_path: Path) -> None:
    a = write(tmp_path, "a.xml", SUITE_A)
    b = write(tmp_path, "b.xml", SUITE_B)
    empty = write(tmp_path, "empty.xml", '<?xml version="1.0" ?>\n<testsuites/>\n')
    out = tmp_path / "out" / "merged.xml"
    summary = merge_reports(out, [a, empty, b])
    validate_junit(out)
    root = ET.parse(out).getroot()
    (suite,) = root.findall("testsuite")
    assert dict(suite.attrib) == {
        "name": "train",
        "file": "policies/train.yaml",
        "tests": "3",
        "failures": "1",
        "errors": "1",
        "skipped": "0",
        "disabled": "0",
        "time": "0.750",
    }
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "time")} == {
        "tests": "3",
        "failures": "1",
        "errors": "1",
        "time": "0.750",
    }
    assert [p.get("name") for p in suite.iter("property")] == ["a.policy", "b.policy"]
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.text == "body & more\nline two"
    assert suite.findtext("testcase/system-out") == "Step time: median 1 ms"
    assert (summary.suites, summary.tests, summary.failures, summary.errors) == (1, 3, 1, 1)
    assert summary.duplicates == ()


def test_merge_can_write_over_one_of_its_inputs(tmp_path: Path) -> None:
    a = write(tmp_path, "a.xml", SUITE_A)
    b = write(tmp_path, "b.xml", SUITE_B)
    merge_reports(a, [a, b])
    validate_junit(a)
    assert len(ET.parse(a).getroot().findall("testsuite/testcase")) == 3


def test_merge_keeps_duplicates_and_warns(tmp_path: Path) -> None:
    a = write(tmp_path, "a.xml", SUITE_A)
    out = tmp_path / "out.xml"
    summary = merge_reports(out, [a, a])
    assert summary.duplicates == ("train.a: a: transfers", "train.a: a: result checks")
    assert summary.tests == 4
    validate_junit(out)


def test_merge_cli_warns_about_duplicates(tmp_path: Path) -> None:
    write(tmp_path, "a.xml", SUITE_A)
    run = run_gate(tmp_path, "merge", "out.xml", "a.xml", "a.xml", report="out.xml")
    assert run.returncode == ExitCode.OK, run
    assert "warning: testcase train.a: a: transfers is in more than one input" in run.stderr
    run.junit()


@pytest.mark.parametrize(
    ("files", "args", "says"),
    [
        ({}, ["out.xml", "missing.xml"], "missing.xml: no such file"),
        ({"bad.xml": "<testsuites><testsuite"}, ["out.xml", "bad.xml"], "not well-formed XML"),
        ({"html.xml": "<html/>"}, ["out.xml", "html.xml"], "root element is <html>"),
        ({"a.json": "{}"}, ["out.json", "a.json"], "a.json: not a transfer-gate JSON report"),
        ({"a.xml": SUITE_A}, ["out.json", "a.xml"], "must be reports of one kind"),
        ({"a.txt": ""}, ["out.txt", "a.txt"], "merge takes .json, .xml files (JUnit, JSON)"),
    ],
)
def test_merge_refuses_what_it_cannot_merge(
    tmp_path: Path, files: dict[str, str], args: list[str], says: str
) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    run = run_gate(tmp_path, "merge", *args, report=args[0])
    assert run.returncode == ExitCode.USAGE, run
    assert says in run.stderr, run
    assert "Traceback" not in run.stderr
    assert not (tmp_path / args[0]).exists()


def test_merge_needs_an_input(tmp_path: Path) -> None:
    with pytest.raises(MergeError, match="at least one input"):
        merge_reports(tmp_path / "out.xml", [])
    run = run_gate(tmp_path, "merge", "out.xml")
    assert run.returncode == ExitCode.USAGE, run
