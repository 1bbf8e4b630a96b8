"""Input a pull request controls never reaches the CI log raw, crashes the gate, or writes outside
the repository (issue 36).

Through the real CLI on throwaway repos. ``hostile-inputs/printed/<case>/`` are files laid over a
small repository, each putting issue 36's payload (workflow commands on lines of their own,
terminal escapes, control characters, a lone surrogate) into one field the gate prints: the stored
baseline's machine, the step's exception, a quoted source line, the suite's name, what the step
prints. Each runs as GitHub Actions runs it, and no line of stdout, stderr or the job summary may
start with a workflow command but the gate's own, nor hold a raw control character. The refused
inputs (too deep, too long a number, too large, outside paths) are generated here, each with the
one line that refuses it.

Issue 54's, also generated here: a baseline entry that shows an accepted line with a new line's
fingerprint, a symlink where the traces go, a suite named like a path, a trace past its limit.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import FAST_DEFAULTS, TESTS, make_repo, run_gate
from hostile_text import COMMAND_START, OWN_COMMAND, safe_for_a_log

from gate.limits import DOCUMENT_BYTES, POLICY_BYTES, TRACE_BYTES
from gate.printable import command, flat, printable

CORPUS = TESTS / "hostile-inputs"
HISTORY = TESTS / "baseline-files" / "history"
BASELINE = "policies/transfer-gate-baseline.json"
REGENERATE = "regenerate it with `transfer-gate baseline`"
POLICY = f"""
version: 1
{FAST_DEFAULTS}regions:
  - name: leaky
    step: steps:leaky
    setup: steps:setup
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    steps = (HISTORY / "steps.py").read_text(encoding="utf-8")
    return make_repo(tmp_path / "repo", {"steps.py": steps, "policies/p.yaml": POLICY})


def _lay_over(repo: Path, case: Path) -> None:
    for source in case.rglob("*"):
        if source.is_file():
            target = repo / source.relative_to(case)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)


PRINTED = {
    # case: the run's exit code (the step's faults fail it; nothing makes it exit 3)
    "baseline-processor": 0,
    "exception-message": 1,
    "source-line": 1,
    "suite-name": 1,
    "step-output": 1,
}


def test_every_printed_case_is_in_the_table() -> None:
    assert sorted(p.name for p in (CORPUS / "printed").iterdir()) == sorted(PRINTED)


@pytest.mark.parametrize("case", sorted(PRINTED))
def test_no_hostile_text_reaches_the_log_raw(repo: Path, tmp_path: Path, case: str) -> None:
    _lay_over(repo, CORPUS / "printed" / case)
    summary = tmp_path / "summary.md"
    summary.write_text("")
    json_report = repo / "reports" / "map.json"
    done = run_gate(
        repo,
        "run",
        "--json",
        str(json_report),
        env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
        # A process of its own: its stdout is a real UTF-8 stream, where a lone surrogate
        # raised UnicodeEncodeError (exit 3, no report).
        process=True,
    )
    assert done.returncode == PRINTED[case], done
    for name, text in (
        ("stdout", done.stdout),
        ("stderr", done.stderr),
        ("summary", summary.read_text(encoding="utf-8")),
    ):
        safe_for_a_log(name, text)
    # The reports are written, and keep what was found.
    done.junit()
    report = json.loads(json_report.read_text(encoding="utf-8"))
    assert report["format"] == "jax-transfer-gate.report"


def test_coloured_output_in_github_actions_lets_only_colours_through(
    repo: Path, tmp_path: Path
) -> None:
    # FORCE_COLOR: GitHub's log renders colours, so the gate's rows and group titles keep theirs;
    # the suite's escapes that are not colours stay shown.
    _lay_over(repo, CORPUS / "printed" / "suite-name")
    done = run_gate(repo, "run", env={"GITHUB_ACTIONS": "true", "FORCE_COLOR": "1"}, process=True)
    assert done.returncode == 1, done
    both = done.stdout + done.stderr
    assert "\x1b[31m" in both  # the gate's own red
    for raw in ("\x1b[2J", "\x1b]8", "\x07"):
        assert raw not in both, done
    assert "\\x1b[2J" in both
    for line in both.split("\n"):
        assert not COMMAND_START.match(line) or OWN_COMMAND.fullmatch(line), line


def test_the_payload_shows_up_escaped_where_it_was(repo: Path, tmp_path: Path) -> None:
    # Not lost either: the reader still sees the text, on one line, every escape spelled out.
    _lay_over(repo, CORPUS / "printed" / "exception-message")
    done = run_gate(repo, "run", "--json", "reports/map.json", process=True)
    assert done.returncode == 1, done
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("  steps.py:")]
    assert line.startswith(
        "  steps.py:27: step raised: ValueError: bad \\ud800 \\x1b[2J\\x1b]8;;"
    ), done
    assert "\\x00\\x01 \\u202e" in line
    # The JUnit report keeps the text, as XML can hold it.
    message = done.testcase("leaky: transfers").find("error")
    assert message is not None
    assert "::error file=README.md,line=1::INJECTED" in (message.text or ""), done
    # The JSON report keeps it exactly, but for the lone surrogate, which UTF-8 cannot hold: it
    # is the text \ud800, as the log shows it.
    report = (repo / "reports" / "map.json").read_text(encoding="utf-8")
    assert "bad \\\\ud800 \\u001b[2J" in report
    assert "\\n::error file=README.md,line=1::INJECTED\\r\\n::add-mask::secret" in report


def test_a_hostile_base_ref_or_argument_is_one_escaped_error_line(repo: Path) -> None:
    done = run_gate(repo, "run", "--base", "HEAD\n::error::x\x1b[2J")
    assert done.returncode == 2, done
    assert done.stderr.splitlines()[-1].startswith("error: --base HEAD ::error::x\\x1b[2J: ")
    safe_for_a_log("stderr", done.stderr)
    done = run_gate(repo, "run", "--shard", "1/x\n::error::y")
    assert done.returncode == 2, done
    assert "\n\\x3a:error::y" in done.stderr, done
    safe_for_a_log("stderr", done.stderr)


# --- refused before parsing, or after, in one line; never exit 3 --------------------------------


def _deep_json(path: Path) -> None:
    path.write_text('{"format": "jax-transfer-gate.results.baseline", "a": ' + "[" * 200_000)


def _long_number(path: Path) -> None:
    path.write_text('{"format": "jax-transfer-gate.results.baseline",\n"a": ' + "7" * 5000 + "}")


def _nested_101(path: Path) -> None:
    path.write_text('{"format": "x", "a": ' + "[" * 100 + "]" * 100 + "}")


def _too_large(size: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with path.open("wb") as stream:  # sparse: measured, never read
            stream.truncate(size + 1)

    return make


BAD_BASELINES = {
    "deep": (_deep_json, f"{BASELINE}: lists and objects nested more than 100 deep in a "),
    "nested-101": (_nested_101, f"{BASELINE}: lists and objects nested more than 100 deep in a "),
    "long-number": (
        _long_number,
        f"{BASELINE}:2: a number of more than 4300 digits, longer than Python reads; {REGENERATE}",
    ),
    "too-large": (
        _too_large(DOCUMENT_BYTES),
        f"{BASELINE}: the file is 67,108,865 bytes, over the limit of 67,108,864 bytes for a "
        f"transfer-gate baseline; {REGENERATE}",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_BASELINES))
def test_a_hostile_baseline_is_one_error_line_and_a_report(repo: Path, name: str) -> None:
    make, expected = BAD_BASELINES[name]
    make(repo / BASELINE)
    (repo / "reports").mkdir()
    (repo / "reports" / "transfer-gate.xml").write_text("<testsuites/>")  # the last run's
    done = run_gate(repo, "run")
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: {expected}"), done
    error = done.testcase("baseline").find("error")
    assert error is not None


def test_a_policy_whose_name_is_not_utf8_is_refused_and_reported(repo: Path) -> None:
    # Python keeps the byte 0xff of a name as the lone surrogate \udcff: the suite named after
    # the file reached the fingerprint's hash and the reports, and the run exited 3.
    name = os.fsdecode(b"policies/bad\xff.yaml")
    shutil.move(repo / "policies" / "p.yaml", repo / name)
    done = run_gate(repo, "run", "--json", "reports/map.json", process=True)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "error: policies/bad\\udcff.yaml: the file's name is not UTF-8 text, which no report "
        "can hold; rename it"
    ]
    assert done.junit().get("errors") == "1"
    assert json.loads((repo / "reports" / "map.json").read_text(encoding="utf-8"))


def test_a_policy_path_too_long_to_look_at_is_one_error_line_and_a_report(repo: Path) -> None:
    # os.stat raises ENAMETOOLONG, which pathlib's is_dir/is_file pass on: the run exited 3.
    name = "x" * 300
    done = run_gate(repo, "run", name, "--json", "reports/map.json")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: {name}: cannot be read (File name too long); pass a policy file or a folder"
    ]
    assert done.junit().get("errors") == "1"


def test_a_policy_over_the_limit_is_refused_before_it_is_parsed(repo: Path) -> None:
    # 50 MB took 248 s and 6.9 GB before issue 36; now the size alone refuses it.
    _too_large(POLICY_BYTES)(repo / "policies" / "big.yaml")
    done = run_gate(repo, "validate", "policies/big.yaml")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "error: policies/big.yaml: the file is 1,048,577 bytes, over the limit of 1,048,576 "
        "bytes for a policy; a policy names regions and their settings, not data: split it into "
        "several policy files"
    ]


def test_a_long_policy_without_aliases_is_not_blamed_on_aliases(repo: Path) -> None:
    regions = "".join(f"  - {{name: r{i}, step: 'steps:leaky'}}\n" for i in range(20_000))
    (repo / "policies" / "long.yaml").write_text(f"version: 1\nregions:\n{regions}")
    done = run_gate(repo, "validate", "policies/long.yaml")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "error: policies/long.yaml:1: the policy holds more than 50000 values; a policy names "
        "regions and their settings, not data: split it into several policy files"
    ]


def test_a_shard_with_infinite_counts_merges_and_a_deep_one_is_refused(tmp_path: Path) -> None:
    odd = tmp_path / "odd.xml"
    odd.write_text(
        '<testsuites><testsuite name="s" tests="1" disabled="1e999" time="1e999">'
        '<testcase name="c" classname="s"/></testsuite></testsuites>'
    )
    merged = run_gate(tmp_path, "merge", "out.xml", "odd.xml", report="out.xml")
    assert merged.returncode == 0, merged
    root = merged.junit()
    assert (root.get("disabled"), root.get("time")) == ("0", "0.000")

    deep = tmp_path / "deep.xml"
    deep.write_text(
        '<testsuites><testsuite name="s"><testcase name="c">'
        + "<a>" * 200_000
        + "</a>" * 200_000
        + "</testcase></testsuite></testsuites>"
    )
    refused = run_gate(tmp_path, "merge", "out2.xml", "deep.xml", report="out2.xml")
    assert refused.returncode == 2, refused
    assert refused.stderr.splitlines() == [
        "error: deep.xml: elements nested more than 100 deep; not a JUnit report"
    ]
    # Inputs, not reports: the suite's check that every report here is valid JUnit skips them.
    odd.unlink()
    deep.unlink()


def test_a_run_that_breaks_leaves_no_stale_report(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = repo / "reports" / "transfer-gate.xml"
    passed = run_gate(repo, "run")
    assert passed.returncode == 1, passed  # leaky: a failing transfer
    assert report.is_file()

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a planted bug")

    monkeypatch.setattr("gate.cli.run.execute", broken)
    crashed = run_gate(repo, "run")
    assert crashed.returncode == 3, crashed
    assert "RuntimeError: a planted bug" in crashed.stderr
    # Gone, not the last run's: a missing report fails the upload; a stale one could pass.
    assert not report.exists()


# --- nothing written outside the repository ------------------------------------------------------

OUTSIDE_FIX = (
    "a policy, which a pull request can change, imports only from the repository: move that "
    "code into it, or install it into the environment (pip install) so that it imports without "
    "python_path"
)
REFERENCE_FIX = (
    "a policy names only files inside the repository: keep the reference there (beside the "
    "policy, say)"
)


@pytest.mark.parametrize(
    ("line", "where", "error"),
    [
        (
            'python_path: ["../../"]',
            "python_path[0]",
            f"folder ../../ lies outside the repository; {OUTSIDE_FIX}",
        ),
        (
            'python_path: ["/etc"]',
            "python_path[0]",
            f"folder /etc lies outside the repository; {OUTSIDE_FIX}",
        ),
        (
            'python_path: ["escape"]',
            "python_path[0]",
            "folder escape leads out of the repository through the symlink policies/escape -> "
            f"{{outside}}; {OUTSIDE_FIX}",
        ),
    ],
)
def test_python_path_stays_in_the_repository(
    repo: Path, tmp_path: Path, line: str, where: str, error: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "policies" / "escape").symlink_to(outside)
    (repo / "policies" / "p.yaml").write_text(f"{line}\n" + POLICY.lstrip("\n"))
    done = run_gate(repo, "validate")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: policies/p.yaml:1: {where}: {error.format(outside=outside)}"
    ]


@pytest.mark.parametrize("reference", ["../../outside/a.npz", "{outside}/a.npz", "escape/a.npz"])
def test_write_references_never_writes_outside(repo: Path, tmp_path: Path, reference: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "policies" / "escape").symlink_to(outside)
    written = reference.format(outside=outside)
    (repo / "policies" / "p.yaml").write_text(
        POLICY.lstrip("\n") + f"    checks: {{reference: {json.dumps(written)}}}\n"
    )
    done = run_gate(repo, "run", "--write-references")
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"error: policies/p.yaml:7: regions[0].checks.reference: reference {written} "
    ), done
    assert line.endswith(REFERENCE_FIX), done
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "outside" / "a.npz").exists()


def test_reports_never_follow_a_symlink_out_of_the_repository(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (repo / "reports").symlink_to(outside)
    done = run_gate(repo, "run")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "error: --junit reports/transfer-gate.xml leads out of the repository through the "
        f"symlink reports -> {outside}; remove the symlink, or name the outside path itself on "
        "the command line (--junit /elsewhere/transfer-gate.xml)"
    ]
    assert list(outside.iterdir()) == []
    # Named on the command line, an outside path is the user's to choose.
    chosen = run_gate(repo, "run", "--junit", str(outside / "g.xml"), report=str(outside / "g.xml"))
    assert chosen.returncode == 1, chosen
    assert (outside / "g.xml").is_file()


def test_a_baseline_never_follows_a_symlink_out_of_the_repository(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (repo / "kept").symlink_to(outside)
    done = run_gate(repo, "baseline", "--baseline", "kept/b.json")
    assert done.returncode == 2, done
    assert done.stderr.splitlines()[-1].startswith(
        "error: --baseline kept/b.json leads out of the repository through the symlink kept -> "
    )
    assert list(outside.iterdir()) == []
    assert os.path.islink(repo / "kept")


# --- the text gate itself ------------------------------------------------------------------------

# Where the gate's own process writes to stdout or stderr without `gate.printable`: nowhere. The
# worker's side is exempt: what a worker prints reaches the log through the gate's watcher.
WORKER_SIDE = {"gate/witness/transfer_map.py"}


def _direct_writes(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        printing = isinstance(function, ast.Name) and function.id == "print"
        writing = (
            isinstance(function, ast.Attribute)
            and function.attr == "write"
            and isinstance(function.value, ast.Attribute)
            and function.value.attr in ("stdout", "stderr")
        )
        if printing or writing:
            found.append(node.lineno)
    return found


def test_nothing_in_the_gate_prints_around_the_text_gate() -> None:
    gate = TESTS.parent / "gate"
    direct = {
        f"{path.relative_to(TESTS.parent).as_posix()}:{line}"
        for path in gate.rglob("*.py")
        if path.name != "printable.py"
        and path.relative_to(TESTS.parent).as_posix() not in WORKER_SIDE
        for line in _direct_writes(path)
    }
    assert direct == set(), "print through gate.printable (say, write, say_command)"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("::error::x", "\\x3a:error::x"),
        ("  \t::add-mask::s", "  \t\\x3a:add-mask::s"),
        ("##[error]x", "\\x23#[error]x"),
        ("a\n::b\n ok :: here", "a\n\\x3a:b\n ok :: here"),
        ("\x1b[31mred\x1b[0m\x00\x7f\x85", "\\x1b[31mred\\x1b[0m\\x00\\x7f\\x85"),
        ("bad \ud800 \u202e \u2028", "bad \\ud800 \\u202e \\u2028"),
        ("a\r\n::b", "a\\x0d\n\\x3a:b"),
        ("plain: text, tabs\tstay", "plain: text, tabs\tstay"),
    ],
)
def test_printable_shows_every_control_and_starts_no_command(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(shown) == shown  # once is enough: printing twice changes nothing


def test_flat_is_one_line_that_keeps_its_columns() -> None:
    assert flat("PASS  p.a   1 line\r\n::error::x\u2028 y") == "PASS  p.a   1 line ::error::x y"


def test_a_terminal_keeps_the_gates_colours_and_nothing_else() -> None:
    text = "\x1b[31mFAIL\x1b[0m \r\x1b[K \x1b]8;;https://x\x07 \x1b[2J"
    assert printable(text, escapes=True) == (
        "\x1b[31mFAIL\x1b[0m \r\x1b[K \\x1b]8;;https://x\\x07 \\x1b[2J"
    )


def test_only_the_gates_own_workflow_commands_are_written_as_commands() -> None:
    assert (
        command("::error file=a.py,line=3,title=t::m\x1b")
        == "::error file=a.py,line=3,title=t::m\\x1b"
    )
    for line in ("::add-mask::secret", "::set-output name=x::y", "::error::a\n::b", "text"):
        with pytest.raises(ValueError, match="not a workflow command the gate writes"):
            command(line)


# --- a baseline entry accepts what it shows (issue 54) --------------------------------------------

# `leaky` with a second implicit transfer above the line the baseline accepts: the line a pull
# request adds (issue 54's steps.py:21), the accepted one below it (steps.py:22).
NEW_TRANSFER = "    add_one(np.ones((4,), np.float32))\n    return add_one(x) + add_one(batch)\n"


def _accepted(repo: Path) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = json.loads((repo / BASELINE).read_text())["accepted"]
    return entries


def test_a_baseline_entry_that_shows_one_line_cannot_accept_another(repo: Path) -> None:
    recorded = run_gate(repo, "baseline")
    assert recorded.returncode == 0, recorded
    [accepted] = _accepted(repo)
    steps = (repo / "steps.py").read_text()
    (repo / "steps.py").write_text(
        steps.replace("    return add_one(x) + add_one(batch)\n", NEW_TRANSFER)
    )
    failing = run_gate(repo, "run", "--no-timing-baseline", "--json", "reports/map.json")
    assert failing.returncode == 1, failing
    [region] = json.loads((repo / "reports" / "map.json").read_text())["suites"][0]["regions"]
    [new] = [t for t in region["transfers"] if t["failing"]]
    assert new["source"] == "add_one(np.ones((4,), np.float32))"
    # The attack: the new line's fingerprint, from the pull request's own JSON report, on an
    # entry that repeats the line already accepted. A reviewer sees a duplicate, nothing new.
    forged = json.loads((repo / BASELINE).read_text())
    forged["accepted"].append({**accepted, "fingerprint": new["fingerprint"]})
    (repo / BASELINE).write_text(json.dumps(forged, indent=2))
    done = run_gate(repo, "run", "--no-timing-baseline")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: {BASELINE}: accepted[1]: fingerprint {new['fingerprint']} is not that of the "
        "transfer the entry shows (p.leaky: implicit host-to-device float32[*,4] in steps.py "
        "(leaky): return add_one(x) + add_one(batch)); an entry accepts only what it shows: "
        f"{REGENERATE}"
    ]
    error = done.testcase("baseline").find("error")
    assert error is not None
    # Regenerated, the entry shows the line it accepts: what a reviewer must see in the diff.
    regenerated = run_gate(repo, "baseline")
    assert regenerated.returncode == 0, regenerated
    assert f"warning: replacing an unreadable baseline: {BASELINE}: accepted[1]: " in (
        regenerated.stderr
    )
    assert sorted(e["source"] for e in _accepted(repo)) == [
        "add_one(np.ones((4,), np.float32))",
        "return add_one(x) + add_one(batch)",
    ]
    assert run_gate(repo, "run", "--no-timing-baseline").returncode == 0


# --- traces stay in the repository, and within their limit (issue 54) ---------------------------

TRACES = "reports/transfer-gate-traces"
# Step times compared against the stored baseline (so the region is traced), never failing on a
# machine's load: these tests are about where the traces go.
TRACED_POLICY = POLICY + "    timing: {baseline_max_slowdown: 1000, on_inconclusive: warn}\n"


def _traced_repo(repo: Path, policy: str = TRACED_POLICY) -> None:
    (repo / "policies" / "p.yaml").write_text(policy)
    recorded = run_gate(repo, "baseline")
    assert recorded.returncode == 0, recorded


@pytest.mark.parametrize("policy", ["valid", "invalid"])
@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_traces_symlink_is_refused_before_anything_is_deleted(
    repo: Path, tmp_path: Path, policy: str, target: str
) -> None:
    _traced_repo(repo)
    kept = tmp_path / "elsewhere" if target == "outside" else repo / "steps_backup"
    kept.mkdir()
    (kept / "precious.txt").write_text("not the gate's")
    (repo / "reports").mkdir(exist_ok=True)
    (repo / TRACES).symlink_to(kept)
    if policy == "invalid":
        (repo / "policies" / "p.yaml").write_text("version: 1\nregions: nope\n")
    done = run_gate(repo, "run")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: {TRACES}: is a symlink (-> {kept}); the gate clears this folder and keeps the "
        "profiler's traces in it (beside --junit reports/transfer-gate.xml), and never through a "
        "symlink: remove the symlink"
    ]
    assert [p.name for p in kept.iterdir()] == ["precious.txt"]
    assert (kept / "precious.txt").read_text() == "not the gate's"


def test_a_suite_name_never_puts_a_trace_outside_the_traces_folder(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    # reports/transfer-gate-traces/../../../outside: the mkdtemp prefix it became.
    suite = "../../../outside/x"
    _traced_repo(repo, f"suite: {json.dumps(suite)}\n" + TRACED_POLICY.lstrip("\n"))
    done = run_gate(repo, "run", "--json", "reports/map.json")
    assert done.returncode == 0, done
    assert list(outside.iterdir()) == []
    [region] = json.loads((repo / "reports" / "map.json").read_text())["suites"][0]["regions"]
    trace = Path(region["cost"]["times"]["trace"])
    [folder] = (repo / TRACES).iterdir()
    assert trace.is_relative_to(folder)
    assert folder.name.startswith("_.._.._outside_x.leaky-"), folder.name


# A step that fills its own trace while the gate traces it: a sparse file past the limit.
FILLS_ITS_TRACE = """

def filled(x):
    import os
    kept = "reports/transfer-gate-traces"  # the run's, beside its reports; the worker's cwd
    if os.path.isdir(kept):
        for folder in os.listdir(kept):
            with open(os.path.join(kept, folder, "padding.bin"), "wb") as stream:
                stream.truncate({size})
    return leaky(x)
"""


def test_a_trace_over_its_limit_is_dropped_with_a_note_and_the_verdict_stands(
    repo: Path,
) -> None:
    steps = (repo / "steps.py").read_text()
    (repo / "steps.py").write_text(steps + FILLS_ITS_TRACE.format(size=2 * TRACE_BYTES))
    _traced_repo(repo, TRACED_POLICY.replace("steps:leaky", "steps:filled"))
    done = run_gate(repo, "run", "--json", "reports/map.json")
    assert done.returncode == 0, done  # the transfer is accepted; the timing not slower
    [region] = json.loads((repo / "reports" / "map.json").read_text())["suites"][0]["regions"]
    times = region["cost"]["times"]
    assert times["trace"] is None
    assert times["lines"] == []
    assert times["note"] == (
        "the profiler's trace was dropped unread: 128 MiB, over the limit of 64 MiB for a trace"
    )
    assert not (repo / TRACES).exists() or list((repo / TRACES).iterdir()) == []


# The files of a GitHub Actions step: what is written there sets the job's outputs, the
# environment and PATH of the steps after it, and the job summary.
STEP_FILES = ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")


def test_a_regions_code_never_learns_where_the_steps_own_files_are(
    repo: Path, tmp_path: Path
) -> None:
    # hostile-inputs/step-files: setup and step write to each file their environment names.
    _lay_over(repo, CORPUS / "step-files")
    files = {name: tmp_path / name.lower() for name in STEP_FILES}
    for path in files.values():
        path.write_text("")
    environ: dict[str, str | None] = {name: str(path) for name, path in files.items()}
    done = run_gate(repo, "run", env={"GITHUB_ACTIONS": "true", **environ}, process=True)
    assert done.returncode == 0, done
    assert json.loads((repo / "seen.json").read_text()) == dict.fromkeys(STEP_FILES)
    for name, path in files.items():
        assert "planted" not in path.read_text(), name
    # The gate's own process still writes the job summary.
    assert "p.leaky" in files["GITHUB_STEP_SUMMARY"].read_text()
