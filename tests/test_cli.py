"""The command line's contract: subcommands, exit codes, reports on every path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import TESTS, gate_env, make_repo, run_gate
from processes import run
from result_samples import STEPS, policy

from gate.cli.exit_codes import COMMAND_MEANINGS, ExitCode

CLEAN = (
    STEPS
    + """

def touch_and_step(x):
    open("step-ran", "w").close()
    return step(x)
"""
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {"mod.py": CLEAN})


def test_help_documents_every_exit_code() -> None:
    done = run([sys.executable, "-m", "gate", "run", "--help"], env=gate_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    for code in ExitCode:
        assert f"{code.value}  {code.meaning}" in done.stdout


@pytest.mark.parametrize("command", sorted(COMMAND_MEANINGS))
def test_each_command_s_help_lists_its_own_exit_codes(command: str) -> None:
    done = run([sys.executable, "-m", "gate", command, "--help"], env=gate_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("exit codes:\n", 1)[1]
    assert table.splitlines() == [
        f"  {code.value}  {meaning}" for code, meaning in COMMAND_MEANINGS[command].items()
    ]
    assert ExitCode.REGION_FAILED.meaning not in done.stdout  # run's, not this command's


def test_readme_documents_every_exit_code() -> None:
    readme = (TESTS.parent / "README.md").read_text()
    for code in ExitCode:
        assert f"| {code.value} | {code.meaning} |" in readme


def test_exit_0_when_every_region_passes(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step")})
    run = run_gate(repo, "run")
    assert run.returncode == ExitCode.OK, run
    run.junit()


def test_exit_1_when_a_region_fails(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step", "leaky")})
    run = run_gate(repo, "run")
    assert run.returncode == ExitCode.REGION_FAILED, run
    assert "1 passed, 1 failed" in run.stdout


def test_exit_2_for_an_invalid_policy_runs_nothing_and_still_reports(repo: Path) -> None:
    make_repo(
        repo,
        {"policies/p.yaml": policy("touch_and_step") + "    gaurd: disallow\n"},
    )
    run = run_gate(repo, "run")
    assert run.returncode == ExitCode.USAGE, run
    assert "policies/p.yaml:7: regions[0]: unknown key 'gaurd' (did you mean 'guard'?)" in (
        run.stderr
    )
    assert "Traceback" not in run.stderr
    assert not (repo / "step-ran").exists()
    error = run.testcase("policy").find("error")
    assert error is not None, run
    assert run.testcase("policy").get("file") == "policies/p.yaml"
    assert run.testcase("policy").get("line") == "7"


def test_an_invalid_policy_is_in_the_json_report_too(repo: Path) -> None:
    # Every report is written on the way out, so a shard's JSON is never missing or stale.
    make_repo(repo, {"policies/p.yaml": policy("touch_and_step") + "    gaurd: disallow\n"})
    run = run_gate(repo, "run", "--json", "reports/map.json")
    assert run.returncode == ExitCode.USAGE, run
    document = json.loads((repo / "reports" / "map.json").read_text())
    (suite,) = document["suites"]
    (region,) = suite["regions"]
    assert (region["name"], region["status"]) == ("policy", "error")
    assert region["error"]["kind"] == "policy"
    assert document["passed"] is False


def test_exit_2_for_a_callable_that_does_not_import(repo: Path) -> None:
    make_repo(
        repo,
        {"policies/p.yaml": "version: 1\nregions:\n  - name: r\n    step: mod:stpe\n"},
    )
    run = run_gate(repo, "run")
    assert run.returncode == ExitCode.USAGE, run
    assert "policies/p.yaml:4" in run.stderr
    assert "stpe" in run.stderr
    assert "did you mean 'step'" in run.stderr


def test_exit_2_for_an_unknown_region(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step")})
    run = run_gate(repo, "run", "--region", "nope")
    assert run.returncode == ExitCode.USAGE, run
    assert "--region nope: no such region; the policies define: step" in run.stderr


def test_a_mistyped_region_gets_a_did_you_mean(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step")})
    run = run_gate(repo, "run", "--region", "stpe")
    assert run.returncode == ExitCode.USAGE, run
    assert "--region stpe: no such region (did you mean 'step'?); the policies" in run.stderr
    # Nothing ran, and the report says why: a missing report would read as "0 tests, passed".
    error = run.testcase("region").find("error")
    assert error is not None, run
    assert "did you mean 'step'?" in error.get("message", ""), run


def test_exit_2_for_an_unwritable_report_path(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("touch_and_step"), "blocker": "a file\n"})
    run = run_gate(repo, "run", "--junit", "blocker/report.xml")
    assert run.returncode == ExitCode.USAGE, run
    assert "blocker/report.xml" in run.stderr
    assert "--junit" in run.stderr
    assert not (repo / "step-ran").exists()


@pytest.mark.parametrize(("command", "option"), [("run", "--json"), ("baseline", "--baseline")])
def test_an_unwritable_json_or_baseline_path_names_its_own_option(
    repo: Path, command: str, option: str
) -> None:
    make_repo(repo, {"policies/p.yaml": policy("touch_and_step"), "blocker": "a file\n"})
    run = run_gate(repo, command, option, "blocker/out.json")
    assert run.returncode == ExitCode.USAGE, run
    assert "blocker/out.json: cannot create folder blocker" in run.stderr
    assert f"choose another {option}" in run.stderr
    assert "--junit" not in run.stderr
    assert not (repo / "step-ran").exists()


def test_exit_3_when_the_gate_itself_breaks_still_writes_a_report(repo: Path) -> None:
    # Inject a fault into the gate (not the user's code) through sitecustomize,
    # the way a real bug would surface: an exception from inside the gate's own
    # process (tests/test_isolation.py covers one inside a worker).
    make_repo(
        repo,
        {
            "policies/p.yaml": policy("step"),
            "inject/sitecustomize.py": """
                import gate.isolation.run_loop

                def broken(*args, **kwargs):
                    raise KeyError("injected gate bug")

                gate.isolation.run_loop.run_isolated = broken
            """,
        },
    )
    run = run_gate(repo, "run", env={"PYTHONPATH": str(repo / "inject")})
    assert run.returncode == ExitCode.INTERNAL, run
    assert "this is a bug" in run.stderr
    error = run.testcase("gate").find("error")
    assert error is not None, run
    assert "injected gate bug" in error.get("message", "")


def test_region_filter_runs_only_the_named_region(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step", "leaky")})
    run = run_gate(repo, "run", "--region", "p.step")
    assert run.returncode == ExitCode.OK, run
    names = [c.get("name") for c in run.junit().iter("testcase")]
    assert names == ["step: transfers"]


def test_paths_and_junit_location(repo: Path) -> None:
    make_repo(repo, {"elsewhere/a.yaml": policy("step"), "elsewhere/b.yml": policy("leaky")})
    run = run_gate(repo, "run", "elsewhere/a.yaml", "--junit", "out/r.xml", report="out/r.xml")
    assert run.returncode == ExitCode.OK, run
    assert [s.get("name") for s in run.junit().iter("testsuite")] == ["a"]
    both = run_gate(repo, "run", "elsewhere", "--junit", "out/r.xml", report="out/r.xml")
    assert both.returncode == ExitCode.REGION_FAILED, both
    assert [s.get("name") for s in both.junit().iter("testsuite")] == ["a", "b"]


def test_validate_checks_without_running(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("touch_and_step")})
    run = run_gate(repo, "validate")
    assert run.returncode == ExitCode.OK, run
    assert "policies/p.yaml: ok (1 region)\n1 policy, 1 region: valid" in run.stdout
    assert not (repo / "step-ran").exists()


def test_validate_counts_two_of_each_in_the_plural(repo: Path) -> None:
    make_repo(repo, {"policies/a.yaml": policy("step", "leaky"), "policies/b.yaml": policy("step")})
    run = run_gate(repo, "validate")
    assert run.returncode == ExitCode.OK, run
    assert "policies/a.yaml: ok (2 regions)" in run.stdout
    assert "2 policies, 3 regions: valid" in run.stdout


def test_validate_reports_every_problem_of_a_file_at_once(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": (
                "version: 1\nregions:\n"
                "  - name: a\n    step: mod:nope\n    guard: forbid\n"
                "  - name: a\n    step: mod:step\n"
            )
        },
    )
    run = run_gate(repo, "validate")
    assert run.returncode == ExitCode.USAGE, run
    lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert any("policies/p.yaml:5" in line and "forbid" in line for line in lines), run
    assert any("policies/p.yaml:6" in line and "duplicate" in line for line in lines), run


def test_console_script_is_installed(repo: Path) -> None:
    make_repo(repo, {"policies/p.yaml": policy("step")})
    script = Path(sys.executable).parent / "transfer-gate"
    done = run([script, "validate"], cwd=repo, env=gate_env(), timeout=120)
    assert done.returncode == 0, done.stderr


def test_two_files_defining_the_same_suite_and_region_are_refused(repo: Path) -> None:
    # Subfolders are searched, and a suite defaults to the file's stem: two
    # `train.yaml` in two folders would share testcases and baseline entries.
    make_repo(repo, {"policies/a/p.yaml": policy("step"), "policies/b/p.yaml": policy("step")})
    run = run_gate(repo, "validate")
    assert run.returncode == ExitCode.USAGE, run
    assert (
        "policies/b/p.yaml:4: regions[0]: region 'p.step' is also defined in "
        "policies/a/p.yaml:4; give one of the files its own `suite:` name"
    ) in run.stderr


BAD_POLICIES = sorted((TESTS / "example-policies" / "bad").glob("*.y*ml"))


def expected_error(path: Path) -> str:
    first = path.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    return first.removeprefix("# error:").strip()


@pytest.mark.parametrize("command", ["validate", "run"])
def test_every_bad_policy_is_one_clear_line_through_the_cli(command: str, tmp_path: Path) -> None:
    # One gate process for all of them: every file's problems are reported
    # together, each on its line, with no traceback, and nothing runs.
    files = [str(p) for p in BAD_POLICIES]
    report = tmp_path / "r.xml"
    extra = ["--junit", str(report)] if command == "run" else []
    run = run_gate(TESTS.parent, command, *files, *extra, report=str(report))
    assert run.returncode == ExitCode.USAGE, run
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    for path in BAD_POLICIES:
        want = expected_error(path)
        assert any(want in line for line in errors), (path.name, want, run.stderr)
    if command == "run":
        reported = {c.get("file") for c in run.junit().iter("testcase")}
        assert len(reported) == len(BAD_POLICIES)


def test_merge_help_says_it_merges_junit_and_json_reports() -> None:
    for argv in (["--help"], ["merge", "--help"]):
        done = run([sys.executable, "-m", "gate", *argv], env=gate_env(), timeout=60)
        assert done.returncode == 0, done.stderr
        merge_help = done.stdout if argv[0] == "merge" else done.stdout.split("merge", 1)[1]
        assert "JUnit" in merge_help, done.stdout
        assert "JSON" in merge_help, done.stdout


def test_a_files_import_errors_come_with_its_other_problems(repo: Path) -> None:
    make_repo(
        repo,
        {
            "policies/p.yaml": (
                "version: 1\nregions:\n"
                "  - name: a\n    step: mod:stpe\n    guard: sometimes\n"
                "  - name: b\n    step: mod:step\n    setup: nowhere:inputs\n"
            )
        },
    )
    run = run_gate(repo, "validate")
    assert run.returncode == ExitCode.USAGE, run
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert any("p.yaml:5: regions[0].guard" in e and "sometimes" in e for e in errors), run
    assert any("p.yaml:4: regions[0].step" in e and "did you mean 'step'" in e for e in errors)
    assert any("p.yaml:8: regions[1].setup" in e and "'nowhere' not found" in e for e in errors)


@pytest.mark.parametrize(
    "argv",
    [["run", "--baseli", "x.json"], ["run", "--jso", "out.json"], ["baseline", "--base", "b.json"]],
)
def test_an_abbreviated_option_is_refused_not_taken_for_another(argv: list[str]) -> None:
    # argparse would take `--baseli` for `--baseline` and `--jso` for `--json` (and, before
    # `run --base` existed, `--base` too; `baseline` still has none).
    from gate.cli.parser import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == ExitCode.USAGE


# --- in process: main(argv) returns the code, and one place maps exceptions to it -----------------


def test_main_returns_the_code_instead_of_exiting(capsys: pytest.CaptureFixture[str]) -> None:
    from gate import __version__
    from gate.cli.main import main

    assert main(["--version"]) == ExitCode.OK
    assert capsys.readouterr().out == f"transfer-gate {__version__}\n"
    assert main(["run", "--baseli", "x.json"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    # In run's own usage, which shows run's options, not the top-level one.
    assert "transfer-gate run: error: unrecognized arguments: --baseli" in err, err
    assert err.startswith("usage: transfer-gate run "), err
    assert main(["doctor", "--expect", "npu"]) == ExitCode.USAGE
    assert "invalid choice: 'npu'" in capsys.readouterr().err


def test_what_the_user_got_wrong_exits_2_with_one_line_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gate.cli.errors import UsageError, exit_code_of
    from gate.plan import UnknownRegionError
    from gate.policy.problems import PolicyError, Problem

    def invalid() -> int:
        raise PolicyError(
            (Problem("p.yaml", 3, "regions[0]", "bad"), Problem("q.yaml", None, "", "x"))
        )

    assert exit_code_of("validate", invalid) == ExitCode.USAGE
    assert capsys.readouterr().err == "error: p.yaml:3: regions[0]: bad\nerror: q.yaml: x\n"
    for error in (UsageError("no good"), UnknownRegionError("no good")):

        def refused(error: Exception = error) -> int:
            raise error

        assert exit_code_of("run", refused) == ExitCode.USAGE
        assert capsys.readouterr().err == "error: no good\n"


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("run", "error: transfer-gate itself failed; this is a bug, please report it with the "
         "traceback above\n"),
        ("doctor", "error: transfer-gate doctor itself failed; this is a bug\n"),
    ],
)  # fmt: skip
def test_a_bug_in_the_gate_exits_3_with_its_traceback(
    command: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gate.cli.errors import exit_code_of

    def broken() -> int:
        raise KeyError("injected")

    assert exit_code_of(command, broken) == ExitCode.INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "KeyError: 'injected'" in err
    assert err.endswith(said)
