"""The gate's own files, written atomically: a reader sees the old file or the whole new one."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


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
