"""``transfer-gate schema``: the JSON Schema of a policy, the baseline, the report, the history.

The policy's is the file shipped in the package (``gate/policy/policy.schema.json``), which the
gate validates policies with; the baseline's and the report's are made from the msgspec
records the gate reads them back with, so they cannot drift from what the gate accepts.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from gate import printable
from gate.cli.exit_codes import ExitCode
from gate.files import write_text_atomically
from gate.report.history_series import History
from gate.report.json_report import Report
from gate.results.baseline_file import Baseline

_TITLES = {
    "baseline": ("transfer-gate baseline", Baseline),
    "report": ("transfer-gate JSON report", Report),
    "history": ("transfer-gate history", History),
}


def schema_text(document: str) -> str:
    """The schema of ``document`` (``policy``, ``baseline`` or ``report``), as JSON text."""
    if document == "policy":
        text = resources.files("gate.policy").joinpath("policy.schema.json").read_text("utf-8")
        return text if text.endswith("\n") else text + "\n"
    title, record = _TITLES[document]
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        **msgspec.json.schema(record),
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema_command(document: str = "policy", write: str | None = None) -> ExitCode:
    """Print the schema, or write it to ``write`` (atomically, its folders created)."""
    text = schema_text(document)
    if write is None:
        printable.write(text)
    else:
        write_text_atomically(Path(write), text)
        printable.say(f"wrote the {document} schema to {write}")
    return ExitCode.OK
