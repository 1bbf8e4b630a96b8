"""Reading the gate's own versioned JSON files (baseline, JSON report) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
