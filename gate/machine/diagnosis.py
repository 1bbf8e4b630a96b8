"""Where JAX really runs, whether that is where a policy wants it, and what judges each direction.

A GPU job whose JAX quietly fell back to the CPU passes every device-to-host
check, because on the CPU the guard never fires for that direction
(FIELD-NOTES). So the gate records the platform with every run, refuses to
judge a region that requires another one, and says per direction what did
the judging.

`detect` asks only public JAX API (``jax.default_backend``, ``jax.devices``,
``jax.extend.backend.get_backend().platform_version``); the CUDA versions
come from the plugin's ``cuda_versions`` module when JAX loaded one, and the
reasons a backend failed to start from ``xla_bridge._backend_errors`` when
that private dict exists. Both are optional: without them the message is
less specific, never wrong. ``gate.machine.doctor`` gives the long diagnosis; this
module gives the one line a region's report carries.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.metadata
from dataclasses import dataclass

from gate.jaxhooks import internals
from gate.policy.levels import Direction
from gate.results.records import CoverageJudge

# Distributions that give jaxlib a GPU backend (JAX's CUDA/ROCm plugins).
_GPU_PLUGINS = (
    "jax-cuda13-plugin",
    "jax-cuda12-plugin",
    "jax-rocm7-plugin",
    "jax-rocm60-plugin",
)
_TPU_PLUGINS = ("libtpu", "libtpu-nightly")
# The names jax.default_backend() gives, and JAX_PLATFORMS spellings that select them.
PLATFORMS = ("cpu", "gpu", "tpu")
_SELECTS = {"cpu": {"cpu"}, "gpu": {"gpu", "cuda", "rocm"}, "tpu": {"tpu"}}


@dataclass(frozen=True)
class PlatformInfo:
    """The backend JAX runs the gate's steps on, and the evidence for why."""

    platform: str  # jax.default_backend(): "cpu", "gpu", "tpu"
    device_kind: str  # e.g. "cpu", "NVIDIA H200"
    device_count: int
    jax_version: str
    jaxlib_version: str
    backend_version: str | None  # the backend's platform_version, one line
    cuda_version: str | None  # the CUDA runtime JAX loaded, e.g. "12.8"
    jax_platforms: str | None  # JAX_PLATFORMS as JAX read it
    gpu_plugins: tuple[str, ...] = ()  # installed distributions giving a GPU backend
    tpu_plugins: tuple[str, ...] = ()
    nvidia_device_files: bool = False  # /dev/nvidia0...: the container got GPUs
    libcuda: bool = False  # the NVIDIA driver's libcuda can be found
    backend_errors: tuple[tuple[str, str], ...] = ()  # (platform, why it did not start)

    def describe(self) -> str:
        """``gpu (NVIDIA H200 x1), jax 0.11.2, jaxlib 0.11.2, CUDA 12.8``."""
        text = (
            f"{self.platform} ({self.device_kind} x{self.device_count}), "
            f"jax {self.jax_version}, jaxlib {self.jaxlib_version}"
        )
        if self.cuda_version:
            text += f", CUDA {self.cuda_version}"
        return text


def detect() -> PlatformInfo:
    """What JAX runs on in this process (starts JAX's backends if they are not yet)."""
    import jax
    import jaxlib.version

    devices = jax.devices()
    kinds = sorted({str(d.device_kind) for d in devices})
    backend_version: str | None
    try:
        from jax.extend.backend import get_backend

        backend_version = " ".join(str(get_backend().platform_version).split()) or None
    except Exception:  # a missing jax.extend is a less precise record, not a failure
        backend_version = None
    return PlatformInfo(
        platform=str(jax.default_backend()),
        device_kind=", ".join(kinds),
        device_count=len(devices),
        jax_version=str(jax.__version__),
        jaxlib_version=str(jaxlib.version.__version__),
        backend_version=backend_version,
        cuda_version=_cuda_runtime(),
        jax_platforms=getattr(jax.config, "jax_platforms", None) or None,
        gpu_plugins=_installed(_GPU_PLUGINS),
        tpu_plugins=_installed(_TPU_PLUGINS),
        nvidia_device_files=bool(glob.glob("/dev/nvidia[0-9]*")),
        libcuda=ctypes.util.find_library("cuda") is not None or _libcuda_loads(),
        backend_errors=_backend_errors(),
    )


def _installed(names: tuple[str, ...]) -> tuple[str, ...]:
    found = []
    for name in names:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return tuple(found)


def _libcuda_loads() -> bool:
    # find_library misses a driver mounted into a container without ldconfig.
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _cuda_runtime() -> str | None:
    cuda_versions = internals.cuda_versions_module()
    getter = getattr(cuda_versions, "cuda_runtime_get_version", None)
    if getter is None:
        return None
    try:
        version = int(getter())
    except Exception:  # the plugin is there but its runtime library is not
        return None
    return f"{version // 1000}.{version % 1000 // 10}"  # CUDA's 1000*major + 10*minor


def _backend_errors() -> tuple[tuple[str, str], ...]:
    errors = internals.backend_errors()
    if errors is None:
        return ()
    return tuple(sorted((str(k), " ".join(str(v).split())) for k, v in errors.items()))


def check_required(required: str | None, info: PlatformInfo) -> str | None:
    """None when JAX runs on ``required`` (or nothing is required), else one line:
    what was expected, what was found, and the likely cause."""
    if required is None:
        return None
    if required not in PLATFORMS:
        raise ValueError(f"unknown platform {required!r}; expected one of {', '.join(PLATFORMS)}")
    if info.platform == required:
        return None
    return (
        f"this region requires {required}, but JAX runs on {info.describe()}; "
        f"likely cause: {likely_cause(required, info)}"
    )


def likely_cause(required: str, info: PlatformInfo) -> str:
    """The most likely reason JAX is not on ``required``, as a fix to apply."""
    if info.jax_platforms and not _SELECTS[required] & _split(info.jax_platforms):
        return f"JAX_PLATFORMS={info.jax_platforms} keeps JAX off the {required}; unset it"
    if required == "gpu":
        return _gpu_cause(info)
    if required == "tpu":
        if not info.tpu_plugins:
            return 'a jaxlib without TPU support: install "jax[tpu]" (libtpu)'
        return _errors_or(info, "tpu", "the TPU is missing or held by another process")
    return (
        f"JAX picks an accelerator ({info.platform}) when it finds one; "
        "set JAX_PLATFORMS=cpu to run on the CPU"
    )


def _gpu_cause(info: PlatformInfo) -> str:
    if not info.gpu_plugins:
        return (
            "a CPU-only jaxlib: no jax-cuda12-plugin or jax-cuda13-plugin is installed; "
            'install "jax[cuda12]" or "jax[cuda13]"'
        )
    if not info.nvidia_device_files:
        return (
            "no GPU visible (no /dev/nvidia0): run the container with --gpus all "
            "(a workflow job: container options: --gpus all)"
        )
    if not info.libcuda:
        return (
            "the NVIDIA driver is missing or not mounted (libcuda.so.1 not found): install it "
            "on the host, and the NVIDIA Container Toolkit for containers"
        )
    return _errors_or(
        info,
        "cuda",
        "the CUDA plugin and the GPU are there but JAX could not start it: check nvidia-smi "
        "and that the driver supports this CUDA version",
    )


def _errors_or(info: PlatformInfo, platform: str, fallback: str) -> str:
    for name, error in info.backend_errors:
        if name == platform or (platform == "cuda" and name in ("gpu", "rocm")):
            return f"the {name} backend failed to start: {error}"
    return fallback


def _split(platforms: str) -> set[str]:
    return {p.strip() for p in platforms.split(",") if p.strip()}


def direction_coverage(info: PlatformInfo, detector_active: bool) -> dict[Direction, CoverageJudge]:
    """Per direction, what judged it on this platform.

    The guard checks host-to-device and device-to-device everywhere, and
    device-to-host only where the buffer really is on a device (GPU, TPU;
    on an unknown backend it is not assumed). The detector sees
    device-to-host on every backend.
    """
    guard_sees_fetches = info.platform in ("gpu", "tpu")
    if guard_sees_fetches:
        fetches = CoverageJudge.BOTH if detector_active else CoverageJudge.GUARD
    else:
        fetches = CoverageJudge.DETECTOR if detector_active else CoverageJudge.NOT_CHECKED
    return {
        Direction.HOST_TO_DEVICE: CoverageJudge.GUARD,
        Direction.DEVICE_TO_HOST: fetches,
        Direction.DEVICE_TO_DEVICE: CoverageJudge.GUARD,
    }
