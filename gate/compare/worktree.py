"""The base tree of ``run --base REF``: REF resolved, checked out in a temporary git worktree.

The head is the working tree as it is, committed or not: nothing here touches it. The
base is a detached `git worktree` in a temporary folder, removed on every way out
of `checked_out` (a normal return, an exception, KeyboardInterrupt; a cancelled run
returns normally, see `gate.isolation.cancellation`). A gate killed outright leaves its
entry behind; the next `checked_out` prunes it once its folder is gone.

The folder is the same one for every run of the same checkout (`_stable_folder`): JAX's
persistent compilation cache, where the user keeps one, keys each program by its files' paths
and lines (`gate.isolation.compile_cache`), so a base checked out where it was last time has
its unchanged programs read back from the cache, as the head's are, instead of compiled again
on every run. It lies in a folder of the user's own in the system's temporary folder, and is
taken under a lock: a second run of the same checkout at the same time, or a place that is
not safe to reuse, gets a fresh folder, as before.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import hexdigits

from gate.compare.footprint import same_code
from gate.results.line_map import IDENTITY, LineMap, parse_diff

# Every git call is local (no fetch): a minute is far more than any needs, and a
# hung git (a lock, a network filesystem) must not hang the gate.
GIT_TIMEOUT_S = 60
# Checking out a large base tree takes longer than the other calls.
CHECKOUT_TIMEOUT_S = 600
TEMP_PREFIX = "transfer-gate-base-"
# Files no step imports or reads, by their suffix (`BaseTree.may_reach_regions`).
PROSE_SUFFIXES = frozenset({".md", ".rst", ".adoc"})

_SHALLOW_FIX = (
    "the clone is shallow: fetch the full history (actions/checkout with `fetch-depth: 0`, "
    "or `git fetch --unshallow`)"
)


class BaseRefError(Exception):
    """``--base REF`` cannot be used; one line naming ``--base`` and the fix. Nothing was run."""


@dataclass(frozen=True)
class BaseTree:
    """The base, checked out: what REF named, which commit that is, and where it lies."""

    ref: str  # as the user gave it: "HEAD~1", "origin/main", a SHA
    sha: str  # the full commit SHA
    short_sha: str
    # The folder in the base checkout that corresponds to the head's repo_root (the
    # same subfolder of the git top level); it may not exist in the base.
    root: Path
    # Why the base lies in a fresh folder, not the checkout's usual one (`_stable_folder`):
    # a kept compilation cache then cannot serve its programs. "" where it lies there.
    fresh_because: str = ""
    # The git top levels: the head's checkout, and the base's worktree. A folder of the
    # head's repository that the base's code imports from (an editable install's, a
    # monorepo's shared folder) is taken at the same place in the base (`moved_paths`).
    head_top: Path | None = None
    top: Path | None = None
    # The paths (under the git top level) where the head's working tree differs from the base
    # commit, untracked files included; None when git could not say. Only a guess of what the
    # footprints will find (`may_reach_regions`): verdicts rest on the footprints alone.
    changed: tuple[str, ...] | None = None
    # Git's line map from the base to the working tree (`gate.results.line_map`): which
    # base line each head line is, the identity of every finding's line.
    lines: LineMap = field(default=IDENTITY, compare=False)

    @functools.cached_property  # read for every region; it parses the changed Python files
    def may_reach_regions(self) -> bool:
        """Whether the change may reach a region, as far as its paths tell before anything
        runs: false only when every changed path is prose (README.md, docs), which no step
        imports or reads, or Python whose comments or layout alone changed. It decides only
        when the base's worker starts: early, as the head's first worker starts, or when a
        region first needs it (`gate.compare.session`)."""
        if self.changed is None:
            return True
        return any(not self._only_words(path) for path in self.changed)

    @functools.cached_property
    def _code_changes(self) -> frozenset[str]:
        """The changed paths whose change may reach a region (`_only_words` says which not)."""
        return frozenset(p for p in self.changed or () if not self._only_words(p))

    def changes_any(self, files: Iterable[Path]) -> bool:
        """Whether the change's code reaches any of ``files`` (paths in the head's tree): a
        guess of what a region's footprint will find, from its paths alone, before it runs."""
        if self.head_top is None or not self._code_changes:
            return False
        for file in files:
            relative = os.path.relpath(file, self.head_top)
            if Path(relative).as_posix() in self._code_changes:
                return True
        return False

    def _only_words(self, path: str) -> bool:
        """Whether the change to ``path`` can change no region's run: prose, or a Python source
        whose code is the base's (a comment, a layout: `gate.compare.footprint.same_code`)."""
        if Path(path).suffix.lower() in PROSE_SUFFIXES:
            return True
        if self.head_top is None or self.top is None:
            return False
        return same_code(self.head_top / path, self.top / path)

    @property
    def footprint_top(self) -> Path | None:
        """The head's git top level, under which each head run records its region's footprint
        (`Job.footprint_top`); None where the tops are not known: none is recorded."""
        return self.head_top if self.top is not None else None

    @property
    def moved_paths(self) -> tuple[tuple[Path, Path], ...]:
        """``(head's top level, base's top level)``, for the base's worker: the folders a
        sys.path entry is taken from in the base instead; () when the tops are not known."""
        if self.head_top is None or self.top is None:
            return ()
        return ((self.head_top, self.top),)

    def describe(self) -> str:
        """``HEAD~1 (1a2b3c4)``; the SHA alone when the ref is one."""
        if set(self.ref.lower()) <= set(hexdigits) and self.sha.startswith(self.ref.lower()):
            return self.short_sha
        return f"{self.ref} ({self.short_sha})"


@dataclass(frozen=True)
class BaseRef:
    """A ``--base`` resolved: the commit it names, and where the head's checkout is."""

    top: Path  # the git top level of the head
    prefix: str  # repo_root below it, "" or "sub/dir/"
    sha: str
    short_sha: str


def check_base(repo_root: Path, ref: str) -> BaseRef:
    """The commit ``ref`` names in ``repo_root``'s repository, or BaseRefError.

    For a check before anything runs: it checks nothing out; `checked_out` takes its answer.
    """
    return _resolve(repo_root, ref)


@contextlib.contextmanager
def checked_out(repo_root: Path, ref: str, resolved: BaseRef | None = None) -> Iterator[BaseTree]:
    """The commit ``ref`` names, checked out in a temporary worktree for the ``with`` block
    (``resolved``: `check_base`'s answer for it, so that the ref is resolved once)."""
    resolved = _resolve(repo_root, ref) if resolved is None else resolved
    top = resolved.top
    with _base_folder(top) as (folder, fresh_because):
        try:
            # Entries whose folders are gone, as a killed gate leaves them (a stale folder in
            # the stable place was removed just now).
            _git(["worktree", "prune"], top, check=False)
            _add_worktree(top, folder, ref, resolved.sha)
            root = folder / resolved.prefix
            changed = _changed_paths(top, resolved.sha)
            lines = line_map(repo_root, resolved.sha)
            yield BaseTree(
                ref,
                resolved.sha,
                resolved.short_sha,
                root,
                fresh_because,
                top,
                folder,
                changed,
                lines,
            )
        finally:
            _remove_worktree(top, folder)


def line_map(repo_root: Path, sha: str) -> LineMap:
    """The line map from commit ``sha`` to the working tree, paths relative to ``repo_root``:
    the diff git shows a reviewer (renames found, no context lines), and the files git does
    not track yet, which are new."""
    diff = _git(
        [
            "-c",
            "core.quotePath=false",
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "-M",
            "-U0",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "--relative",
            sha,
            "--",
        ],
        repo_root,
    )
    others = _git(["ls-files", "--others", "--exclude-standard"], repo_root)
    return parse_diff(diff.stdout, tuple(others.stdout.splitlines()))


@contextlib.contextmanager
def _base_folder(top: Path) -> Iterator[tuple[Path, str]]:
    """An empty folder for the base's checkout: `_stable_folder`'s where it can be had, held
    for the ``with`` block, else a fresh temporary one, with why."""
    stable = _stable_folder(top)
    if isinstance(stable, str):
        yield Path(tempfile.mkdtemp(prefix=TEMP_PREFIX)), stable
        return
    folder, lock = stable
    try:
        yield folder, ""
    finally:
        # The lock file goes too, while still held: a run that opened it meanwhile finds, once
        # it holds it, that the path no longer names it (`_stable_folder`), and takes a fresh
        # folder. Nothing is left in the temporary folder but this user's own.
        with contextlib.suppress(OSError):
            os.unlink(_lock_path(folder))
        os.close(lock)


def _stable_folder(top: Path) -> tuple[Path, int] | str:
    """``<temp>/transfer-gate-<uid>/base-<hash of top>``, empty, and its lock's descriptor.

    Why not, where it cannot be had safely: no ``fcntl`` (not a POSIX system), a parent folder
    that is not this user's own and private (another user could have made it, or a link in
    its place), or a lock another run of this checkout holds (or held and let go of while
    this one opened it). A folder left there by a gate killed mid-run is stale once its lock
    is free, and is removed; git's entry for it, locked if the gate was killed while git
    checked it out, is taken over by `_add_worktree`.
    """
    try:
        import fcntl
    except ImportError:
        return "this system has no fcntl to lock it with"
    uid = os.getuid()
    home = Path(tempfile.gettempdir()) / f"transfer-gate-{uid}"
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(home, 0o700)
        mine = os.lstat(home)
    except OSError as exc:
        return f"{home} cannot be made ({exc.strerror}); set TMPDIR to a folder you can write"
    if not stat.S_ISDIR(mine.st_mode) or mine.st_uid != uid or mine.st_mode & 0o077:
        return f"{home} is not a folder of this user's alone (mode 0700); remove it"
    folder = home / ("base-" + hashlib.sha256(os.fsencode(top.resolve())).hexdigest()[:16])
    busy = f"another run of this checkout is using {folder}; run one --base at a time"
    lock_path = _lock_path(folder)
    try:
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        return f"{lock_path} cannot be opened ({exc.strerror}); remove it"
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, named = os.fstat(lock), None
        with contextlib.suppress(FileNotFoundError):
            named = os.stat(lock_path, follow_symlinks=False)
        if named is None or (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
            os.close(lock)  # let go of and removed by the run that held it
            return busy
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)
        os.mkdir(folder, 0o700)
    except BlockingIOError:
        os.close(lock)
        return busy
    except OSError as exc:
        os.close(lock)
        return f"{folder} cannot be cleared ({exc.strerror}); remove it"
    except BaseException:  # KeyboardInterrupt while a large leftover is removed
        os.close(lock)
        raise
    return folder, lock


def _lock_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


def _add_worktree(top: Path, folder: Path, ref: str, sha: str) -> None:
    # No hooks: a post-checkout hook of the user's has no business running in the gate.
    no_hooks = ["-c", "core.hooksPath=/dev/null"]
    # Forced twice: the stable folder's entry may outlive a gate killed while git checked it
    # out, missing and locked ("initializing"), which prune keeps and a plain add refuses.
    # The folder is empty and this run's alone (`_stable_folder`'s lock); the commit detached.
    done = _git(
        [
            *no_hooks,
            "worktree",
            "add",
            "--force",
            "--force",
            "--detach",
            "--quiet",
            str(folder),
            sha,
        ],
        top,
        timeout_s=CHECKOUT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise BaseRefError(
            f"--base {ref}: git could not check it out ({_first_line(done.stderr)}); "
            "fix what git says, or drop --base"
        )


def _changed_paths(top: Path, sha: str) -> tuple[str, ...] | None:
    """The paths where the working tree at ``top`` differs from commit ``sha`` (staged or
    not), and its untracked files git does not ignore; None when git fails at either."""
    try:
        diff = _git(["diff", "--name-only", "--no-renames", "-z", sha], top, check=False)
        untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], top, check=False)
    except BaseRefError:
        return None
    if diff.returncode != 0 or untracked.returncode != 0:
        return None
    return tuple(p for p in (diff.stdout + untracked.stdout).split("\0") if p)


def _remove_worktree(top: Path, folder: Path) -> None:
    """Remove the worktree, its folder and git's entry for it; never raises."""
    # Each step may fail (git gone, the folder half-written); the next one still runs,
    # and none of them hides the exception that ended the `with` block.
    with contextlib.suppress(BaseRefError):
        _git(["worktree", "remove", "--force", str(folder)], top, check=False)
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(BaseRefError):
        _git(["worktree", "prune"], top, check=False)


def _resolve(repo_root: Path, ref: str) -> BaseRef:
    if not ref or ref.startswith("-"):
        # git would read it as an option.
        raise BaseRefError(
            f"--base {ref!r}: not a git ref; name a branch, tag or commit, "
            "e.g. --base origin/main or --base HEAD~1"
        )
    if not repo_root.is_dir():
        raise BaseRefError(f"--base {ref}: no folder {repo_root}; run the gate in a git checkout")
    found = _git(["rev-parse", "--show-toplevel", "--show-prefix"], repo_root, check=False)
    if found.returncode != 0:
        raise BaseRefError(_not_a_repository(repo_root, ref, found.stderr))
    top, prefix = [*found.stdout.splitlines(), "", ""][:2]
    commit = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo_root, check=False)
    sha = commit.stdout.strip()
    if commit.returncode != 0 or not sha:
        shallow = _git(["rev-parse", "--is-shallow-repository"], repo_root, check=False)
        if shallow.stdout.strip() == "true":
            raise BaseRefError(f"--base {ref}: no such commit here; {_SHALLOW_FIX}")
        raise BaseRefError(
            f"--base {ref}: no such commit in this repository; name a branch, tag or commit "
            "that exists here, e.g. --base origin/main or --base HEAD~1"
        )
    short = _git(["rev-parse", "--short", sha], repo_root).stdout.strip() or sha[:7]
    return BaseRef(Path(top), prefix, sha, short)


def _not_a_repository(repo_root: Path, ref: str, stderr: str) -> str:
    said = _first_line(stderr)
    if "dubious ownership" in said:
        # Typical in a container job running as another user than the checkout's owner.
        return (
            f"--base {ref}: git refuses {repo_root}, which another user owns; "
            f"run `git config --global --add safe.directory {repo_root}` first"
        )
    return (
        f"--base {ref}: {repo_root} is not in a git repository ({said}); run the gate "
        "in a git checkout, or drop --base"
    )


def _git(
    args: Sequence[str], cwd: Path, *, timeout_s: float | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` in ``cwd``; BaseRefError when git is missing, hangs, or (``check``) fails."""
    limit = GIT_TIMEOUT_S if timeout_s is None else timeout_s
    # Never ask for credentials on a terminal nobody watches.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    command = " ".join(["git", *args])
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=limit,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:  # cwd is a folder (`_resolve`): git is what is missing
        raise BaseRefError(
            "--base: git is not installed; install git where the gate runs, or drop --base"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise BaseRefError(
            f"--base: `{command}` did not finish in {limit:g} s; check the repository "
            "(a stale .git/index.lock?), or drop --base"
        ) from exc
    if check and done.returncode != 0:
        raise BaseRefError(f"--base: `{command}` failed ({_first_line(done.stderr)})")
    return done


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no message"
