"""The accelerator job's sandbox (.github/actions/sandbox, issue 54): what each container it
starts sees, and what comes back from it to the runner's host.

The development machines and CI have no Docker engine, so `docker` is a stand-in
(tests/fake_docker.py) that logs each call and runs the container's command here, with the
mounts it was given read as their sources. The script itself, the job's Python environment and
the gate run for real; what the repository's code could leave behind is planted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import TESTS, validate_junit
from git_helpers import commit, init
from processes import run as run_process
from result_samples import policy
from test_history_workflow import STEPS  # the same one-step repository

from gate.cli.exit_codes import ExitCode

ROOT = TESTS.parent
ACTION = ROOT / ".github" / "actions" / "sandbox"
SCRIPT = ACTION / "sandbox"
IMAGE = "ghcr.io/owner/jax-transfer-gate@sha256:" + "0123456789abcdef" * 4
POLICY = policy("step")
# What the host's environment holds that no container may see.
HOST_ONLY = {
    "GITHUB_TOKEN": "ghs_host",
    "ACTIONS_RUNTIME_TOKEN": "runtime",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc",
    "RUNNER_NAME": "gpu0",
}
SECRET = "the runner's admin token"
TIMEOUT_S = 240  # a run of the real gate, JAX's start included


def run(argv: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_process(argv, timeout=TIMEOUT_S, **kwargs)


@dataclass
class Host:
    """A runner's host: its workspace, RUNNER_TEMP, the step's files and the docker log."""

    tmp: Path
    workspace: Path
    temp: Path
    env: dict[str, str]

    @property
    def root(self) -> Path:
        return self.temp / "transfer-gate-sandbox"

    def calls(self) -> list[list[str]]:
        log = self.tmp / "docker.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def runs(self) -> list[list[str]]:
        return [argv for argv in self.calls() if argv[:1] == ["run"]]

    def file(self, name: str) -> str:
        return Path(self.env[name]).read_text()

    def sandbox(
        self, *args: str, env: Mapping[str, str] | None = None, script: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = script or self.root / "bin" / "sandbox"
        return run(["bash", command, *args], cwd=self.workspace, env={**self.env, **(env or {})})

    def gate(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`transfer-gate ARGS` as a later step runs it: the one on PATH."""
        path = f"{self.file('GITHUB_PATH').strip()}{os.pathsep}{self.env['PATH']}"
        return run(
            ["transfer-gate", *args],
            cwd=self.workspace,
            env={**self.env, "PATH": path, **(env or {})},
        )


def shown(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


@pytest.fixture
def host(tmp_path: Path) -> Host:
    workspace = init(tmp_path / "workspace")
    commit(workspace, {"mod.py": STEPS, "policies/p.yaml": POLICY}, "first")
    # The gate's own checkout, whose action the host runs: never the container's.
    (workspace / ".transfer-gate").mkdir()
    (workspace / ".transfer-gate" / "action.yml").write_text("the gate's\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{TESTS / "fake_docker.py"}" "$@"\n')
    docker.chmod(0o755)
    files = {
        name: tmp_path / name.lower()
        for name in ("GITHUB_PATH", "GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")
    }
    for path in files.values():
        path.write_text("")
    image_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "RUNNER_TEMP": str(tmp_path / "runner-temp"),
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": "f" * 40,
        "GITHUB_REPOSITORY": "octo/proj",
        **{name: str(path) for name, path in files.items()},
        **HOST_ONLY,
        "FAKE_DOCKER_LOG": str(tmp_path / "docker.log"),
        "FAKE_DOCKER_VOLUMES": str(tmp_path / "volumes"),
        "FAKE_DOCKER_IMAGE_ENV": json.dumps(image_env),
    }
    (tmp_path / "runner-temp").mkdir()
    return Host(tmp_path, workspace, tmp_path / "runner-temp", env)


SETTINGS = {
    "SANDBOX_IMAGE": IMAGE,
    "SANDBOX_OPTIONS": "--gpus all",
    "SANDBOX_NETWORK": "none",
    "SANDBOX_CACHE": "transfer-gate-jax-cache-pull-requests",
}


def set_up(host: Host, **settings: str) -> subprocess.CompletedProcess[str]:
    return host.sandbox("setup", env={**SETTINGS, **settings}, script=SCRIPT)


def options(argv: list[str]) -> dict[str, list[str]]:
    """The options of one logged `docker run`, each with its values; the image and command out."""
    found: dict[str, list[str]] = {}
    i = 1
    while argv[i].startswith("--"):
        if argv[i] in ("--rm", "--init", "--privileged"):
            found.setdefault(argv[i], []).append("")
            i += 1
        else:
            found.setdefault(argv[i], []).append(argv[i + 1])
            i += 2
    return found


def command(argv: list[str]) -> list[str]:
    return argv[argv.index(IMAGE) + 1 :]


def mounts(argv: list[str]) -> dict[str, str]:
    return {
        dict(f.partition("=")[::2] for f in spec.split(","))["target"]: spec
        for spec in options(argv)["--mount"]
    }


# --- what a container sees ----------------------------------------------------------------------


def test_the_real_gate_runs_in_the_sandbox_and_its_reports_come_back(host: Host) -> None:
    done = set_up(host)
    assert done.returncode == 0, shown(done)
    assert host.file("GITHUB_PATH") == f"{host.root / 'bin'}\n"
    assert host.file("GITHUB_ENV") == f"TRANSFER_GATE_SANDBOX={host.root}\n"
    # The caller's install, in the job's own environment, which comes first on PATH.
    done = host.sandbox("install", "python -c 'import sys; print(sys.prefix)' > prefix.txt")
    assert done.returncode == 0, shown(done)
    assert (host.root / "repo" / "prefix.txt").read_text().strip() == str(host.root / "venv")
    assert not (host.workspace / "prefix.txt").exists()  # the copy's, never the workspace's
    done = host.gate(
        "run", "--junit", "reports/transfer-gate.xml", "--json", "reports/transfer-gate.json"
    )
    assert done.returncode == ExitCode.OK, shown(done)
    validate_junit(host.workspace / "reports" / "transfer-gate.xml")
    report = json.loads((host.workspace / "reports" / "transfer-gate.json").read_text())
    assert report["run"]["commit"] == commit_of(host.workspace)
    assert "p.step" in host.file("GITHUB_STEP_SUMMARY")  # the gate's summary, brought back
    assert host.file("GITHUB_OUTPUT") == ""


def commit_of(repo: Path) -> str:
    return run(["git", "rev-parse", "HEAD"], cwd=repo).stdout.strip()


def test_each_container_runs_without_the_socket_root_the_network_or_the_hosts_secrets(
    host: Host,
) -> None:
    assert set_up(host).returncode == 0
    assert host.sandbox("install", "true").returncode == 0
    assert host.gate("doctor").returncode == 0
    make_venv, install, doctor = host.runs()
    for argv in (make_venv, install, doctor):
        found = options(argv)
        assert "docker.sock" not in json.dumps(argv)
        assert found["--user"] == [f"{os.getuid()}:{os.getgid()}"]  # the runner's, not root
        assert found["--cap-drop"] == ["ALL"]
        assert found["--security-opt"] == ["no-new-privileges"]
        assert "--rm" in found
        assert "--init" in found  # signals reach the command
        # Only the sandbox's own folders and the scope's cache: never the workspace.
        assert sorted(mounts(argv)) == [
            "/cache/jax", "/repo", "/sandbox/bin", "/sandbox/home", "/sandbox/out", "/sandbox/venv",
        ]  # fmt: skip
        assert mounts(argv)["/repo"] == f"type=bind,source={host.root}/repo,target=/repo"
        assert mounts(argv)["/sandbox/bin"].endswith(",readonly")
        assert mounts(argv)["/cache/jax"] == (
            "type=volume,source=transfer-gate-jax-cache-pull-requests,target=/cache/jax"
        )
        passed = dict(e.partition("=")[::2] for e in found["--env"])
        assert sorted(passed) == [
            "GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_STEP_SUMMARY", "HOME",
            "JAX_COMPILATION_CACHE_DIR",
        ]  # fmt: skip
        assert passed["GITHUB_STEP_SUMMARY"] == "/sandbox/out/summary.md"
        assert (found["--workdir"], found["--entrypoint"]) == (["/repo"], [""])
    # The accelerator for the gate only; the network for the install only.
    assert "--gpus" not in options(make_venv)
    assert "--gpus" not in options(install)
    assert options(doctor)["--gpus"] == ["all"]
    assert options(make_venv)["--network"] == ["none"]
    assert "--network" not in options(install)  # docker's default: pip needs the network
    assert options(doctor)["--network"] == ["none"]
    # The job's environment: made, then installed into, then only read.
    assert not mounts(make_venv)["/sandbox/venv"].endswith(",readonly")
    assert not mounts(install)["/sandbox/venv"].endswith(",readonly")
    assert mounts(doctor)["/sandbox/venv"].endswith(",readonly")
    assert command(make_venv) == ["python3", "/sandbox/bin/make_venv.py", "/sandbox/venv"]
    assert command(doctor) == ["/sandbox/venv/bin/transfer-gate", "doctor"]


def test_the_checkout_is_copied_without_the_gates_own_and_the_workspace_keeps_no_report(
    host: Host,
) -> None:
    # A report the repository commits is never taken for one of this run's.
    (host.workspace / "reports").mkdir()
    (host.workspace / "reports" / "transfer-gate.xml").write_text("<testsuites/>")
    assert set_up(host).returncode == 0
    copied = host.root / "repo"
    assert (copied / ".git").is_dir()  # `--base` needs the history
    assert (copied / "policies" / "p.yaml").is_file()
    assert not (copied / ".transfer-gate").exists()
    assert not (host.workspace / "reports").exists()


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"SANDBOX_IMAGE": "ghcr.io/owner/jax-transfer-gate:latest"}, "input 'image'"),
        ({"SANDBOX_NETWORK": "bridge"}, "input 'network'"),
        ({"SANDBOX_CACHE": "x:/etc"}, "input 'cache'"),
        ({"SANDBOX_CACHE": "/var/cache/../../etc"}, "input 'cache'"),
        # Nothing but the accelerator's options reaches `docker run`: never the socket.
        ({"SANDBOX_OPTIONS": "-v /var/run/docker.sock:/var/run/docker.sock"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--gpus all --volume=/:/host"}, "input 'options'"),
        (
            {"SANDBOX_OPTIONS": "--mount type=bind,source=/var/run/docker.sock,target=/s"},
            "input 'options'",
        ),
        ({"SANDBOX_OPTIONS": "--device /var/run/docker.sock"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--device=/run/docker.sock"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--gpus all --user root"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--network host"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--cap-add SYS_ADMIN"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--gpus all,/:/host"}, "input 'options'"),
        ({"SANDBOX_OPTIONS": "--gpus all\n-v /:/host"}, "input 'options'"),
    ],
)
def test_a_bad_setting_is_one_error_and_starts_no_container(
    host: Host, settings: dict[str, str], names: str
) -> None:
    done = set_up(host, **settings)
    assert done.returncode == 1, shown(done)
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"::error title=transfer-gate sandbox::{names}"), line
    assert host.calls() == []
    assert host.file("GITHUB_PATH") == ""


@pytest.mark.parametrize(
    ("given", "visible", "passed"),
    [
        ("--gpus all", None, ["--gpus", "all"]),
        # The runner's own GPUs, where the host names them (docs/runner-host.md's run-once.sh).
        ("--gpus all", "3", ["--gpus", '"device=3"']),
        ("--gpus all", "0,1", ["--gpus", '"device=0,1"']),
        ("--gpus all", "all", ["--gpus", "all"]),
        ("--gpus device=2", "3", ["--gpus", "device=2"]),
        ("--gpus=all", None, ["--gpus", "all"]),
        # A TPU, as Google runs its workloads in Docker: the chips, a larger /dev/shm.
        ("--privileged --shm-size 16g", None, ["--privileged", "--shm-size", "16g"]),
        (
            "--device /dev/accel0 --device /dev/vfio/0",
            None,
            ["--device", "/dev/accel0", "--device", "/dev/vfio/0"],
        ),
    ],
)
def test_the_gate_gets_the_accelerators_options_and_no_others(
    host: Host, given: str, visible: str | None, passed: list[str]
) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": visible} if visible else {}
    host.env.update(env)
    assert set_up(host, SANDBOX_OPTIONS=given).returncode == 0
    # Every gate command gets the same `docker run`: `--version` (0.3 s of CPU) serves as well
    # as `doctor` (1.4 s: JAX's backend), which the test above runs in the sandbox.
    assert host.gate("--version").returncode == 0
    argv = host.runs()[-1]
    start = argv.index("--security-opt") + 2
    assert argv[start : start + len(passed)] == passed
    assert argv[start + len(passed)] == "--network"


def test_a_host_path_cache_is_made_as_the_runners_and_bound(host: Host) -> None:
    cache = host.tmp / "cache" / "jax-main"
    assert set_up(host, SANDBOX_CACHE=str(cache)).returncode == 0
    assert cache.is_dir()
    assert mounts(host.runs()[0])["/cache/jax"] == f"type=bind,source={cache},target=/cache/jax"


def test_without_a_cache_nothing_is_mounted_there(host: Host) -> None:
    assert set_up(host, SANDBOX_CACHE="").returncode == 0
    argv = host.runs()[0]
    assert "/cache/jax" not in mounts(argv)
    assert not any(e.startswith("JAX_COMPILATION_CACHE_DIR=") for e in options(argv)["--env"])


# --- what comes back ----------------------------------------------------------------------------

# What the repository's code could leave in its copy for the host to read: links to the host's
# files where the reports go, a fifo, a link for the job summary. SECRET is written in: nothing
# of the host's environment reaches the container.
PLANTED = """
SECRET={secret}
set -e
cd "$REPO"
mkdir -p reports/transfer-gate-traces/host
printf '<testsuites/>\\n' > reports/transfer-gate-traces/trace.json.gz
ln -s "$SECRET" reports/transfer-gate.xml
ln -s "$SECRET" reports/transfer-gate-traces/stolen.json
ln -s / reports/transfer-gate-traces/root
mkfifo reports/transfer-gate-traces/pipe
printf 'odd\\n' > "reports/transfer-gate-traces/host/a
b"
ln -sf "$SECRET" "$OUT/summary.md"
exit 1
"""


def test_only_regular_files_come_back_from_the_container(host: Host) -> None:
    secret = host.tmp / "admin-token"
    secret.write_text(SECRET)
    planted = host.tmp / "planted.sh"
    planted.write_text(PLANTED.format(secret=secret))
    assert set_up(host).returncode == 0
    done = host.gate("run", env={"FAKE_DOCKER_INSTEAD": str(planted)})
    assert done.returncode == 1, shown(done)  # the command's own exit code
    reports = host.workspace / "reports"
    found = sorted(str(p.relative_to(reports)) for p in reports.rglob("*"))
    assert found == [
        "transfer-gate-traces",
        "transfer-gate-traces/host",
        "transfer-gate-traces/host/a\nb",
        "transfer-gate-traces/trace.json.gz",
    ]
    assert not any(p.is_symlink() for p in reports.rglob("*"))
    assert SECRET not in host.file("GITHUB_STEP_SUMMARY")


def test_a_link_the_repository_commits_where_the_reports_go_is_not_followed(host: Host) -> None:
    elsewhere = host.tmp / "elsewhere"
    elsewhere.mkdir()
    (host.workspace / "reports").symlink_to(elsewhere)
    assert set_up(host).returncode == 0
    assert not (host.workspace / "reports").is_symlink()  # gone from the workspace at once
    done = host.gate("run", "--junit", "reports/transfer-gate.xml")
    # The gate refuses it in the copy; the host brings back nothing through it either.
    assert done.returncode == ExitCode.USAGE, shown(done)
    assert "leads out of the repository through the symlink reports" in done.stderr
    assert done.stdout == (
        "::warning title=transfer-gate sandbox::reports is a link in the sandbox, so it was not "
        "brought back\n"
    )
    assert list(elsewhere.iterdir()) == []
    assert not (host.workspace / "reports").exists()


def test_a_file_brought_back_comes_as_a_regular_file_or_not_at_all(host: Host) -> None:
    assert set_up(host).returncode == 0
    (host.root / "repo" / "policies" / "baseline.json").write_text("{}")
    done = host.sandbox("bring-back", "policies/baseline.json")
    assert done.returncode == 0, shown(done)
    assert (host.workspace / "policies" / "baseline.json").read_text() == "{}"
    # A link in the copy: not followed, and the workspace's file is gone rather than stale.
    secret = host.tmp / "admin-token"
    secret.write_text(SECRET)
    (host.root / "repo" / "policies" / "baseline.json").unlink()
    (host.root / "repo" / "policies" / "baseline.json").symlink_to(secret)
    done = host.sandbox("bring-back", "policies/baseline.json")
    assert done.returncode == 0, shown(done)
    assert done.stdout == (
        "::warning title=transfer-gate sandbox::policies/baseline.json is a link in the "
        "sandbox, so it was not brought back\n"
    )
    assert not (host.workspace / "policies" / "baseline.json").exists()


@pytest.mark.parametrize("path", ["../outside.json", "/etc/passwd", "policies/./b.json", ""])
def test_bring_back_takes_only_a_path_in_the_repository(host: Host, path: str) -> None:
    assert set_up(host).returncode == 0
    done = host.sandbox("bring-back", path)
    assert done.returncode != 0, shown(done)
    assert not (host.tmp / "outside.json").exists()


def test_bring_back_never_writes_through_a_folder_the_repository_made_a_link(host: Host) -> None:
    elsewhere = host.tmp / "elsewhere"
    elsewhere.mkdir()
    (host.workspace / "baselines").symlink_to(elsewhere)
    assert set_up(host).returncode == 0
    (host.root / "repo" / "baselines").unlink()
    (host.root / "repo" / "baselines").mkdir()
    (host.root / "repo" / "baselines" / "b.json").write_text("{}")
    done = host.sandbox("bring-back", "baselines/b.json")
    assert done.returncode == 1, shown(done)
    assert done.stdout.startswith(
        "::error title=transfer-gate sandbox::cannot bring baselines/b.json back from the "
        "sandbox: a folder on its way in the workspace (baselines) is a link"
    )
    assert list(elsewhere.iterdir()) == []


# --- the job around it ----------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_runners_cancelling_signal_reaches_the_container(
    host: Host, signum: signal.Signals
) -> None:
    # Unlike `docker exec` in a job container: docker passes TERM on to the container's command,
    # which stops its region and writes its reports (the gate's own handling).
    assert set_up(host).returncode == 0
    marker = host.tmp / "signal"
    path = f"{host.root / 'bin'}{os.pathsep}{host.env['PATH']}"
    env = {**host.env, "PATH": path, "FAKE_DOCKER_WAIT": str(marker)}
    gate = subprocess.Popen(
        ["transfer-gate", "run"], cwd=host.workspace, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text() == "started"):
            assert time.monotonic() < deadline, "the container never started"
            time.sleep(0.05)
        gate.send_signal(signum)
        assert gate.wait(timeout=30) == 128 + signal.SIGTERM  # the container's own exit
    finally:
        if gate.poll() is None:
            os.killpg(gate.pid, signal.SIGKILL)
    assert marker.read_text() == "SIGTERM"


def test_a_command_before_the_setup_is_one_error(host: Host) -> None:
    done = host.sandbox("gate", "run", script=SCRIPT)
    assert done.returncode == 1, shown(done)
    assert done.stdout == (
        "::error title=transfer-gate sandbox::the sandbox is not set up: run the action "
        ".github/actions/sandbox first\n"
    )


def test_clean_removes_the_sandbox_whatever_the_container_left(host: Host) -> None:
    assert set_up(host).returncode == 0
    locked = host.root / "repo" / "locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(0)
    done = host.sandbox("clean")
    assert done.returncode == 0, shown(done)
    assert not host.root.exists()
    assert (host.workspace / "mod.py").is_file()


def test_the_job_environment_puts_the_callers_packages_before_the_images(tmp_path: Path) -> None:
    # make_venv.py, run by this environment's Python as the image's python3 would run it.
    target = tmp_path / "venv"
    done = run([sys.executable, ACTION / "make_venv.py", target])
    assert done.returncode == 0, shown(done)
    probe = "import gate, sys, sysconfig; print(sys.prefix, sysconfig.get_path('purelib'))"
    done = run([target / "bin" / "python", "-c", probe])
    assert done.returncode == 0, shown(done)  # the image's gate, seen from the job's
    prefix, own = done.stdout.split()
    assert prefix == str(target)  # where its pip installs
    image = sysconfig.get_path("purelib")
    paths = run([target / "bin" / "python", "-c", "import sys; print(*sys.path)"]).stdout.split()
    assert paths.index(own) < paths.index(image)
    # pip from the image, installing here; and the gate's command.
    done = run([target / "bin" / "pip", "--version"])
    assert done.returncode == 0, shown(done)
    done = run([target / "bin" / "transfer-gate", "--version"])
    assert done.returncode == 0, shown(done)


def test_the_action_runs_the_script_with_its_inputs_through_env_and_the_docs_name_them() -> None:
    action = yaml.safe_load((ACTION / "action.yml").read_text(encoding="utf-8"))
    (step,) = action["runs"]["steps"]
    assert step["run"] == '"$GITHUB_ACTION_PATH/sandbox" setup'
    assert step["env"] == {
        f"SANDBOX_{n.upper()}": f"${{{{ inputs.{n} }}}}" for n in action["inputs"]
    }
    assert os.access(SCRIPT, os.X_OK)  # run as it is, not through bash
    mode = run(["git", "ls-files", "-s", SCRIPT], cwd=ROOT).stdout.split()[0]
    assert mode == "100755"
    page = (ROOT / "docs" / "github-actions.md").read_text(encoding="utf-8")
    section = " ".join(page.split("### The sandbox", 1)[1].split("\n### ", 1)[0].split())
    for name in action["inputs"]:
        assert f"`{name}`" in section, name
