"""Every policy key's default, stated once: in the shipped schema's ``default`` annotations.

The schema is what editors show a user (a key's hover says its default), so it is where the
defaults are written; the model's records (`gate.policy.model`), the loader, ``transfer-gate
init`` and `gate.api` all take them from here, and none states a number of its own.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def shipped_schema() -> dict[str, Any]:
    """``policy.schema.json`` as shipped in the package (parsed once per process)."""
    text = resources.files("gate.policy").joinpath("policy.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def defaults() -> dict[str, Any]:
    """Each default, as the schema gives it (YAML's spelling: ``"fail"``, ``16``, ``1e-05``).

    A region key by its name (``warmup``, ``guard``); a key of a nested mapping by its path
    (``timing.rounds``, ``checks.rtol``).
    """
    found: dict[str, Any] = {}
    for name, definition in shipped_schema()["$defs"].items():
        if "default" in definition:
            found[name] = definition["default"]
        variants = [definition, *definition.get("oneOf", ())]
        for variant in variants:
            for key, node in variant.get("properties", {}).items():
                if "default" in node:
                    found[f"{name}.{key}"] = node["default"]
    return found


def default(key: str) -> Any:
    """The default of ``key`` (`defaults`); KeyError names a key the schema gives none."""
    return defaults()[key]
