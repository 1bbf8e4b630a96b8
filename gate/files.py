"""The gate's own files: written atomically, and kept inside the repository; and where a
repository's policy files are.

Atomically: a reader sees the old file or the whole new one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

# Where a repository keeps its policies, unless a command names other files or folders.
DEFAULT_POLICIES = "policies"
POLICY_SUFFIXES = (".yaml", ".yml")


def policy_files_in(folder: Path) -> Iterator[Path]:
    """The policy files under ``folder``, at any depth: its ``*.yaml`` and ``*.yml`` files,
    hidden folders (``.git``, a ``.venv``'s packages) left out. In the order found."""
    for path in folder.rglob("*"):
        if (
            path.suffix in POLICY_SUFFIXES
            and not any(part.startswith(".") for part in path.relative_to(folder).parts)
            and path.is_file()
        ):
            yield path


def write_text_atomically(path: Path, text: str) -> None:
    """`write_bytes_atomically` of ``text`` in UTF-8."""
    write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one.

    Parent folders are created. The bytes go to a temporary file in the same folder, are
    fsynced, then renamed over ``path``, and the folder is fsynced so the rename lasts.
    The file is created with mode 0o666 less the umask, like any other output file (not
    the 0o600 of ``tempfile``: an upload step running as another user must read a report).
    Raises OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of our own, so O_EXCL guards against clashes and the mode goes through the umask.
    temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows cannot open a
    # folder), and the file is already complete.
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


# What `way_out` says of a path that is outside as written, not through a symlink.
OUTSIDE_AS_WRITTEN = "lies outside the repository"


def way_out(path: Path, root: Path) -> str | None:
    """How ``path`` leads out of the repository at ``root``, in words; None when it stays in.

    ``"lies outside the repository"`` for a path that is outside as written (absolute, or
    through ``..``); ``"leads out of the repository through the symlink reports ->
    /elsewhere"`` for one that is
    inside as written but not once its symlinks are followed. A path that does not exist yet
    is judged by the part of it that does.
    """
    root = Path(os.path.abspath(root))
    written = Path(os.path.normpath(root / path))
    if not written.is_relative_to(root):
        return OUTSIDE_AS_WRITTEN
    real_root = Path(os.path.realpath(root))
    if Path(os.path.realpath(written)).is_relative_to(real_root):
        return None
    # The first symlink on the way that leads out: the one to name in the fix.
    step = root
    for part in written.relative_to(root).parts:
        step = step / part
        if step.is_symlink() and not Path(os.path.realpath(step)).is_relative_to(real_root):
            link = f"{step.relative_to(root).as_posix()} -> {os.readlink(step)}"
            return f"leads out of the repository through the symlink {link}"
    return "leads out of the repository through a symlink"
