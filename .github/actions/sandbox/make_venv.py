"""The job's Python environment in the sandbox, made by the image's own python3.

Run in the container as ``python3 /sandbox/bin/make_venv.py /sandbox/venv``. The environment
sees the image's packages (the gate, JAX) behind its own: the caller's ``install`` runs as the
runner's user, who cannot write the image's, so what it installs goes here, and what it pins
comes first, as in the hosted CPU job. ``pip`` in it is the image's pip, installing here.
"""

import importlib.util
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

# The image's site folders, added as site folders (their own .pth files read too), after this
# environment's own.
IMAGE_SITES = "_transfer_gate_image.pth"
LAUNCHER = """#!{python}
import sys

from gate.cli.main import main

sys.exit(main())
"""
# -P: run in the repository, `python -m pip` would take a pip/ folder of the repository's.
PIP = """#!/bin/sh
exec "{python}" -P -m pip "$@"
"""


def make(target: Path) -> int:
    if importlib.util.find_spec("gate.cli.main") is None:
        print(
            f"error: the image's {sys.executable} cannot import the gate: use the gate's image, "
            "or install jax-transfer-gate into your image's python3",
            file=sys.stderr,
        )
        return 1
    sites = dict.fromkeys(sysconfig.get_path(key) for key in ("purelib", "platlib"))
    venv.EnvBuilder(system_site_packages=True, symlinks=True).create(target)
    python = target / "bin" / "python"
    own = subprocess.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = "".join(f"import site; site.addsitedir({site!r})\n" for site in sites)
    Path(own, IMAGE_SITES).write_text(lines, encoding="utf-8")
    for name, text in (("transfer-gate", LAUNCHER), ("pip", PIP), ("pip3", PIP)):
        script = target / "bin" / name
        script.write_text(text.format(python=python), encoding="utf-8")
        script.chmod(0o755)
    return 0


if __name__ == "__main__":
    sys.exit(make(Path(sys.argv[1])))
