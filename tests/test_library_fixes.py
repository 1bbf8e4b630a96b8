"""Real fixes from the libraries' own histories, judged by ``run --base`` through the real CLI.

Each folder of tests/library-fixes/ is one fix (its README cites the repository, commit and
license): ``base/`` holds the library's code after the fix, ``head/`` the code before it, and
``train.py`` with ``policy.yaml`` a small training loop over it. The base is committed; the
head is the working tree on top of it, as a pull request that reintroduced the bug would be.
Each test asserts the verdict, the finding and the line a PR tool annotates.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import GateRun, line_of, run_gate
from git_helpers import git, init

FIXES = Path(__file__).parent / "library-fixes"

# Each gate here runs under the accelerator's rule (tests/accelerator_rule.py).
ON_THE_DEVICE = pytest.mark.usefixtures("one_process_on_the_device")


def _copy(folder: Path, into: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            shutil.copy(path, into / path.name)


def _fixed(tmp_path: Path, fix: str) -> Path:
    """A repository whose commit, and tree, is the fix."""
    folder = FIXES / fix
    repo = init(tmp_path / fix)
    (repo / "policies").mkdir()
    shutil.copy(folder / "policy.yaml", repo / "policies" / "p.yaml")
    shutil.copy(folder / "train.py", repo / "train.py")
    _copy(folder / "base", repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{fix}: the fix")
    return repo


def _judged(tmp_path: Path, fix: str, devices: int = 1) -> tuple[GateRun, Path]:
    """``run --base HEAD`` on a repository whose commit is the fix and whose tree is before it."""
    repo = _fixed(tmp_path, fix)
    _copy(FIXES / fix / "head", repo)
    run = run_gate(repo, "run", "--base", "HEAD", "--json", "r.json", devices=devices)
    return run, repo


def _region(repo: Path) -> dict[str, Any]:
    [region] = json.loads((repo / "r.json").read_text())["suites"][0]["regions"]
    return region


def test_the_fixes_are_cited_and_whole() -> None:
    folders = sorted(p for p in FIXES.iterdir() if p.is_dir())
    assert len(folders) >= 8
    for folder in folders:
        readme = (folder / "README.md").read_text()
        assert "github.com/" in readme
        assert folder.name.split("-")[-1] in readme
        assert "Apache-2.0" in readme
        assert sorted(p.name for p in (folder / "base").iterdir()) == sorted(
            p.name for p in (folder / "head").iterdir()
        )
        assert (folder / "train.py").is_file()
        assert (folder / "policy.yaml").is_file()


@ON_THE_DEVICE
def test_optax_47404ab6_the_annotation_is_on_momos_host_sync(tmp_path: Path) -> None:
    run, repo = _judged(tmp_path, "optax-47404ab6")
    assert run.returncode == 1, run
    sync = line_of(repo / "momo.py", "if count == jnp.zeros")
    testcase = run.testcase("momo: transfers")
    # Python scalar uploads at the lines below it are more frequent; the sync comes first.
    assert (testcase.get("file"), testcase.get("line")) == ("momo.py", str(sync)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    # The scalar uploads of the lines the fix rewrote (``beta*`` for ``bt*``) are the base's,
    # paired through git's line map (issue 56): the sync may be the only new transfer.
    assert f"implicit device-to-host transfer bool[] at momo.py:{sync}, 1x per step" in (message), (
        message
    )
    failing = [f for f in _region(repo)["transfers"] if f["failing"]]
    assert failing[0]["direction"] == "device-to-host", failing
    assert failing[0]["line"] == sync, failing
    # A plain run (no base) too: of the eager update's many failing lines, the sync leads.
    plain = run_gate(repo, "run")
    assert plain.returncode == 1, plain
    testcase = plain.testcase("momo: transfers")
    assert (testcase.get("file"), testcase.get("line")) == ("momo.py", str(sync)), plain
    failure = testcase.find("failure")
    assert failure is not None, plain
    message = failure.get("message", "")
    assert "more (every one in this testcase's body)" in message, message


@ON_THE_DEVICE
def test_optax_7c49fcfd_a_second_program_in_the_first_call_fails_against_the_base(
    tmp_path: Path,
) -> None:
    run, repo = _judged(tmp_path, "optax-7c49fcfd")
    assert run.returncode == 1, run
    call = line_of(repo / "train.py", "# the loop's call")
    testcase = run.testcase("linesearch: recompiles")
    assert (testcase.get("file"), testcase.get("line")) == ("train.py", str(call)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(
        f"train.py:{call}: jit(step) compiled 2 programs in the first call and warm-up "
        "(3 calls) where the base compiled 1: "
    ), message
    assert "{weak_type=True} before" in message, message
    [found] = _region(repo)["recompiles"]
    assert (found["startup"], found["count"], found["base_count"]) == (True, 2, 1)
    assert "FAIL  p.linesearch  1 recompile  recompiled 1x" in run.stdout, run
    # Its memory: per program, never summed into what reads like one program's growth.
    [count] = _region(repo)["base"]["cost"]["program_counts"]
    assert (count["name"], count["base_programs"], count["head_programs"]) == ("jit(step)", 1, 2)
    assert count["head_memory"][0] == count["base_memory"][0], count
    assert count["text"].startswith("jit(step): 2 programs where the base had 1 program (each: ")
    assert "jit(step): argument_bytes" not in run.stdout, run


@ON_THE_DEVICE
def test_flax_266052cb_a_pmap_per_call_recompiles_and_its_pmean_only_moved(
    tmp_path: Path,
) -> None:
    run, repo = _judged(tmp_path, "flax-266052cb", devices=2)
    assert run.returncode == 1, run
    call = line_of(repo / "imagenet_train.py", "avg(state['batch_stats'])")
    failure = run.testcase("sync: recompiles").find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    # Every step first: the compiles after warm-up, then the extra programs of the first call.
    assert message.startswith(f"imagenet_train.py:{call}: "), message
    # Named as written, not after JAX's wrapper (jit(_fun)).
    lambda_line = line_of(repo / "imagenet_train.py", "avg = jax.pmap(lambda x")
    assert message.split(": ", 1)[1].startswith(
        f"pmap(<lambda> at imagenet_train.py:{lambda_line}) compiled again 8x in 4 runs after "
        "warm-up"
    ), message
    # The pmean: moved from the function body to module level, the same all-reduce.
    region = _region(repo)
    changes = region["base"]["collectives"]["changes"]
    assert [c["change"] for c in changes] == ["moved"], changes
    assert not changes[0]["failing"], changes
    moved_to = line_of(repo / "imagenet_train.py", "avg = jax.pmap(lambda x")
    assert changes[0]["line"] == moved_to, changes
    assert "moved from imagenet_train.py:" in changes[0]["text"], changes
    assert "not new" in changes[0]["text"], changes
    collectives = run.testcase("sync: collectives")
    assert collectives.find("failure") is None, run
    assert "new all-reduce" not in run.stdout, run
    # Work by line says the same (issue 56): the pmean's line moved, not "new" and "gone".
    lines = region["base"]["cost"]["lines"]["changes"]
    assert not [c for c in lines if "all-reduce" in c["text"] and c["status"] != "changed"], lines


@ON_THE_DEVICE
def test_flax_f88e45b0_the_implicit_fetch_is_caught_at_its_line(tmp_path: Path) -> None:
    run, repo = _judged(tmp_path, "flax-f88e45b0")
    assert run.returncode == 1, run
    fetch = line_of(repo / "ppo_main.py", "onp.exp(onp.array(log_probs))")
    testcase = run.testcase("ppo: transfers")
    assert (testcase.get("file"), testcase.get("line")) == ("ppo_main.py", str(fetch)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    assert f"implicit device-to-host transfer float32[3,4] at ppo_main.py:{fetch}" in (
        failure.get("message", "")
    ), run
    # The fix's explicit device_get is gone from the head: nothing of the base's fails.
    failing = [f for f in _region(repo)["transfers"] if f["failing"]]
    assert all(not f["in_base"] for f in failing), failing


@ON_THE_DEVICE
def test_optax_b601cd0d_a_weak_step_count_compiles_the_step_twice(tmp_path: Path) -> None:
    run, repo = _judged(tmp_path, "optax-b601cd0d")
    assert run.returncode == 1, run
    call = line_of(repo / "train.py", "# the loop's call")
    testcase = run.testcase("ademamix: recompiles")
    assert (testcase.get("file"), testcase.get("line")) == ("train.py", str(call)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(
        f"train.py:{call}: jit(step) compiled 2 programs in the first call and warm-up "
        "(3 calls) where the base compiled 1: "
    ), message
    assert "int32[]{weak_type=True} before, int32[]{weak_type=False} now" in message, message
    # Nothing else of the region fails: the count alone.
    assert "FAIL  p.ademamix  1 recompile  recompiled 1x" in run.stdout, run


@ON_THE_DEVICE
def test_flax_29d4ffdb_an_eager_one_hot_per_string_is_a_round_trip(tmp_path: Path) -> None:
    run, repo = _judged(tmp_path, "flax-29d4ffdb")
    assert run.returncode == 1, run
    read = line_of(repo / "input_pipeline.py", "return np.array([encode_str(inp)")
    upload = line_of(repo / "input_pipeline.py", "return jax.nn.one_hot(tokens")
    testcase = run.testcase("seq2seq: transfers")
    # The host sync first: the annotation is on the read back, not the uploads.
    assert (testcase.get("file"), testcase.get("line")) == ("input_pipeline.py", str(read)), run
    failing = [f for f in _region(repo)["transfers"] if f["failing"]]
    assert failing[0]["direction"] == "device-to-host", failing
    assert failing[0]["line"] == read, failing
    assert any(f["direction"] == "host-to-device" and f["line"] == upload for f in failing), failing
    assert not any(f["in_base"] for f in failing), failing


@ON_THE_DEVICE
def test_equinox_55e0787_the_recompile_names_the_partial_and_the_line_that_made_it(
    tmp_path: Path,
) -> None:
    run, repo = _judged(tmp_path, "equinox-55e0787")
    assert run.returncode == 1, run
    call = line_of(repo / "train.py", "# the loop's call")
    made = line_of(repo / "weight_norm.py", "self._norm = ft.partial(")
    testcase = run.testcase("weightnorm: recompiles")
    assert (testcase.get("file"), testcase.get("line")) == ("train.py", str(call)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(f"train.py:{call}: jit(train_step) compiled again "), message
    # Where the static argument first differs, not two identical prefixes of its repr.
    assert "<function train_step at" not in message, message
    assert (
        "a new functools.partial(_norm_except_axis, …) on each call (a partial equals only "
        f"itself), made at weight_norm.py:{made}"
    ) in message, message
    # The fix speaks of the cause, and JUnit's body has it whole.
    assert "fix: make the partial once and reuse it" in (failure.text or ""), failure.text
    found = _region(repo)["recompiles"]
    assert all(f"made at weight_norm.py:{made}" in r["change"] for r in found), found


@ON_THE_DEVICE
def test_flax_7fcc7f6c_exp_computed_twice_fails_on_work_at_the_logsumexp_line(
    tmp_path: Path,
) -> None:
    run, repo = _judged(tmp_path, "flax-7fcc7f6c")
    assert run.returncode == 1, run
    grown = line_of(repo / "attention.py", "jax.scipy.special.logsumexp(")
    testcase = run.testcase("attention: cost")
    # The annotation is where the transcendentals grew, not on the policy.
    assert (testcase.get("file"), testcase.get("line")) == ("attention.py", str(grown)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    # New at the logsumexp line, or (XLA 0.12's ops) the line it replaced: a changed line.
    assert re.match(
        rf"work beyond 1\.5x the base: (new at )?attention\.py:{grown} (\(base: line \d+\) )?"
        r"\(changed line\): ",
        message,
    ), message
    # 2.01x on jax 0.10's XLA; 0.12's counts the logsumexp's own exp apart: 3.01x.
    grew = re.search(r"total: transcendentals 5\.24e5 → \S+ \((\d\.\d\d)x\)", message)
    assert grew is not None, message
    assert grew.group(1) in ("2.01", "3.01"), message
    # The standing bound's edit, then this pull request's own (issue 58's accept:), last.
    assert (
        "; if every later change may do this too, raise the bound: `cost: {max_work_increase: "
        f"{grew.group(1)}}}` in region attention (policy line 4); to accept it, add `accept: "
        "{cost: <why this change is meant>}` to region attention at policies/p.yaml:4"
    ) in message, message
    cost = _region(repo)["base"]["cost"]
    [failing] = [c for c in cost["changes"] if c["failing"]]
    assert (failing["function"], failing["metric"]) == (None, "transcendentals"), failing
    assert "FAIL  p.attention" in run.stdout, run


@ON_THE_DEVICE
def test_optax_0d67475c_a_loop_rolled_and_unrolled_reads_the_same_flops(tmp_path: Path) -> None:
    run, repo = _judged(tmp_path, "optax-0d67475c")
    assert run.returncode == 0, run
    cost = _region(repo)["base"]["cost"]
    totals = {c["metric"]: c for c in cost["changes"] if c["function"] is None}
    # XLA's figures alone read 4.35x: the rolled loop's body counted once.
    assert totals["flops"]["ratio"] < 1.02, totals
    assert not any(c["failing"] for c in cost["changes"]), cost["changes"]
    # The temp bytes the fix was about are listed (no default bounds memory).
    assert totals["temp_bytes"]["ratio"] > 3, totals
    headline = cost["headline"]
    # No line the fix wrote does work of its own: the headline names the change itself.
    unroll = line_of(repo / "muon.py", "unroll=True")
    assert headline.startswith(
        f"cost changed against the base: the change at muon.py:{unroll} compiled unchanged "
        "code differently"
    ), headline
    assert "(no source line)" not in headline, headline


@ON_THE_DEVICE
def test_haiku_f877ddc3_a_constant_xla_folded_fails_at_the_line_that_computes_it(
    tmp_path: Path,
) -> None:
    run, repo = _judged(tmp_path, "haiku-f877ddc3")
    assert run.returncode == 1, run
    counts = line_of(repo / "pool.py", "lax.reduce_window(jnp.ones_like(value)")
    testcase = run.testcase("avgpool: cost")
    # The annotation is on the line the fix rewrote, where the folded op is written.
    assert (testcase.get("file"), testcase.get("line")) == ("pool.py", str(counts)), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(
        "new constant f32[1,64,64,64] (1 MiB), folded from reduce_window_sum by XLA, compiled "
        f"into jit(step) at pool.py:{counts}, not in the base: "
    ), message
    # Its fix is the folded constant's: nothing was closed over, so "pass the array as an
    # argument" would send the reader looking for an array that is not there.
    assert "compute it from the smallest shape it varies over" in message, message
    assert "closing over" not in message, message
    [new] = _region(repo)["base"]["cost"]["new_constants"]
    assert (new["path"], new["line"], new["size_bytes"]) == ("pool.py", counts, 1 << 20), new
    assert new["folded_from"] == "reduce_window_sum", new


@ON_THE_DEVICE
def test_trax_bbf3a762_a_donation_the_head_no_longer_makes_fails_against_the_base(
    tmp_path: Path,
) -> None:
    run, repo = _judged(tmp_path, "trax-bbf3a762")
    assert run.returncode == 1, run
    testcase = run.testcase("backward: donation")
    # A donation has no line in the program: the policy's, as an unused one's.
    assert (testcase.get("file"), testcase.get("line")) == ("policies/p.yaml", "4"), run
    failure = testcase.find("failure")
    assert failure is not None, run
    message = failure.get("message", "")
    assert message.startswith(
        "jit(fbo): argument 'grads' float32[512,512] is no longer donated (base: donated, and "
        "an output reused its buffer); to accept it, add `accept: {donations: "
    ), message
    assert "fix: donate it again (donate_argnums or donate_argnames" in (failure.text or "")
    # The head leaves nothing unused: without the base's reused donations nothing shows it.
    region = _region(repo)
    assert region["donations"] == [], region["donations"]
    donations = region["base"]["collectives"]["donations"]
    assert donations["lost"] == [], donations
    assert donations["failing"], donations
    [dropped] = donations["dropped"]
    assert (dropped["function"], dropped["argument"]) == ("jit(fbo)", "grads"), dropped
    assert "FAIL  p.backward  1 dropped donation" in run.stdout, run


@ON_THE_DEVICE
def test_trax_bbf3a762_the_stored_baseline_keeps_the_reused_donations_too(tmp_path: Path) -> None:
    repo = _fixed(tmp_path, "trax-bbf3a762")
    recorded = run_gate(repo, "baseline", "--timing-only")
    assert recorded.returncode == 0, recorded
    stored = json.loads((repo / "policies" / "transfer-gate-baseline.json").read_text())
    [cost] = [entry["cost"] for entry in stored["timing"].values()]
    assert {(d["function"], d["argument"]) for d in cost["reused"]} >= {("jit(fbo)", "grads")}
    _copy(FIXES / "trax-bbf3a762" / "head", repo)
    run = run_gate(repo, "run")
    assert run.returncode == 1, run
    failure = run.testcase("backward: donation").find("failure")
    assert failure is not None, run
    assert failure.get("message", "").startswith(
        "jit(fbo): argument 'grads' float32[512,512] is no longer donated (baseline: donated"
    ), run
