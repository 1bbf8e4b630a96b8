"""Where JAX runs, the message when that is the wrong place, and who judges each direction."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from jax_scripts import run_script

from gate.levels import Direction
from gate.machine.diagnosis import PlatformInfo, check_required, direction_coverage
from gate.results.records import CoverageJudge

DETECT = """
import dataclasses

import jax

from gate.machine.diagnosis import check_required, detect

info = detect()
emit({
    "info": dataclasses.asdict(info),
    "jax": jax.__version__,
    "gpu": check_required("gpu", info),
    "cpu": check_required("cpu", info),
    "nothing": check_required(None, info),
})
"""

# Variables that would change what JAX picks; the tests set them explicitly.
JAX_SELECTION = ("JAX_PLATFORMS", "XLA_FLAGS")


def _detect(tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = run_script(tmp_path, {}, DETECT, env=env, drop_env=JAX_SELECTION)
    return result


def test_this_machine_runs_jax_on_the_cpu(tmp_path: Path) -> None:
    result = _detect(tmp_path)
    info = result["info"]
    assert (info["platform"], info["device_kind"], info["device_count"]) == ("cpu", "cpu", 1)
    assert info["jax_version"] == result["jax"]
    assert info["jaxlib_version"]
    assert info["cuda_version"] is None
    assert result["cpu"] is None
    assert result["nothing"] is None


@pytest.mark.parametrize("device_files", [False, True])
def test_the_driver_is_looked_for_only_beside_nvidia_device_files(
    monkeypatch: pytest.MonkeyPatch, device_files: bool
) -> None:
    """Finding libcuda runs ldconfig (~11 ms of every worker's start); a missing driver is a
    cause only where /dev/nvidia* exist, so elsewhere it is not looked for."""
    from gate.machine import diagnosis

    looked: list[int] = []
    monkeypatch.setattr(diagnosis, "nvidia_device_files", lambda: device_files)
    monkeypatch.setattr(diagnosis, "libcuda_found", lambda: bool(looked.append(1)))
    info = diagnosis.detect()
    assert looked == ([1] if device_files else [])
    assert info.nvidia_device_files is device_files
    assert info.libcuda is False


def test_requiring_a_gpu_here_names_the_cpu_and_a_cpu_only_jaxlib(tmp_path: Path) -> None:
    result = _detect(tmp_path)
    if result["info"]["gpu_plugins"]:
        pytest.skip("a CUDA plugin is installed here: the likely cause differs")
    message = result["gpu"]
    assert message.startswith("this region requires gpu, but JAX runs on cpu (cpu x1)")
    assert "likely cause: a CPU-only jaxlib" in message
    assert "\n" not in message


def test_jax_platforms_is_named_first(tmp_path: Path) -> None:
    result = _detect(tmp_path, env={"JAX_PLATFORMS": "cpu"})
    assert result["info"]["jax_platforms"] == "cpu"
    assert "likely cause: JAX_PLATFORMS=cpu keeps JAX off the gpu; unset it" in result["gpu"]


def test_several_cpu_devices_are_counted(tmp_path: Path) -> None:
    result = _detect(tmp_path, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert result["info"]["device_count"] == 4


# --- the message for each cause, on made-up machines ---------------------------------------------

CPU_HERE = PlatformInfo(
    platform="cpu",
    device_kind="cpu",
    device_count=1,
    jax_version="0.11.2",
    jaxlib_version="0.11.2",
    backend_version="cpu",
    cuda_version=None,
    jax_platforms=None,
)


@pytest.mark.parametrize(
    ("evidence", "cause"),
    [
        ({}, "a CPU-only jaxlib"),
        ({"gpu_plugins": ("jax-cuda12-plugin",)}, "start it with --gpus all"),
        (
            {"gpu_plugins": ("jax-cuda12-plugin",), "nvidia_device_files": True},
            "the NVIDIA driver is missing or not mounted",
        ),
        (
            {
                "gpu_plugins": ("jax-cuda12-plugin",),
                "nvidia_device_files": True,
                "libcuda": True,
                "backend_errors": (("cuda", "INTERNAL: no supported devices found"),),
            },
            "JAX could not start its cuda backend: INTERNAL: no supported devices found",
        ),
        (
            {"gpu_plugins": ("jax-cuda12-plugin",), "nvidia_device_files": True, "libcuda": True},
            "JAX could not start it",
        ),
        ({"jax_platforms": "cpu", "gpu_plugins": ("jax-cuda12-plugin",)}, "JAX_PLATFORMS=cpu"),
    ],
    ids=["no-plugin", "no-gpus-all", "no-driver", "backend-error", "unknown", "jax-platforms"],
)
def test_a_gpu_requirement_names_the_likely_cause(evidence: dict[str, Any], cause: str) -> None:
    message = check_required("gpu", dataclasses.replace(CPU_HERE, **evidence))
    assert message is not None
    assert "JAX runs on cpu (cpu x1), jax 0.11.2, jaxlib 0.11.2" in message
    assert cause in message.partition("; likely cause: ")[2]


def test_jax_platforms_that_allows_the_gpu_is_not_blamed() -> None:
    info = dataclasses.replace(CPU_HERE, jax_platforms="cuda,cpu")
    message = check_required("gpu", info)
    assert message is not None
    assert "JAX_PLATFORMS" not in message


def test_a_gpu_found_where_cpu_is_required() -> None:
    gpu = dataclasses.replace(
        CPU_HERE, platform="gpu", device_kind="NVIDIA H200", cuda_version="12.8"
    )
    assert check_required("gpu", gpu) is None
    message = check_required("cpu", gpu)
    assert message is not None
    assert "JAX runs on gpu (NVIDIA H200 x1), jax 0.11.2, jaxlib 0.11.2, CUDA 12.8" in message
    assert "set JAX_PLATFORMS=cpu" in message


def test_an_unknown_platform_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match=r"unknown platform 'cuda'; expected one of cpu, gpu, tpu"):
        check_required("cuda", CPU_HERE)


# --- who judges which direction ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "detector", "device_to_host"),
    [
        ("cpu", False, CoverageJudge.NOT_CHECKED),
        ("cpu", True, CoverageJudge.DETECTOR),
        ("gpu", False, CoverageJudge.GUARD),
        ("gpu", True, CoverageJudge.BOTH),
        ("tpu", True, CoverageJudge.BOTH),
        ("metal", False, CoverageJudge.NOT_CHECKED),
    ],
)
def test_direction_coverage(platform: str, detector: bool, device_to_host: str) -> None:
    coverage = direction_coverage(dataclasses.replace(CPU_HERE, platform=platform), detector)
    assert coverage == {
        Direction.HOST_TO_DEVICE: CoverageJudge.GUARD,
        Direction.DEVICE_TO_HOST: device_to_host,
        Direction.DEVICE_TO_DEVICE: CoverageJudge.GUARD,
    }
