"""``transfer-gate schema``: print the policy's JSON Schema, for editors and other tools."""

from __future__ import annotations

import sys
from importlib import resources

from gate.cli.exit_codes import ExitCode


def schema_command() -> ExitCode:
    """The schema exactly as shipped in the package (``gate/policy/policy.schema.json``)."""
    text = resources.files("gate.policy").joinpath("policy.schema.json").read_text(encoding="utf-8")
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return ExitCode.OK
