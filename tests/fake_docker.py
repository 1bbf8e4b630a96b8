"""A stand-in for ``docker run`` on machines without a Docker engine (tests/test_sandbox.py).

Each call is logged (one JSON argv a line, to FAKE_DOCKER_LOG). A ``run`` then runs its command
here, as the container would: every path under a mount's target read as the same path under its
source, in the working directory given, with the environment given (and the image's own,
FAKE_DOCKER_IMAGE_ENV, a JSON object), and exits with the command's code. Named volumes are
folders under FAKE_DOCKER_VOLUMES. FAKE_DOCKER_INSTEAD names a bash script that runs instead
of a `transfer-gate` command, with REPO and OUT the sources of /repo and /sandbox/out: what the
repository's code could leave behind. With FAKE_DOCKER_WAIT, a `transfer-gate` command waits
for a signal instead, and writes which one arrived to that file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# `docker run` options that take a value; every other option is a flag.
_VALUED = {
    "--user", "--cap-drop", "--security-opt", "--gpus", "--device", "--shm-size", "--network",
    "--mount", "--env", "--workdir", "--entrypoint",
}  # fmt: skip


def _parse(argv: list[str]) -> tuple[dict[str, list[str]], str, list[str]]:
    """The options (each a list of its values), the image and the command of ``run ARGS``."""
    options: dict[str, list[str]] = {}
    i = 0
    while argv[i].startswith("--"):
        name = argv[i]
        if name in _VALUED:
            options.setdefault(name, []).append(argv[i + 1])
            i += 2
        else:
            options.setdefault(name, []).append("")
            i += 1
    return options, argv[i], argv[i + 1 :]


def _mounts(options: dict[str, list[str]]) -> dict[str, str]:
    """Each mount's target and the folder on this machine that stands for it."""
    found = {}
    for spec in options.get("--mount", []):
        fields = dict(f.partition("=")[::2] for f in spec.split(","))
        source = fields["source"]
        if fields["type"] == "volume":
            source = str(Path(os.environ["FAKE_DOCKER_VOLUMES"], source))
            Path(source).mkdir(parents=True, exist_ok=True)
        found[fields["target"]] = source
    return found


def _translated(text: str, mounts: dict[str, str]) -> str:
    for target in sorted(mounts, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(target)}(?=/|\b|$)", mounts[target], text)
    return text


def _wait(marker: str) -> int:
    def caught(signum: int, _frame: object) -> None:
        Path(marker).write_text(signal.Signals(signum).name)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, caught)
    signal.signal(signal.SIGINT, caught)
    Path(marker).write_text("started")
    time.sleep(60)
    return 1


def main(argv: list[str]) -> int:
    with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    if argv[:1] != ["run"]:
        return 0
    options, _image, command = _parse(argv[1:])
    mounts = _mounts(options)
    env = json.loads(os.environ.get("FAKE_DOCKER_IMAGE_ENV", "{}"))
    for setting in options.get("--env", []):
        name, _, value = setting.partition("=")
        env[name] = _translated(value, mounts)
    workdir = _translated(options.get("--workdir", ["/"])[-1], mounts)
    if command and command[0].endswith("/transfer-gate"):
        if os.environ.get("FAKE_DOCKER_WAIT"):
            return _wait(os.environ["FAKE_DOCKER_WAIT"])
        if os.environ.get("FAKE_DOCKER_INSTEAD"):
            env |= {"REPO": mounts["/repo"], "OUT": mounts["/sandbox/out"]}
            command = ["bash", os.environ["FAKE_DOCKER_INSTEAD"], *command[1:]]
    command = [_translated(part, mounts) for part in command]
    return subprocess.run(command, cwd=workdir, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
