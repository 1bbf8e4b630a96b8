"""The reusable workflow's inputs that need no checkout, checked before any runner is taken.

`check_inputs` is the rule; the job "transfer-gate inputs" runs `inputs_step`, which hands the
accelerator job its image ('' for a TPU job on the runner itself), the sandbox's accelerator
options and network, and the runner labels, or fails with one ``::error`` line naming the
input and the fix (its output ``error`` carries that line to the verdict).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gate.ci.step import env, fail, one_line, set_outputs

# An image pinned by digest: a tag can change what runs on the runner.
_DIGEST = re.compile(r"[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}")
_CACHE = re.compile(r"/[A-Za-z0-9._/-]*|[A-Za-z0-9][A-Za-z0-9_.-]*")
_BASELINE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]*\.json")
_WHOLE = re.compile(r"[0-9]+")
# The reports need this long after the time budget, within timeout-minutes.
REPORT_S = 180
# The sandbox's container for each accelerator: the GPUs and no network (the gate needs none);
# for a TPU, Google's way to run a workload in Docker: privileged (the chips, /dev/accel* or
# /dev/vfio/*) on the host's network (libtpu reads the VM's metadata).
_SANDBOX = {"gpu": ("--gpus all", "none"), "tpu": ("--privileged --shm-size 16g", "host")}


class InputError(Exception):
    """One input is wrong; the message names it and the fix."""


@dataclass(frozen=True)
class Inputs:
    """The workflow's inputs as the job reads them (its step's ``env:``)."""

    accelerator: str = ""
    image: str = ""
    tpu_image: str = ""
    runs_on: str = ""
    accelerator_cache: str = ""
    record_baseline: str = ""
    timeout_minutes: str = ""
    time_budget: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Inputs:
        return cls(
            *(
                env(name, environ)
                for name in (
                    "ACCELERATOR",
                    "IMAGE",
                    "TPU_IMAGE",
                    "RUNS_ON",
                    "ACCELERATOR_CACHE",
                    "RECORD_BASELINE",
                    "TIMEOUT_MINUTES",
                    "TIME_BUDGET",
                )
            )
        )


def check_inputs(given: Inputs) -> dict[str, str]:
    """The accelerator job's ``image``, ``options``, ``network`` and ``runs-on`` ({} without
    an accelerator job). Raises `InputError` for the first wrong input."""
    _check_budget(given.timeout_minutes, given.time_budget)
    kind = given.accelerator
    if kind == "":
        if given.record_baseline:
            raise InputError(
                "input 'record-baseline': step times are recorded on the accelerator runner, and "
                "'accelerator' is empty; set accelerator: gpu or tpu, or leave record-baseline out."
            )
        return {}
    if kind == "gpu" and not _DIGEST.fullmatch(given.image):
        raise InputError(
            "input 'image': pin it by digest, like ghcr.io/owner/jax-transfer-gate@sha256:<64 hex "
            "digits> (docker buildx imagetools inspect IMAGE:TAG prints the digest); a tag can "
            f"change what runs on your GPU runner. Now: '{one_line(given.image)}'."
        )
    if kind == "tpu" and given.tpu_image and not _DIGEST.fullmatch(given.tpu_image):
        raise InputError(
            "input 'tpu-image': pin it by digest, like registry/name@sha256:<64 hex digits> "
            "(docker buildx imagetools inspect IMAGE:TAG prints the digest), or leave it empty to "
            f"run the job on the TPU VM itself. Now: '{one_line(given.tpu_image)}'."
        )
    if kind not in _SANDBOX:
        raise InputError(
            "input 'accelerator': give gpu or tpu, or leave it empty for the hosted CPU job "
            f"alone. Now: '{one_line(kind)}'."
        )
    if not _CACHE.fullmatch(given.accelerator_cache):
        raise InputError(
            "input 'accelerator-cache': give a Docker volume name or an absolute host path, like "
            "transfer-gate-jax-cache or /var/cache/jax. Now: "
            f"'{one_line(given.accelerator_cache)}'."
        )
    baseline = given.record_baseline
    if baseline and (not _BASELINE.fullmatch(baseline) or "/../" in f"/{baseline}/"):
        raise InputError(
            "input 'record-baseline': give a .json file relative to the repository root, like "
            f"policies/transfer-gate-baseline.json. Now: '{one_line(baseline)}'."
        )
    options, network = _SANDBOX[kind]
    return {
        "image": given.image if kind == "gpu" else given.tpu_image,
        "options": options,
        "network": network,
        "runs-on": _labels(kind, given.runs_on),
    }


def _check_budget(timeout_minutes: str, time_budget: str) -> None:
    if not _WHOLE.fullmatch(timeout_minutes) or int(timeout_minutes) < 4:
        raise InputError(
            "input 'timeout-minutes': give whole minutes, 4 or more (the reports need 3 after the "
            f"time budget). Now: '{one_line(timeout_minutes)}'."
        )
    most = int(timeout_minutes) * 60 - REPORT_S
    if not _WHOLE.fullmatch(time_budget) or not 1 <= int(time_budget) <= most:
        raise InputError(
            f"input 'time-budget': {one_line(time_budget)} s must leave the reports 3 minutes of "
            f"timeout-minutes {timeout_minutes}; set it between 1 and {most}."
        )


def _labels(kind: str, runs_on: str) -> str:
    """The runner's labels as one line of JSON: ``runs_on``'s, or the kind's default."""
    default = ["self-hosted", "linux", "x64", kind]
    if not runs_on:
        return json.dumps(default)
    try:
        labels = json.loads(runs_on)
    except ValueError:
        labels = None
    if not (isinstance(labels, list) and labels and all(isinstance(x, str) and x for x in labels)):
        raise InputError(
            f"input 'runs-on': give the {kind} runner's labels as a JSON list, like "
            f"'{json.dumps(default)}'. Now: '{one_line(runs_on)}'."
        )
    return json.dumps(labels)


def inputs_step(environ: Mapping[str, str]) -> int:
    """The step "Check the inputs": its outputs, or its one error and exit 1."""
    try:
        outputs = check_inputs(Inputs.from_env(environ))
    except InputError as exc:
        return fail(environ, "transfer-gate inputs", str(exc))
    set_outputs(environ, **outputs)
    return 0
