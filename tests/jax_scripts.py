"""Running JAX scenarios in a fresh interpreter, on a throwaway "user repo".

Each scenario gets its own process: a fresh jax (no traced or compiled
function left over from another test), and room for settings that must
precede ``import jax`` (``XLA_FLAGS`` for several CPU devices,
``JAX_PLATFORMS``).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from processes import run

ROOT = Path(__file__).resolve().parent.parent
RESULT = "RESULT:"


def line_of(text: str, marker: str) -> int:
    """The 1-based line of ``text`` (dedented as written) that holds ``marker``."""
    lines = textwrap.dedent(text).splitlines()
    found = [n for n, line in enumerate(lines, start=1) if marker in line]
    assert len(found) == 1, f"marker {marker!r} found on lines {found}"
    return found[0]


def run_script(
    repo: Path,
    files: dict[str, str],
    script: str,
    env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
) -> Any:
    """Write ``files`` under ``repo``, run ``script`` there, return what it passed to ``emit``.

    The script runs with the gate importable and ``repo`` as its working
    directory; it calls ``emit(value)`` (provided) once with a JSON-able value.
    """
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    prelude = (
        "import json as _json, sys as _sys\n"
        f"_sys.path[:0] = [{str(ROOT)!r}, {str(repo)!r}]\n"
        f"def emit(value):\n    print({RESULT!r} + _json.dumps(value), flush=True)\n"
    )
    driver = repo / "_driver.py"
    driver.write_text(prelude + textwrap.dedent(script))
    environ = {k: v for k, v in os.environ.items() if k not in drop_env}
    environ.update(env or {})
    done = run([sys.executable, driver], cwd=repo, env=environ, timeout=240)
    shown = f"exit {done.returncode}\n--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
    assert done.returncode == 0, shown
    results = [line[len(RESULT) :] for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert len(results) == 1, shown
    return json.loads(results[0])
