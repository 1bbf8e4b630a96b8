"""docs/runner-host.md: the doctor output it shows is what doctor prints for those figures,
and the runner labels it registers are the ones the workflows ask for."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import jax
import yaml

from gate.cli.doctor import main_doctor
from gate.cli.exit_codes import DoctorExitCode
from gate.machine.doctor import DeviceGroup, Diagnosis, _guard_config
from gate.machine.settings import read_settings

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "runner-host.md").read_text(encoding="utf-8")


def shown_doctor_output() -> str:
    intro = "expect your own GPU and versions:\n\n```\n"
    return PAGE.split(intro, 1)[1].split("```", 1)[0]


def test_the_doctor_output_shown_is_what_doctor_prints(tmp_path: Path) -> None:
    # The page's figures (an example GPU) as a diagnosis; the settings as the image sets them,
    # its cache folder stood in for by a writable one here.
    environ = {"TF_CPP_MIN_LOG_LEVEL": "0", "JAX_COMPILATION_CACHE_DIR": str(tmp_path)}
    diagnosis = Diagnosis(
        python="3.12.3",
        system="Linux 6.8.0-60-generic x86_64",
        jax_version="0.10.2",
        jaxlib_version="0.10.2",
        plugins=(("jax-cuda12-plugin", "0.10.2"), ("jax-cuda12-pjrt", "0.10.2")),
        backend="gpu",
        devices=(DeviceGroup("gpu", "NVIDIA H100 80GB HBM3", 1, "9.0"),),
        backend_error=None,
        cuda=(
            ("CUDA runtime", "12.8 (JAX built against 12.8)"),
            ("CUDA driver", "12.8"),
            ("cuDNN", "9.8.0 (JAX built against 9.8.0)"),
        ),
        nvidia_device_files=True,
        tpu_device_files=False,
        environ=environ,
        settings=read_settings(environ, str(tmp_path), 1.0),
        guard=_guard_config(jax.config),
        libcuda=True,
        installed=(("jax", "0.10.2"), ("jaxlib", "0.10.2")),
        jaxlib_requirement="jaxlib<=0.10.2,>=0.10.1",
    )
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main_doctor("gpu", environ, diagnosis) == DoctorExitCode.OK
    printed = out.getvalue().replace(str(tmp_path), "/cache/jax")
    # The gate's own version moves with every release.
    printed = re.sub(r"^transfer-gate  \S+", "transfer-gate  0.1.0", printed)
    assert printed == shown_doctor_output()
    assert err.getvalue() == ""


def test_the_labels_registered_are_the_ones_the_gpu_jobs_ask_for() -> None:
    # GitHub gives every self-hosted runner self-hosted, linux and x64; the page adds gpu.
    assert '--labels "gpu,gpu$gpu"' in PAGE
    registered = {"self-hosted", "linux", "x64", "gpu"}
    asked = []
    for path in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        for job in (yaml.safe_load(path.read_text(encoding="utf-8")).get("jobs") or {}).values():
            runs_on = job.get("runs-on")
            if isinstance(runs_on, list) and "self-hosted" in runs_on:
                asked.append((path.name, runs_on))
    assert asked
    for name, runs_on in asked:
        assert {str(label).lower() for label in runs_on} <= registered, (name, runs_on)
