"""The gate's own files: writing atomically, reading its versioned JSON documents."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


class DocumentError(Exception):
    """The file is unreadable or not the document expected; one line naming the file and the fix."""


def read_json_document(
    path: Path, *, format: str, version: int, what: str, fix: str
) -> dict[str, Any]:
    """The document in ``path``, checked to be ``format`` at ``version``."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read the {what} ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); {fix}") from exc
    if not isinstance(document, dict) or document.get("format") != format:
        raise DocumentError(f"{path}: not a {what}; {fix}")
    if document.get("version") != version:
        raise DocumentError(
            f"{path}: {what} version {document.get('version')!r} is not {version}; {fix}"
        )
    return document
