"""``run --base REF``'s base tree: REF resolved and checked out in a temporary git worktree.

On real throwaway repositories in tmp_path: the worktree is there inside the ``with`` and gone
after it however it ends, the head's uncommitted changes stay where they are, and every bad
``--base`` is one line and exit 2, through the real CLI, with the report still written.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from cli_helpers import make_repo, run_gate
from git_helpers import TIMEOUT_S, commit, git
from processes import run
from result_samples import STEPS, policy

from gate.cli.exit_codes import ExitCode
from gate.compare import worktree
from gate.compare.worktree import TEMP_PREFIX, BaseRefError, BaseTree, check_base, checked_out
from gate.isolation.cancellation import cancel_on_signals
from gate.isolation.compile_cache import CACHE_DIR
from gate.witness.footprint import package_paths


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository of two commits on main, and a branch `old` at the first; the base's
    folders (`checked_out` in this process) in a temporary folder of the test's own."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(root, {"step.txt": "base\n", "sub/here.txt": "base\n"}, "first")
    git(root, "branch", "old")
    commit(root, {"step.txt": "head\n"}, "second")
    return root


def worktrees(repo: Path) -> list[str]:
    """The worktrees git knows of besides the main one."""
    listed = git(repo, "worktree", "list", "--porcelain")
    paths = [line.split(" ", 1)[1] for line in listed.splitlines() if line.startswith("worktree ")]
    return paths[1:]


def test_head_minus_one_is_checked_out_and_gone_afterwards(repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD~1")
    with checked_out(repo, "HEAD~1") as base:
        assert isinstance(base, BaseTree)
        assert (base.sha, base.ref) == (first, "HEAD~1")
        assert first.startswith(base.short_sha)
        assert base.describe() == f"HEAD~1 ({base.short_sha})"
        assert (base.root / "step.txt").read_text() == "base\n"
        assert base.root.name.startswith("base-")
        assert worktrees(repo) == [str(base.root)]
        # Detached: no branch of the user's is checked out (or locked) by the gate.
        on_branch = run(["git", "symbolic-ref", "-q", "HEAD"], cwd=base.root, timeout=TIMEOUT_S)
        assert on_branch.returncode != 0, on_branch.stdout
        assert git(base.root, "rev-parse", "HEAD") == first
    assert not base.root.exists()
    assert worktrees(repo) == []
    # The head was never touched.
    assert (repo / "step.txt").read_text() == "head\n"
    assert git(repo, "status", "--porcelain") == ""


def test_a_branch_and_a_sha_resolve_and_describe_themselves(repo: Path) -> None:
    first = git(repo, "rev-parse", "old")
    assert check_base(repo, "old").sha == first
    with checked_out(repo, "old") as base:
        assert base.describe() == f"old ({base.short_sha})"
    with checked_out(repo, first) as base:
        assert base.describe() == base.short_sha
        assert (base.root / "step.txt").read_text() == "base\n"
    assert worktrees(repo) == []


def test_an_exception_inside_leaves_nothing_behind(repo: Path) -> None:
    seen: list[Path] = []

    def region() -> None:
        with checked_out(repo, "old") as base:
            seen.append(base.root)
            assert base.root.is_dir()
            raise RuntimeError("region broke")

    with pytest.raises(RuntimeError, match="region broke"):
        region()
    (root,) = seen
    assert not root.exists()
    assert worktrees(repo) == []


def test_keyboard_interrupt_inside_leaves_nothing_behind(repo: Path) -> None:
    with pytest.raises(KeyboardInterrupt), checked_out(repo, "old") as base:
        raise KeyboardInterrupt
    assert not base.root.exists()
    assert worktrees(repo) == []


def test_a_cancelled_run_leaves_nothing_behind(repo: Path) -> None:
    # The run turns SIGTERM into a cancellation and returns normally: the `with` ends as usual.
    with cancel_on_signals() as cancel, checked_out(repo, "old") as base:
        os.kill(os.getpid(), signal.SIGTERM)
        assert cancel.requested
    assert not base.root.exists()
    assert worktrees(repo) == []


def test_a_killed_gates_stale_entry_is_pruned_next_time(repo: Path) -> None:
    with checked_out(repo, "old") as killed:
        # As if SIGKILLed: git's entry outlives the folder, which the runner's /tmp lost.
        shutil.rmtree(killed.root)
        git(repo, "worktree", "list")
        with checked_out(repo, "old") as base:
            assert worktrees(repo) == [str(base.root)]
    assert worktrees(repo) == []


def test_a_subfolder_of_the_git_top_level_maps_to_the_same_subfolder(repo: Path) -> None:
    with checked_out(repo / "sub", "old") as base:
        assert base.root.name == "sub"
        assert (base.root / "here.txt").read_text() == "base\n"
        assert base.root.parent.name.startswith("base-")
    assert not base.root.parent.exists()
    assert worktrees(repo) == []


def test_the_base_lies_in_the_same_folder_every_run_of_a_checkout(
    repo: Path, tmp_path: Path
) -> None:
    """JAX's compilation cache keys a program by its files' paths: the base checked out where
    it was last time finds its unchanged programs there (`tests/test_compile_cache.py`)."""
    with checked_out(repo, "old") as first:
        pass
    with checked_out(repo, "HEAD") as second:
        assert (second.root / "step.txt").read_text() == "head\n"
    assert first.root == second.root
    assert first.root.parent.name == f"transfer-gate-{os.getuid()}"
    assert first.root.parent.stat().st_mode & 0o777 == 0o700
    assert list(first.root.parent.iterdir()) == []  # the lock file went with the run
    other = tmp_path / "other"
    shutil.copytree(repo, other)
    with checked_out(other, "old") as elsewhere:
        assert elsewhere.root != first.root
    assert not first.root.exists()
    assert not elsewhere.root.exists()
    assert worktrees(repo) == []
    assert worktrees(other) == []


def test_a_second_run_of_the_checkout_at_the_same_time_gets_a_folder_of_its_own(
    repo: Path,
) -> None:
    with checked_out(repo, "old") as first, checked_out(repo, "HEAD") as second:
        assert second.root != first.root
        assert second.root.name.startswith(TEMP_PREFIX)
        assert first.fresh_because == ""
        assert second.fresh_because == (
            f"another run of this checkout is using {first.root}; run one --base at a time"
        )
        assert (first.root / "step.txt").read_text() == "base\n"
        assert (second.root / "step.txt").read_text() == "head\n"
        assert sorted(worktrees(repo)) == sorted([str(first.root), str(second.root)])
    assert not first.root.exists()
    assert not second.root.exists()
    assert worktrees(repo) == []


def test_a_folder_a_killed_gate_left_in_the_stable_place_is_replaced(repo: Path) -> None:
    with checked_out(repo, "old") as killed:
        pass
    # As if SIGKILLed mid-run: the folder, with the base's files, and git's entry for it.
    git(repo, "worktree", "add", "--detach", "--quiet", str(killed.root), "old")
    (killed.root / "left.txt").write_text("from the killed run\n")
    with checked_out(repo, "HEAD") as base:
        assert base.root == killed.root
        assert not (base.root / "left.txt").exists()
        assert (base.root / "step.txt").read_text() == "head\n"
    assert worktrees(repo) == []


def test_a_run_killed_while_git_checked_the_base_out_does_not_stop_the_next(repo: Path) -> None:
    """git locks a worktree's entry ("initializing") while it checks it out: killed then, the
    gate leaves an entry that is locked and missing, which prune keeps and a plain add refuses,
    in the place every later run of the checkout uses."""
    with checked_out(repo, "old") as killed:
        pass
    git(repo, "worktree", "add", "--detach", "--quiet", str(killed.root), "old")
    (entry,) = (repo / ".git" / "worktrees").iterdir()
    (entry / "locked").write_text("initializing\n")
    shutil.rmtree(killed.root)
    git(repo, "worktree", "prune")
    assert worktrees(repo) == [str(killed.root)]  # kept: it is locked
    for _ in range(2):
        with checked_out(repo, "HEAD") as base:
            assert base.root == killed.root
            assert (base.root / "step.txt").read_text() == "head\n"
        assert worktrees(repo) == []


def test_a_lock_file_let_go_of_while_another_run_opened_it_is_not_taken(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run removes its lock file as it lets go: a run that opened the file just before then
    holds a lock on a file no path names, and a third run, making the file anew, would take
    the same folder. The second run sees the path names another file, and takes a fresh one."""
    held = worktree._stable_folder(repo)
    assert not isinstance(held, str), held
    folder, lock = held
    path = worktree._lock_path(folder)
    early = os.open(path, os.O_RDWR)  # the second run's open, before the first lets go
    path.unlink()  # the first run lets go, as `checked_out` does
    os.close(lock)
    path.touch()  # a third run makes the file anew
    monkeypatch.setattr(worktree.os, "open", lambda *args, **kwargs: early)
    assert worktree._stable_folder(repo) == (
        f"another run of this checkout is using {folder}; run one --base at a time"
    )
    monkeypatch.undo()
    with pytest.raises(OSError, match="Bad file descriptor"):  # closed by the second run
        os.fstat(early)


@pytest.mark.parametrize("made_by", ["another user's mode", "a link"])
def test_a_stable_place_that_is_not_private_is_never_used(
    repo: Path, tmp_path: Path, made_by: str
) -> None:
    """A shared temporary folder: whoever made ``transfer-gate-<uid>`` first could point it
    anywhere. Only this user's own private folder is reused; else a fresh one, as before."""
    temp = Path(tempfile.gettempdir())  # the repo fixture's, in tmp_path
    place = temp / f"transfer-gate-{os.getuid()}"
    if made_by == "a link":
        (tmp_path / "elsewhere").mkdir()
        place.symlink_to(tmp_path / "elsewhere")
    else:
        place.mkdir(mode=0o777)
        place.chmod(0o777)
    with checked_out(repo, "old") as base:
        assert base.root.parent == temp
        assert base.root.name.startswith(TEMP_PREFIX)
        assert base.fresh_because == (
            f"{place} is not a folder of this user's alone (mode 0700); remove it"
        )
    assert not base.root.exists()
    target = tmp_path / "elsewhere" if made_by == "a link" else place
    assert list(target.iterdir()) == []


def test_uncommitted_head_changes_do_not_reach_the_base(repo: Path) -> None:
    (repo / "step.txt").write_text("uncommitted\n")
    (repo / "new.txt").write_text("untracked\n")
    with checked_out(repo, "HEAD") as base:
        assert (base.root / "step.txt").read_text() == "head\n"
        assert not (base.root / "new.txt").exists()
    # The head is as it was, changes and all.
    assert (repo / "step.txt").read_text() == "uncommitted\n"
    assert (repo / "new.txt").read_text() == "untracked\n"


def test_an_unknown_ref_says_how_to_name_one(repo: Path) -> None:
    with pytest.raises(BaseRefError) as raised:
        check_base(repo, "origin/main")
    message = str(raised.value)
    assert message.startswith("--base origin/main: no such commit in this repository")
    assert "e.g. --base origin/main or --base HEAD~1" in message
    assert "\n" not in message


def test_an_option_is_not_taken_for_a_ref(repo: Path) -> None:
    with pytest.raises(BaseRefError, match=r"^--base '--output=x': not a git ref; "):
        check_base(repo, "--output=x")


def test_a_shallow_clone_without_the_base_says_fetch_depth_0(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD~1")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    with pytest.raises(BaseRefError) as raised:
        check_base(clone, first)
    message = str(raised.value)
    assert message.startswith(f"--base {first}: no such commit here; the clone is shallow")
    assert "`fetch-depth: 0`" in message
    assert "`git fetch --unshallow`" in message


def test_a_folder_that_is_not_a_git_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tmp_path may lie inside some repository of the machine's; git must not look above it.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with pytest.raises(BaseRefError) as raised:
        check_base(tmp_path, "HEAD~1")
    message = str(raised.value)
    assert message.startswith(f"--base HEAD~1: {tmp_path} is not in a git repository (")
    assert message.endswith("run the gate in a git checkout, or drop --base")


def test_git_missing_is_one_line(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin"))
    with pytest.raises(BaseRefError, match=r"^--base: git is not installed; install git"):
        check_base(repo, "HEAD~1")


def test_a_hung_git_is_stopped_and_never_asked_for_a_password(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "prompt"
    fake = bin_dir / "git"
    fake.write_text(f'#!/bin/sh\nprintf "%s" "$GIT_TERMINAL_PROMPT" > {seen}\nexec sleep 30\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(worktree, "GIT_TIMEOUT_S", 0.5)
    with pytest.raises(BaseRefError) as raised:
        check_base(repo, "HEAD~1")
    assert str(raised.value).startswith(
        "--base: `git rev-parse --show-toplevel --show-prefix` did not finish in 0.5 s; "
    )
    assert seen.read_text() == "0"


def test_a_failing_worktree_add_gives_gits_own_line(repo: Path) -> None:
    # A broken object store: the commit resolves, the checkout cannot read its blobs.
    blob = git(repo, "rev-parse", "old:step.txt")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(BaseRefError) as raised, checked_out(repo, "old"):
        pass
    message = str(raised.value)
    assert message.startswith("--base old: git could not check it out (")
    assert "\n" not in message
    assert worktrees(repo) == []


# --- through the real CLI ------------------------------------------------------------------------


def test_run_with_an_unknown_base_exits_2_before_anything_runs(repo: Path) -> None:
    make_repo(repo, {"mod.py": STEPS + TOUCH, "policies/p.yaml": policy("touch_and_step")})
    run = run_gate(repo, "run", "--base", "nope", "--json", "reports/map.json")
    assert run.returncode == ExitCode.USAGE, run
    assert run.stderr.splitlines() == [
        "error: --base nope: no such commit in this repository; name a branch, tag or commit "
        "that exists here, e.g. --base origin/main or --base HEAD~1"
    ]
    assert not (repo / "step-ran").exists()
    # Like an unusable baseline: nothing ran, but the reports say why.
    error = run.testcase("base").find("error")
    assert error is not None, run
    assert "--base nope: no such commit in this repository" in error.get("message", "")
    document = json.loads((repo / "reports" / "map.json").read_text())
    (region,) = document["suites"][0]["regions"]
    assert (region["name"], region["error"]["kind"]) == ("base", "base")


def test_run_with_a_good_base_goes_on_to_run(repo: Path) -> None:
    make_repo(repo, {"mod.py": STEPS + TOUCH, "policies/p.yaml": policy("touch_and_step")})
    run = run_gate(repo, "run", "--base", "HEAD~1")
    assert run.returncode == ExitCode.OK, run
    assert (repo / "step-ran").exists()


def test_a_base_in_a_fresh_folder_says_the_compilation_cache_cannot_serve_it(
    repo: Path, tmp_path: Path
) -> None:
    make_repo(repo, {"mod.py": STEPS + TOUCH, "policies/p.yaml": policy("touch_and_step")})
    cache = {CACHE_DIR: str(tmp_path / "cache")}
    held = worktree._stable_folder(repo)  # another run of this checkout holds its folder
    assert not isinstance(held, str), held
    try:
        busy = run_gate(repo, "run", "--base", "HEAD~1", env=cache)
    finally:
        os.close(held[1])
    assert busy.returncode == ExitCode.OK, busy
    said = "note: the base is checked out in a fresh folder, so JAX_COMPILATION_CACHE_DIR"
    (note,) = [line for line in busy.stdout.splitlines() if line.startswith(said)]
    assert note.endswith(
        f"cannot serve its programs this run: another run of this checkout is using "
        f"{held[0]}; run one --base at a time"
    ), note
    free = run_gate(repo, "run", "--base", "HEAD~1", env=cache)
    assert free.returncode == ExitCode.OK, free
    assert said not in free.stdout, free


TOUCH = """

def touch_and_step(x):
    open("step-ran", "w").close()
    return step(x)
"""


def test_the_changed_paths_hold_edits_staged_or_not_and_untracked_files(repo: Path) -> None:
    with checked_out(repo, "HEAD") as base:
        assert base.changed == ()
        assert not base.may_reach_regions
    (repo / "README.md").write_text("prose\n")  # untracked
    (repo / "sub" / "here.txt").write_text("edited\n")
    (repo / "step.txt").write_text("staged\n")
    git(repo, "add", "step.txt")
    (repo / "ignored.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("ignored.py\n")
    with checked_out(repo, "HEAD") as base:
        assert sorted(base.changed or ()) == [".gitignore", "README.md", "step.txt", "sub/here.txt"]
        assert base.may_reach_regions  # a data file may be read by a step


def test_only_a_change_to_prose_alone_is_known_to_reach_no_region(repo: Path) -> None:
    (repo / "README.md").write_text("prose\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.RST").write_text("prose\n")
    with checked_out(repo, "HEAD") as base:
        assert not base.may_reach_regions
    assert BaseTree("HEAD", "0" * 40, "0000000", repo, changed=("a.md",)).may_reach_regions is False
    assert BaseTree("HEAD", "0" * 40, "0000000", repo, changed=None).may_reach_regions  # unknown


def test_a_changed_module_a_region_names_is_known_before_it_runs(repo: Path) -> None:
    """`package_paths`: where ``pkg.sub.mod`` would be imported from, packages above it
    included, under each root; `changes_any`: whether the change's code reaches one of them
    (prose and a comment do not)."""
    roots = (repo / "src", repo)
    files = {p.relative_to(repo).as_posix() for p in package_paths(["pkg.sub.mod"], roots)}
    assert files >= {"pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py"}, files
    assert files >= {"src/pkg/__init__.py", "src/pkg/sub/mod.py", "src/pkg/sub/mod/__init__.py"}
    commit(repo, {"pkg/__init__.py": "", "pkg/sub/mod.py": "X = 1\n", "doc.md": "a\n"}, "pkg")
    (repo / "doc.md").write_text("b\n")
    (repo / "pkg" / "sub" / "mod.py").write_text("X = 1  # a comment\n")
    with checked_out(repo, "HEAD") as base:
        assert not base.changes_any(package_paths(["pkg.sub.mod"], roots))
    (repo / "pkg" / "__init__.py").write_text("Y = 2\n")  # a package above it
    with checked_out(repo, "HEAD") as base:
        assert base.changes_any(package_paths(["pkg.sub.mod"], roots))
        assert not base.changes_any(package_paths(["other"], roots))
    assert not BaseTree("HEAD", "0" * 40, "0000000", repo, changed=None).changes_any([repo / "a"])
