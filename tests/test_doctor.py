"""``transfer-gate doctor``: what JAX sees, and ``--expect`` failing with the likely cause.

The GPU and TPU verdicts are checked on hand-built diagnoses, so the CPU
machines that run this suite cover every branch; the CLI tests run the real
command on the CPU.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import textwrap
import types
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import run_gate

from gate.cli.doctor import main_doctor
from gate.cli.exit_codes import DoctorExitCode
from gate.isolation.environment import prepare_environment
from gate.machine.diagnosis import Platform, cuda_version_text
from gate.machine.doctor import (
    DeviceGroup,
    Diagnosis,
    _cuda_versions,
    _cudnn,
    expectation_problem,
    format_diagnosis,
)
from gate.machine.settings import Setting, cache_setting, read_settings
from gate.machine.version_check import version_problems
from gate.package import docs_url

H200 = Diagnosis(
    python="3.12.3",
    system="Linux 6.8 x86_64",
    jax_version="0.10.2",
    jaxlib_version="0.10.2",
    plugins=(("jax-cuda12-plugin", "0.10.2"), ("jax-cuda12-pjrt", "0.10.2")),
    backend="gpu",
    devices=(DeviceGroup("gpu", "NVIDIA H200", 8, "9.0"),),
    backend_error=None,
    cuda=(("CUDA runtime", "12.8 (JAX built against 12.8)"), ("cuDNN", "9.8.0")),
    nvidia_device_files=True,
    tpu_device_files=False,
    environ={},
    settings=(Setting("JAX_PLATFORMS", None, "JAX takes the best backend"),),
    guard=(("jax_transfer_guard", "None"),),
    libcuda=True,
    installed=(("jax", "0.10.2"), ("jaxlib", "0.10.2")),
    jaxlib_requirement="jaxlib<=0.10.2,>=0.10.1",
)

CPU_ONLY = replace(
    H200,
    plugins=(),
    backend="cpu",
    devices=(DeviceGroup("cpu", "cpu", 1),),
    cuda=(),
    nvidia_device_files=False,
)


def test_a_gpu_machine_meets_expect_gpu() -> None:
    assert expectation_problem(H200, Platform.GPU) is None
    text = format_diagnosis(H200)
    assert "devices        NVIDIA H200 x8 (compute capability 9.0)" in text
    assert "CUDA runtime   12.8 (JAX built against 12.8)" in text
    assert "plugins        jax-cuda12-plugin 0.10.2, jax-cuda12-pjrt 0.10.2" in text
    assert "device-to-host" not in text  # the CPU note is for CPU runs only


def test_cpu_only_jaxlib_without_gpus_names_both_causes() -> None:
    problem = expectation_problem(CPU_ONLY, Platform.GPU)
    assert problem is not None
    first, *causes = problem.splitlines()
    assert first == "expected a GPU, but JAX runs on cpu (cpu x1)."
    assert causes[0].startswith("likely cause: a CPU-only jaxlib: no jax-cuda12-plugin")
    assert "--gpus all" in causes[1]
    assert len(causes) == 2


def test_plugin_without_gpus_blames_the_container() -> None:
    problem = expectation_problem(replace(CPU_ONLY, plugins=H200.plugins), Platform.GPU)
    assert problem is not None
    (cause,) = problem.splitlines()[1:]
    assert "no NVIDIA GPU in this container (no /dev/nvidia0): start it with --gpus all" in cause


def test_jax_platforms_cpu_is_named_first() -> None:
    diagnosis = replace(H200, backend="cpu", environ={"JAX_PLATFORMS": "cpu"})
    problem = expectation_problem(diagnosis, Platform.GPU)
    assert problem is not None
    assert problem.splitlines()[1] == (
        "likely cause: JAX_PLATFORMS=cpu keeps JAX off the GPU; unset it"
    )


def test_missing_compute_capability_is_a_cause() -> None:
    diagnosis = replace(
        H200,
        backend=None,
        devices=(),
        backend_error="RuntimeError: Unable to initialize backend 'cuda'",
        environ={"NVIDIA_DRIVER_CAPABILITIES": "utility"},
    )
    problem = expectation_problem(diagnosis, Platform.GPU)
    assert problem is not None
    assert problem.startswith(
        "expected a GPU, but JAX could not start a backend (RuntimeError: Unable to initialize"
    )
    assert "NVIDIA_DRIVER_CAPABILITIES=utility lacks 'compute'" in problem


def test_everything_in_place_but_no_gpu_points_at_the_driver() -> None:
    diagnosis = replace(H200, backend="cpu", devices=(DeviceGroup("cpu", "cpu", 1),))
    problem = expectation_problem(diagnosis, Platform.GPU)
    assert problem is not None
    assert "check nvidia-smi" in problem


def test_jax_s_own_reason_for_a_failed_backend_comes_first() -> None:
    why = "INTERNAL: no supported devices found for platform CUDA"
    diagnosis = replace(
        H200,
        backend="cpu",
        devices=(DeviceGroup("cpu", "cpu", 1),),
        backend_errors=(("cuda", why),),
    )
    problem = expectation_problem(diagnosis, Platform.GPU)
    assert problem is not None
    assert problem.splitlines()[1:] == [
        f"likely cause: JAX could not start its cuda backend: {why}"
    ]
    assert f"cuda failed    {why}" in format_diagnosis(diagnosis)


LIBTPU_MISSING = "INTERNAL: Failed to open libtpu.so"


def test_a_backend_nobody_installed_reads_as_not_installed() -> None:
    diagnosis = replace(CPU_ONLY, backend_errors=(("tpu", LIBTPU_MISSING),))
    text = format_diagnosis(diagnosis)
    assert "tpu failed" not in text
    assert LIBTPU_MISSING not in text
    assert "\ntpu            not installed\n" in text


@pytest.mark.parametrize(
    "change",
    [{"environ": {"JAX_PLATFORMS": "tpu,cpu"}}, {"plugins": (("libtpu", "0.0.20"),)}],
    ids=["jax-platforms-asks", "libtpu-installed"],
)
def test_a_backend_someone_wanted_still_shows_its_failure(change: dict[str, object]) -> None:
    diagnosis = replace(CPU_ONLY, backend_errors=(("tpu", LIBTPU_MISSING),), **change)
    assert f"tpu failed     {LIBTPU_MISSING}" in format_diagnosis(diagnosis)


def test_doctor_expect_tpu_shows_why_the_tpu_did_not_start() -> None:
    diagnosis = replace(CPU_ONLY, backend_errors=(("tpu", LIBTPU_MISSING),))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main_doctor("tpu", {}, diagnosis) == DoctorExitCode.FAILED
    assert f"tpu failed     {LIBTPU_MISSING}" in out.getvalue()
    assert f"JAX could not start its tpu backend: {LIBTPU_MISSING}" in err.getvalue()


def test_tpu_causes() -> None:
    problem = expectation_problem(CPU_ONLY, Platform.TPU)
    assert problem is not None
    assert "libtpu is not installed" in problem
    assert "not a TPU VM" in problem
    tpu = replace(CPU_ONLY, backend="tpu", devices=(DeviceGroup("tpu", "TPU v5 lite", 4),))
    assert expectation_problem(tpu, Platform.TPU) is None


def test_expect_cpu_on_a_gpu_machine() -> None:
    problem = expectation_problem(H200, Platform.CPU)
    assert problem is not None
    assert problem.startswith("expected a CPU, but JAX runs on gpu (NVIDIA H200 x8")
    assert "set JAX_PLATFORMS=cpu" in problem


def test_jax_that_does_not_import() -> None:
    broken = replace(
        CPU_ONLY,
        jax_version=None,
        jaxlib_version=None,
        backend=None,
        devices=(),
        backend_error="ModuleNotFoundError: No module named 'jax'",
    )
    problem = expectation_problem(broken, Platform.CPU)
    assert (
        problem
        == "expected a CPU, but jax does not import (ModuleNotFoundError: No module named 'jax')."
    )
    assert "jax            not importable" in format_diagnosis(broken)


@pytest.mark.parametrize(
    ("version", "text"), [(12080, "12.8"), (12020, "12.2"), (13000, "13.0"), (11080, "11.8")]
)
def test_cuda_versions_read_as_cuda_writes_them(version: int, text: str) -> None:
    assert cuda_version_text(version) == text


@pytest.mark.parametrize(
    ("version", "text"), [(90800, "9.8.0"), (91001, "9.10.1"), (8906, "8.9.6")]
)
def test_cudnn_versions_read_as_cudnn_writes_them(version: int, text: str) -> None:
    assert _cudnn(version) == text


def test_cuda_versions_come_from_the_plugins_versions_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jax._src.lib

    def missing() -> int:
        raise RuntimeError("libcudnn.so.9: cannot open shared object file")

    fake = types.SimpleNamespace(
        cuda_runtime_get_version=lambda: 12080,
        cuda_runtime_build_version=lambda: 12060,
        cuda_driver_get_version=lambda: 0,  # no driver loaded
        cudnn_get_version=missing,
        cudnn_build_version=lambda: 90800,
    )
    monkeypatch.setattr(jax._src.lib, "cuda_versions", fake)
    assert _cuda_versions() == (
        ("CUDA runtime", "12.8 (JAX built against 12.6)"),
        ("CUDA driver", "not found"),
        ("cuDNN", "not found (JAX built against 9.8.0)"),
    )
    monkeypatch.setattr(jax._src.lib, "cuda_versions", None)
    assert _cuda_versions() == ()


def test_main_reports_and_exits_by_the_expectation() -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main_doctor("gpu", {}, H200) == DoctorExitCode.OK
        assert main_doctor("gpu", {"GITHUB_ACTIONS": "true"}, CPU_ONLY) == DoctorExitCode.FAILED
    assert "ok: JAX runs on the expected GPU" in out.getvalue()
    assert "error: expected a GPU, but JAX runs on cpu" in err.getvalue()
    (command,) = [line for line in out.getvalue().splitlines() if line.startswith("::")]
    assert command.startswith("::error title=transfer-gate doctor::expected a GPU, but JAX")
    assert "%0Alikely cause: a CPU-only jaxlib" in command


# --- settings --------------------------------------------------------------


def settings_of(environ: dict[str, str]) -> dict[str, Setting]:
    gate_environ = dict(environ)
    prepare_environment(gate_environ)  # what `transfer-gate doctor` hands over
    return {s.name: s for s in read_settings(environ, None, None, gate_environ)}


def test_log_level_2_hides_the_guards_lines_but_not_from_the_gate() -> None:
    level = settings_of({"TF_CPP_MIN_LOG_LEVEL": "2"})["TF_CPP_MIN_LOG_LEVEL"]
    assert "every line of the guard's `log` and `log_explicit` levels is lost" in level.meaning
    assert "the gate runs with 1" in level.meaning
    unset = settings_of({})["TF_CPP_MIN_LOG_LEVEL"]
    assert unset.value is None
    assert "jax sets 1 when it is imported" in unset.meaning


def test_per_direction_guard_variables_are_flagged_as_ignored() -> None:
    settings = settings_of({"JAX_TRANSFER_GUARD_DEVICE_TO_HOST": "disallow"})
    ignored = settings["JAX_TRANSFER_GUARD_DEVICE_TO_HOST"]
    assert ignored.warning
    assert ignored.meaning.startswith("ignored: JAX resets the per-direction levels")


def test_compilation_cache_folder_is_checked_for_writing(tmp_path: Path) -> None:
    assert cache_setting(str(tmp_path), 1.0).meaning == (
        "writable; JAX stores compilations that took at least 1 s"
    )
    assert cache_setting(str(tmp_path / "new" / "deeper"), None).meaning == "writable"
    assert not (tmp_path / "new").exists()  # the probe leaves nothing behind
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cache_setting(str(blocker), None).meaning.startswith("not a folder")
    assert cache_setting(str(blocker / "below"), None).warning
    assert cache_setting(None, None).meaning.startswith("no persistent compilation cache")


# --- through the real CLI ------------------------------------------------------------------------


def test_doctor_on_this_cpu_machine(tmp_path: Path) -> None:
    run = run_gate(tmp_path, "doctor", env={"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "c")})
    assert run.returncode == DoctorExitCode.OK, run
    for label in ("transfer-gate", "python", "jax", "jaxlib", "plugins", "backend", "devices"):
        assert any(line.startswith(f"{label} ") for line in run.stdout.splitlines()), run
    assert "backend        cpu" in run.stdout
    assert "devices        cpu x1" in run.stdout
    assert "  JAX_PLATFORMS=cpu\n    JAX uses only cpu" in run.stdout
    assert f"  JAX_COMPILATION_CACHE_DIR={tmp_path / 'c'}\n    writable" in run.stdout
    assert "  jax_transfer_guard = unset (allow)" in run.stdout
    # JAX's guard is blind to device-to-host on the CPU; the gate's detector is not.
    assert "the gate's own detector judges that direction there" in run.stdout
    assert "does not judge" not in run.stdout


def test_doctor_expect_cpu_passes_and_expect_gpu_fails_here(tmp_path: Path) -> None:
    ok = run_gate(tmp_path, "doctor", "--expect", "cpu")
    assert ok.returncode == DoctorExitCode.OK, ok
    assert "ok: JAX runs on the expected CPU" in ok.stdout
    # run_gate pins JAX_PLATFORMS=cpu, so this fails the same way on a GPU machine.
    missing = run_gate(tmp_path, "doctor", "--expect", "gpu", env={"GITHUB_ACTIONS": "true"})
    assert missing.returncode == DoctorExitCode.FAILED, missing
    assert "error: expected a GPU, but JAX runs on cpu (cpu x1)." in missing.stderr
    assert "likely cause: JAX_PLATFORMS=cpu keeps JAX off the GPU; unset it" in missing.stderr
    assert "::error title=transfer-gate doctor::expected a GPU" in missing.stdout


def test_doctor_when_jax_cannot_start_the_requested_backend(tmp_path: Path) -> None:
    # No CUDA plugin on the CI machines: JAX_PLATFORMS=cuda cannot start.
    run = run_gate(tmp_path, "doctor", env={"JAX_PLATFORMS": "cuda"})
    if "backend        gpu" in run.stdout:
        pytest.skip("this machine has a working CUDA jax; the failure path needs one without")
    assert run.returncode == DoctorExitCode.FAILED, run
    assert "error: JAX cannot start: " in run.stderr
    assert "likely cause: " in run.stderr
    assert "Traceback" not in run.stderr


def test_doctor_refuses_an_unknown_accelerator(tmp_path: Path) -> None:
    run = run_gate(tmp_path, "doctor", "--expect", "npu")
    assert run.returncode == 2, run
    assert "invalid choice: 'npu'" in run.stderr


def test_doctor_help_documents_its_exit_codes(tmp_path: Path) -> None:
    run = run_gate(tmp_path, "doctor", "--help")
    assert run.returncode == 0, run
    assert "  1  the --expect'ed accelerator is missing, JAX cannot start, or jax" in run.stdout
    assert "  2  usage error, or a --requirements file that cannot be read" in run.stdout


@pytest.mark.gpu
def test_doctor_expect_gpu_on_a_gpu(tmp_path: Path) -> None:
    # The CPU tests cover the same logic: on hand-built diagnoses above, and on JAX's answers
    # from a GPU machine in test_doctor_expect_gpu_on_what_jax_reports_on_a_gpu below.
    run = run_gate(tmp_path, "doctor", "--expect", "gpu", env={"JAX_PLATFORMS": ""})
    assert run.returncode == DoctorExitCode.OK, run
    assert "backend        gpu" in run.stdout
    assert "compute capability" in run.stdout
    assert "CUDA runtime" in run.stdout
    assert "ok: JAX runs on the expected GPU" in run.stdout


def test_doctor_expect_gpu_on_what_jax_reports_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CPU twin of the GPU test above: JAX's answers on a GPU machine (the backend, devices
    # with a compute capability, the CUDA plugin's versions) fed to the command itself.
    import jax
    import jax._src.lib

    gpu = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H200", compute_capability="9.0")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda: [gpu] * 8)
    versions = types.SimpleNamespace(
        cuda_runtime_get_version=lambda: 12080,
        cuda_runtime_build_version=lambda: 12080,
        cuda_driver_get_version=lambda: 12090,
        cudnn_get_version=lambda: 90800,
        cudnn_build_version=lambda: 90800,
    )
    monkeypatch.setattr(jax._src.lib, "cuda_versions", versions)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main_doctor("gpu", {}) == DoctorExitCode.OK
    assert "backend        gpu" in out.getvalue()
    assert "devices        NVIDIA H200 x8 (compute capability 9.0)" in out.getvalue()
    assert "CUDA runtime   12.8 (JAX built against 12.8)" in out.getvalue()
    assert "ok: JAX runs on the expected GPU" in out.getvalue()
    assert err.getvalue() == ""


@pytest.mark.tpu
def test_doctor_expect_tpu_on_a_tpu(tmp_path: Path) -> None:
    # The CPU twin below feeds JAX's answers from a TPU VM to the same command. JAX may come
    # from the VM's PYTHONPATH there: it is kept.
    env = {"JAX_PLATFORMS": "", "PYTHONPATH": os.environ.get("PYTHONPATH")}
    run = run_gate(tmp_path, "doctor", "--expect", "tpu", env=env)
    assert run.returncode == DoctorExitCode.OK, run
    assert "backend        tpu" in run.stdout
    assert "devices        TPU" in run.stdout
    assert "ok: JAX runs on the expected TPU" in run.stdout


def test_doctor_expect_tpu_on_what_jax_reports_on_a_tpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CPU twin of the TPU test above: JAX's answers on a TPU v5e VM, fed to the command.
    import jax

    chip = types.SimpleNamespace(platform="tpu", device_kind="TPU v5 lite")
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(jax, "devices", lambda: [chip])
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main_doctor("tpu", {}) == DoctorExitCode.OK
    assert "backend        tpu" in out.getvalue()
    assert "devices        TPU v5 lite x1" in out.getvalue()
    assert "ok: JAX runs on the expected TPU" in out.getvalue()
    # A TPU judges device-to-host with JAX's own guard: the CPU's note is not printed.
    assert "device-to-host" not in out.getvalue()
    assert err.getvalue() == ""


# --- versions: jax, jaxlib and the plugins, and the user's requirements ---------------------------


def test_matching_versions_are_no_problem() -> None:
    assert version_problems(H200) == []
    assert version_problems(CPU_ONLY) == []


def test_a_plugin_of_another_version_than_jaxlib_is_a_problem() -> None:
    diagnosis = replace(
        H200, plugins=(("jax-cuda12-plugin", "0.10.1"), ("jax-cuda12-pjrt", "0.10.2"))
    )
    assert version_problems(diagnosis) == [
        "jax-cuda12-plugin 0.10.1 does not match jaxlib 0.10.2: JAX uses a GPU plugin only at "
        "jaxlib's version (another one warns and leaves the GPU unused, or crashes); "
        'pip install "jax-cuda12-plugin==0.10.2"'
    ]
    # jax pins the ROCm plugin as ==0.10.2.*: a fourth number is the same release.
    rocm = replace(H200, plugins=(("jax-rocm7-plugin", "0.10.2.1"), ("libtpu", "0.0.42")))
    assert version_problems(rocm) == []


def test_jaxlib_outside_jax_s_own_requirement_is_a_problem() -> None:
    old = replace(H200, installed=(("jax", "0.10.2"), ("jaxlib", "0.9.0")), plugins=())
    assert version_problems(old) == [
        "jax 0.10.2 needs jaxlib<=0.10.2,>=0.10.1 (its own requirement), but jaxlib 0.9.0 is "
        'installed; pip install "jax==0.10.2" "jaxlib==0.10.2"'
    ]
    # Without jax's metadata (a jax from source), one minor release is the rule.
    unknown = replace(old, jaxlib_requirement=None)
    assert version_problems(unknown) == [
        "jax 0.10.2 and jaxlib 0.9.0 are not of one minor release; "
        'pip install "jax==0.10.2" "jaxlib==0.10.2"'
    ]
    assert (
        version_problems(replace(unknown, installed=(("jax", "0.10.2"), ("jaxlib", "0.10.1"))))
        == []
    )


def site(tmp_path: Path, versions: dict[str, str]) -> str:
    """A folder of fake installed distributions (metadata only) to put first on PYTHONPATH:
    importlib.metadata finds them before the real ones, `import jax` still imports the real jax."""
    folder = tmp_path / "site"
    for name, version in versions.items():
        info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(folder)


def requirements_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return name


JAX = importlib.metadata.version("jax")
JAXLIB = importlib.metadata.version("jaxlib")


def test_doctor_requirements_met_are_listed(tmp_path: Path) -> None:
    name = requirements_file(
        tmp_path,
        "requirements.txt",
        f"""
        optax
        jax[cuda12]>={JAX}
        jaxlib~={".".join(JAXLIB.split(".")[:2])}.0; python_version >= "3.11"
        """,
    )
    run = run_gate(tmp_path, "doctor", "--requirements", name)
    assert run.returncode == DoctorExitCode.OK, run
    assert "requirements:\n" in run.stdout
    assert f"  requirements.txt:2  jax[cuda12]>={JAX}: jax {JAX}, met" in run.stdout
    assert "  requirements.txt:3  jaxlib~=" in run.stdout
    assert 'not checked: its marker (python_version >= "3.11") is not evaluated' in run.stdout


def test_doctor_fails_on_a_requirement_the_installed_jax_does_not_meet(tmp_path: Path) -> None:
    name = requirements_file(
        tmp_path,
        "pyproject.toml",
        """
        [project]
        name = "model"
        dependencies = ["flax", "jax<0.5"]
        [project.optional-dependencies]
        gpu = ["jax-cuda12-plugin==0.4.30"]
        """,
    )
    run = run_gate(tmp_path, "doctor", "--requirements", name, env={"GITHUB_ACTIONS": "true"})
    assert run.returncode == DoctorExitCode.FAILED, run
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: pyproject.toml:3: jax<0.5 is not met: jax {JAX} is installed; run the gate with "
        "a JAX that meets it (the gate's image: --build-arg JAX_VERSION=...), or change the "
        f"requirement ({docs_url('docs/dependencies.md')})",
        "error: pyproject.toml:5: jax-cuda12-plugin==0.4.30 asks for jax-cuda12-plugin, which "
        "is not installed here; install it in the gate's environment, or run the gate in an "
        f"image that has it ({docs_url('docs/dependencies.md')})",
    ], run
    assert f"  pyproject.toml:3  jax<0.5: jax {JAX}, not met" in run.stdout
    annotations = [line for line in run.stdout.splitlines() if line.startswith("::error")]
    assert len(annotations) == 2, run
    assert annotations[0].startswith("::error title=transfer-gate doctor::pyproject.toml:3: ")


def test_doctor_fails_when_the_installed_packages_disagree(tmp_path: Path) -> None:
    # Fake metadata: a jaxlib far older than jax accepts, and a CUDA plugin of yet another
    # version. JAX_PLATFORMS=cpu (run_gate's) keeps the real backend the CPU.
    fakes = site(tmp_path, {"jax-cuda12-plugin": "0.0.2", "jaxlib": "0.0.1"})
    run = run_gate(tmp_path, "doctor", "--expect", "cpu", env={"PYTHONPATH": fakes})
    assert run.returncode == DoctorExitCode.FAILED, run
    assert "plugins        jax-cuda12-plugin 0.0.2" in run.stdout
    assert "ok: JAX runs on the expected CPU" in run.stdout
    first, second = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert first.startswith(f"error: jax {JAX} needs jaxlib"), run
    assert first.endswith(
        f'(its own requirement), but jaxlib 0.0.1 is installed; pip install "jax=={JAX}" '
        f'"jaxlib=={JAX}"'
    ), run
    assert second == (
        "error: jax-cuda12-plugin 0.0.2 does not match jaxlib 0.0.1: JAX uses a GPU plugin only "
        "at jaxlib's version (another one warns and leaves the GPU unused, or crashes); "
        'pip install "jax-cuda12-plugin==0.0.1"'
    ), run


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("jax=>0.10\n", "error: requirements.txt:1: jax=>0.10: Expected semicolon"),
        ("-r base.txt\n", "error: requirements.txt:1: -r base.txt: no such file next to"),
    ],
)
def test_doctor_refuses_a_requirements_file_it_cannot_read(
    tmp_path: Path, text: str, error: str
) -> None:
    name = requirements_file(tmp_path, "requirements.txt", text)
    run = run_gate(tmp_path, "doctor", "--requirements", name)
    assert run.returncode == DoctorExitCode.USAGE, run
    assert run.stderr.strip().startswith(error), run
    assert run.stdout == "", run  # refused before JAX starts: no diagnosis


def test_doctor_refuses_a_missing_requirements_file(tmp_path: Path) -> None:
    run = run_gate(tmp_path, "doctor", "--requirements", "requirements-gpu.txt")
    assert run.returncode == DoctorExitCode.USAGE, run
    assert run.stderr.strip() == (
        "error: requirements-gpu.txt: no such file; name a requirements file or pyproject.toml "
        "with --requirements"
    ), run


@pytest.mark.parametrize(
    ("numpy", "ml_dtypes", "slow"),
    [("2.4.6", "0.7.0", True), ("2.5.0", "0.7.0", False), ("2.4.6", "0.6.0", False)],
)
def test_doctor_notes_the_numpy_and_ml_dtypes_that_make_every_import_of_jax_slow(
    tmp_path: Path, numpy: str, ml_dtypes: str, slow: bool
) -> None:
    # Fake metadata again: the versions doctor reads; the real (fast) ones are what imports.
    fakes = site(tmp_path, {"numpy": numpy, "ml_dtypes": ml_dtypes})
    run = run_gate(tmp_path, "doctor", "--expect", "cpu", env={"PYTHONPATH": fakes})
    assert run.returncode == DoctorExitCode.OK, run  # a cost to know of, not a failure
    note = (
        f"note: ml_dtypes {ml_dtypes} with numpy {numpy}: each process that imports jax (each of "
        "the gate's workers) spends ~0.6 s of CPU registering ml_dtypes' types"
    )
    assert (note in run.stdout) is slow, run.stdout
    if slow:
        fix = 'pip install "numpy>=2.5" (Python 3.12 and later) or "ml_dtypes<0.7"'
        assert any(line.startswith(note) and line.endswith(fix) for line in run.stdout.splitlines())
