"""A platform warning every worker prints at start-up is shown once per run; the user's are not
touched (`gate.machine.platform_warnings`, `gate.isolation.worker_output.RepeatedWarnings`).

No test machine has a TPU, whose JAX prints "Transparent hugepages are not enabled" at
``import jax``: the line is planted as Python's `warnings` writes it, from JAX's own file.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from cli_helpers import FAST_DEFAULTS, make_repo, run_gate

from gate.isolation.worker_output import WorkerOutput
from gate.machine.platform_warnings import KNOWN_WARNINGS, known_warning

JAX_SPEC = importlib.util.find_spec("jax")
assert JAX_SPEC is not None
assert JAX_SPEC.origin is not None
JAX_SOURCE = Path(JAX_SPEC.origin).parent / "_src"
HUGEPAGES = (
    "Transparent hugepages are not enabled. TPU runtime startup and shutdown time should be "
    "significantly improved on TPU v5e and newer. If not already set, you may need to enable "
    'transparent hugepages in your VM image (sudo sh -c "echo always > '
    '/sys/kernel/mm/transparent_hugepage/enabled")'
)
# As a worker prints it on a TPU v5e VM: the warning, then its source line.
JAX_WARNS = f"{JAX_SOURCE}/cloud_tpu_init.py:88: UserWarning: {HUGEPAGES}\n  warnings.warn(\n"
# The same words, warned by the user's own code: never hidden.
USER_WARNS = f"/repo/steps.py:12: UserWarning: {HUGEPAGES}\n  warnings.warn(msg)\n"


class Recorder:
    def __init__(self) -> None:
        self.got: list[tuple[str, list[str]]] = []

    def stage(self, label: str, stage: str) -> None:
        pass

    def output(self, label: str, lines: Sequence[str]) -> None:
        self.got.append((label, list(lines)))

    def lines(self) -> list[str]:
        return [line for _, lines in self.got for line in lines]


def worker(watcher: Recorder, *chunks: str) -> WorkerOutput:
    """A worker's output pipe that ``chunks`` were written to, read to its end."""
    read_end, write_end = os.pipe()
    output = WorkerOutput(read_end, watcher)
    for chunk in chunks:
        os.write(write_end, chunk.encode())
    os.close(write_end)
    output.finish(timeout_s=10)
    return output


def test_every_known_warning_says_why_it_is_harmless() -> None:
    assert KNOWN_WARNINGS
    for warning in KNOWN_WARNINGS:
        assert warning.name, warning
        assert len(warning.why) > 40, warning


def test_the_hugepages_warning_is_known_only_from_jaxs_own_file() -> None:
    assert known_warning(JAX_WARNS.splitlines()[0]) is KNOWN_WARNINGS[0]
    assert known_warning(USER_WARNS.splitlines()[0]) is None
    assert known_warning(HUGEPAGES) is None  # printed by hand, not warned by JAX
    assert known_warning("  warnings.warn(") is None


def test_each_worker_repeats_it_and_the_run_shows_it_once() -> None:
    run = Recorder()
    first = worker(run, "start\n", JAX_WARNS, "ready\n")
    worker(run, JAX_WARNS + "ready again\n")
    worker(run, JAX_WARNS[:50], JAX_WARNS[50:] + "third\n")  # cut across two reads
    shown = run.lines()
    assert shown == [
        "start",
        JAX_WARNS.splitlines()[0],
        "(transfer-gate: every worker prints this transparent hugepages warning; it is shown "
        f"once per run: {KNOWN_WARNINGS[0].why})",
        "ready",
        "ready again",
        "third",
    ]
    # What a crashed worker's report quotes keeps every line the worker printed.
    assert first.lines_since(0) == ["start", *JAX_WARNS.splitlines(), "ready"]


def test_the_next_run_shows_it_again() -> None:
    for _ in range(2):
        run = Recorder()
        worker(run, JAX_WARNS)
        worker(run, JAX_WARNS)
        assert sum("Transparent hugepages" in line for line in run.lines()) == 1


def test_the_users_own_warning_with_the_same_words_is_shown_every_time() -> None:
    run = Recorder()
    worker(run, JAX_WARNS + USER_WARNS)
    worker(run, USER_WARNS + "  an indented line of the user's\n")
    assert run.lines()[2:] == [
        *USER_WARNS.splitlines(),
        *USER_WARNS.splitlines(),
        "  an indented line of the user's",
    ]


# Every worker of this run prints JAX's warning as it starts, the way JAX does on a TPU VM.
SITECUSTOMIZE = f"""
import warnings
warnings.warn_explicit({HUGEPAGES!r}, UserWarning, {str(JAX_SOURCE / "cloud_tpu_init.py")!r}, 88)
"""

STEPS = """
import os
import warnings

import jax.numpy as jnp


def inputs():
    return (jnp.ones(4),)


def crash(x):
    os._exit(3)  # the next region gets a fresh worker, which prints the warning again


def warns(x):
    warnings.warn("Transparent hugepages are not enabled. (the user's own words)")
    return x * 2
"""

POLICY = f"""
version: 1
{FAST_DEFAULTS.strip()}
regions:
  - {{name: crash, step: "steps:crash", setup: "steps:inputs", timing: off}}
  - {{name: warns, step: "steps:warns", setup: "steps:inputs", timing: off}}
"""


def test_a_run_whose_workers_all_print_it_logs_it_once(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    repo = make_repo(tmp_path / "repo", {"steps.py": STEPS, "policies/p.yaml": POLICY})
    run = run_gate(repo, "run", env={"PYTHONPATH": str(site)})
    assert run.returncode == 1, run  # the crash
    lines = run.stderr.splitlines()
    jax_copies = [line for line in lines if "cloud_tpu_init.py:88: UserWarning" in line]
    # The gate's own process prints its copy unprefixed; the two workers' are one line.
    assert len([line for line in jax_copies if line.startswith("[worker] ")]) == 1, run
    assert sum("shown once per run" in line for line in lines) == 1, run
    # The user's warning (as often as Python printed it: once per place), with its source line.
    users = [line for line in lines if "(the user's own words)" in line]
    assert users, run
    assert all(line.startswith("[p.warns] ") for line in users), run
    headers = [line for line in users if "steps.py:16: UserWarning: Transparent" in line]
    assert len(users) == 2 * len(headers), run
