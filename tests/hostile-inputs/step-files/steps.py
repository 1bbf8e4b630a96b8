"""A region's code that reaches for the GitHub Actions step's own files (issue 54): it writes to
every one it is told of, and records what it was told in seen.json beside it."""

import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp

NAMES = ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")


def _reach() -> None:
    seen = {name: os.environ.get(name) for name in NAMES}
    for path in filter(None, seen.values()):
        with open(path, "a", encoding="utf-8") as file:
            file.write("planted=1\n")
    Path(__file__).with_name("seen.json").write_text(json.dumps(seen), encoding="utf-8")


@jax.jit
def add_one(x):
    return x + 1.0


def setup():
    _reach()
    return (jnp.ones((8, 4), jnp.float32),)


def leaky(x):
    _reach()
    return add_one(x)
