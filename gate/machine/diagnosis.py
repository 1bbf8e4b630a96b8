"""Where JAX really runs, whether that is where a policy wants it, and what judges each direction.

A GPU job whose JAX quietly fell back to the CPU passes every device-to-host
check, because on the CPU the guard never fires for that direction: a CPU
array reaches NumPy without a copy, so there is no transfer to guard
(https://github.com/jax-ml/jax/issues/16602). So the gate records the platform
with every run, refuses to judge a region that requires another one, and says
per direction what did the judging.

This module is the one place that diagnoses the backend: the platforms and
the names JAX gives them (`Platform`), the evidence (`Evidence`) and the
likely causes read from it (`likely_causes`), for a region's one-line report
(`check_required`) and for ``transfer-gate doctor`` alike.

`detect` asks only public JAX API (``jax.default_backend``, ``jax.devices``,
``jax.extend.backend.get_backend().platform_version``); the CUDA versions
come from the plugin's ``cuda_versions`` module when JAX loaded one, and the
reasons a backend failed to start from ``xla_bridge._backend_errors`` when
that private dict exists. Both are optional: without them the message is
less specific, never wrong.
"""

from __future__ import annotations

import ctypes.util
import enum
import os
import platform as python_platform
import re
from dataclasses import dataclass
from pathlib import Path

from gate.jaxhooks import internals
from gate.levels import Direction
from gate.machine.devices import gpu_files, tpu_chip_files
from gate.package import __version__
from gate.results.machine import Machine
from gate.results.records import CoverageJudge


class Platform(enum.Enum):
    """Where JAX can run; the value is how ``jax.default_backend()`` and policies name it."""

    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"

    @property
    def backend_names(self) -> frozenset[str]:
        """The names a backend of this platform goes by (JAX_PLATFORMS, JAX's backend errors)."""
        return _BACKEND_NAMES[self]

    @classmethod
    def named(cls, name: str | None) -> Platform | None:
        """The platform a backend name (``cuda``, ``gpu``, ``tpu``...) belongs to, if any."""
        for platform in cls:
            if name in platform.backend_names:
                return platform
        return None


_BACKEND_NAMES = {
    Platform.CPU: frozenset({"cpu"}),
    Platform.GPU: frozenset({"gpu", "cuda", "rocm"}),
    Platform.TPU: frozenset({"tpu"}),
}
PLATFORMS = tuple(p.value for p in Platform)

# Distributions that give jaxlib a GPU or TPU backend, newest CUDA first as JAX tries them.
PLUGIN_DISTRIBUTIONS = (
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "jax-cuda12-plugin",
    "jax-cuda12-pjrt",
    "jax-rocm7-plugin",
    "jax-rocm7-pjrt",
    "jax-rocm60-plugin",
    "jax-rocm60-pjrt",
    "libtpu",
    "libtpu-nightly",
)
_GPU_PLUGIN_PREFIXES = ("jax-cuda", "jax-rocm")
_TPU_PLUGINS = frozenset({"libtpu", "libtpu-nightly"})

# JAX's option, read once, as the CPU backend is made: False runs each computation on the
# thread that calls it (`gate.isolation.backend` sets it so in every worker).
CPU_ASYNC_DISPATCH = "jax_cpu_enable_async_dispatch"


@dataclass(frozen=True)
class Evidence:
    """What the likely causes are read from; a region's `PlatformInfo` and doctor both give it."""

    backend: str | None  # jax.default_backend(); None when JAX could not start one
    jax_platforms: str | None  # JAX_PLATFORMS as JAX read it
    plugins: tuple[str, ...]  # installed distributions of PLUGIN_DISTRIBUTIONS
    nvidia_device_files: bool  # /dev/nvidia0...: the container got GPUs
    tpu_device_files: bool  # /dev/accel* or /dev/vfio/N: a TPU VM
    libcuda: bool  # the NVIDIA driver's libcuda can be found
    driver_capabilities: str | None  # NVIDIA_DRIVER_CAPABILITIES; None: unset
    backend_errors: tuple[tuple[str, str], ...]  # (backend name, why it did not start)


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
    tpu_device_files: bool = False  # /dev/accel* or /dev/vfio/N: a TPU VM
    driver_capabilities: str | None = None  # NVIDIA_DRIVER_CAPABILITIES; None: unset
    processor: str = ""  # the CPU's model name, where the system says it
    cores: int = 1  # the host's logical CPUs
    cuda_driver: str | None = None  # the newest CUDA the NVIDIA driver supports, e.g. "12.8"
    libtpu_version: str | None = None
    cpu_dispatch: str | None = None  # on the CPU: "inline" or "async" (`cpu_dispatch`)

    def describe(self) -> str:
        """``gpu (NVIDIA H200 x1), jax 0.11.2, jaxlib 0.11.2, CUDA 12.8``."""
        text = (
            f"{self.platform} ({self.device_kind} x{self.device_count}), "
            f"jax {self.jax_version}, jaxlib {self.jaxlib_version}"
        )
        if self.cuda_version:
            text += f", CUDA {self.cuda_version}"
        return text

    def machine(self) -> Machine:
        """What a step timed here is timed on, as the stored baseline keeps it."""
        return Machine(
            processor=self.processor,
            cores=max(self.cores, 1),
            platform=self.platform,
            accelerator=self.device_kind,
            devices=max(self.device_count, 1),
            jax=self.jax_version,
            jaxlib=self.jaxlib_version,
            cuda_driver=self.cuda_driver,
            cuda_runtime=self.cuda_version,
            libtpu=self.libtpu_version,
            cpu_dispatch=self.cpu_dispatch,
            transfer_gate=__version__,
        )

    @property
    def evidence(self) -> Evidence:
        return Evidence(
            backend=self.platform,
            jax_platforms=self.jax_platforms,
            plugins=self.gpu_plugins + self.tpu_plugins,
            nvidia_device_files=self.nvidia_device_files,
            tpu_device_files=self.tpu_device_files,
            libcuda=self.libcuda,
            driver_capabilities=self.driver_capabilities,
            backend_errors=self.backend_errors,
        )


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
    versions = dict(installed_plugins())
    plugins = tuple(versions)
    nvidia = nvidia_device_files()
    platform = str(jax.default_backend())
    return PlatformInfo(
        platform=platform,
        device_kind=", ".join(kinds),
        device_count=len(devices),
        jax_version=str(jax.__version__),
        jaxlib_version=str(jaxlib.version.__version__),
        backend_version=backend_version,
        cuda_version=_cuda_runtime(),
        jax_platforms=getattr(jax.config, "jax_platforms", None) or None,
        gpu_plugins=tuple(p for p in plugins if p.startswith(_GPU_PLUGIN_PREFIXES)),
        tpu_plugins=tuple(p for p in plugins if p in _TPU_PLUGINS),
        nvidia_device_files=nvidia,
        # Looked for only beside /dev/nvidia*, the one place a missing driver is a cause
        # (`_gpu_causes`): finding the library runs ldconfig, ~11 ms of every worker's start.
        libcuda=nvidia and libcuda_found(),
        backend_errors=failed_backends(),
        tpu_device_files=tpu_device_files(),
        driver_capabilities=os.environ.get("NVIDIA_DRIVER_CAPABILITIES"),
        processor=processor_model(),
        cores=os.cpu_count() or 1,
        cuda_driver=_cuda_version_from("cuda_driver_get_version"),
        libtpu_version=versions.get("libtpu") or versions.get("libtpu-nightly"),
        cpu_dispatch=cpu_dispatch() if platform == "cpu" else None,
    )


def cpu_dispatch() -> str:
    """How this process's CPU backend runs a computation: "inline" or "async"."""
    import jax

    return "async" if jax.config.read(CPU_ASYNC_DISPATCH) else "inline"


def processor_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name ("AMD EPYC 7B13"), from Linux's cpuinfo; "" where it is not said.

    x86 says ``model name``; arm64 kernels often say nothing of the kind, and some say
    ``Hardware`` or ``Model`` instead; elsewhere Python's ``platform.processor()`` is all there is.
    """
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return python_platform.processor()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and value.strip():
            fields.setdefault(key.strip().lower(), " ".join(value.split()))
    for key in ("model name", "hardware", "model", "cpu model"):
        if key in fields:
            return fields[key]
    return python_platform.processor()


def installed_plugins() -> tuple[tuple[str, str], ...]:
    """(distribution, version) of each installed plugin that gives jaxlib a GPU or TPU."""
    # Here, not at the top: the gate's own process imports this module on every run but reads
    # no distribution's metadata there, and importlib.metadata brings the email package.
    import importlib.metadata

    found = []
    for name in PLUGIN_DISTRIBUTIONS:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(found)


def installed_jax() -> tuple[tuple[str, str], ...]:
    """(distribution, version) of jax and jaxlib as installed; readable when jax does not import."""
    import importlib.metadata  # here, as in installed_plugins

    found = []
    for name in ("jax", "jaxlib"):
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(found)


def slow_jax_import() -> str | None:
    """Why each ``import jax`` here is slow, when the installed numpy and ml_dtypes make it so.

    ml_dtypes 0.7 registers its types' ufunc loops one at a time, and numpy before 2.5 checks each
    new loop against every loop the ufunc already has: measured on Python 3.11 and 3.12 alike,
    the import of ml_dtypes (which jax imports) takes 0.6-0.7 s of CPU instead of 5-20 ms. The
    gate imports jax in every worker it starts, so a run pays it once per worker.
    """
    import importlib.metadata  # here, as in installed_plugins

    try:
        numpy, ml_dtypes = (importlib.metadata.version(name) for name in ("numpy", "ml_dtypes"))
    except importlib.metadata.PackageNotFoundError:
        return None
    if not (_release(numpy) < (2, 5) and _release(ml_dtypes) >= (0, 7)):
        return None
    return (
        f"ml_dtypes {ml_dtypes} with numpy {numpy}: each process that imports jax (each of the "
        "gate's workers) spends ~0.6 s of CPU registering ml_dtypes' types, as numpy before 2.5 "
        'adds them in quadratic time; pip install "numpy>=2.5" (Python 3.12 and later) or '
        '"ml_dtypes<0.7"'
    )


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version (``2.4.6rc1`` -> (2, 4, 6)); enough to order releases."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in numbers.group().split(".")) if numbers else ()


def jaxlib_requirement() -> str | None:
    """jax's Requires-Dist on jaxlib without a marker: the jaxlib versions this jax works with."""
    import importlib.metadata  # here, as in installed_plugins

    try:
        requires = importlib.metadata.requires("jax") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        if ";" not in line and re.match(r"jaxlib\s*[<>=!~(]", line):
            return line.strip()
    return None


def nvidia_device_files() -> bool:
    """/dev/nvidia0... exist: the container was given GPUs."""
    return bool(gpu_files())


def tpu_device_files() -> bool:
    """/dev/accel* or /dev/vfio/N exist: this is a TPU VM."""
    return bool(tpu_chip_files())


def libcuda_found() -> bool:
    """The NVIDIA driver's libcuda can be found or loaded."""
    return ctypes.util.find_library("cuda") is not None or _libcuda_loads()


def _libcuda_loads() -> bool:
    # find_library misses a driver mounted into a container without ldconfig.
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def cuda_version_text(version: int) -> str:
    """CUDA's encoding, 1000 * major + 10 * minor: 12080 is 12.8."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _cuda_runtime() -> str | None:
    return _cuda_version_from("cuda_runtime_get_version")


def _cuda_version_from(name: str) -> str | None:
    """A version the GPU plugin's ``cuda_versions`` module gives (runtime, driver), if any."""
    cuda_versions = internals.cuda_versions_module()
    getter = getattr(cuda_versions, name, None)
    if getter is None:
        return None
    try:
        version = int(getter())
    except Exception:  # the plugin is there but its runtime library is not
        return None
    return cuda_version_text(version)


def failed_backends() -> tuple[tuple[str, str], ...]:
    """Why backends failed to start, as JAX noted it when it fell back to another one."""
    errors = internals.backend_errors()
    if errors is None:
        return ()
    return tuple(sorted((str(k), " ".join(str(v).split())) for k, v in errors.items()))


def not_installed(name: str, evidence: Evidence, expect: Platform | None = None) -> bool:
    """JAX's error for backend ``name`` means only that it is absent, not that it broke.

    JAX tries a TPU on every machine, so a CPU-only box always holds "Failed to
    open libtpu.so". That is no failure when no plugin gives the platform and
    nobody asked for it (``expect`` or JAX_PLATFORMS); asked for, it still is one.
    """
    platform = Platform.named(name)
    if platform is None or platform is Platform.CPU or platform is expect:
        return False
    asked = {p.strip() for p in (evidence.jax_platforms or "").split(",")}
    if platform.backend_names & asked:
        return False
    if platform is Platform.GPU:
        return not any(p.startswith(_GPU_PLUGIN_PREFIXES) for p in evidence.plugins)
    return not _TPU_PLUGINS & set(evidence.plugins)


def check_required(required: str | None, info: PlatformInfo) -> str | None:
    """None when JAX runs on ``required`` (or nothing is required), else one line:
    what was expected, what was found, and the likely cause."""
    if required is None:
        return None
    try:
        wanted = Platform(required)
    except ValueError:
        raise ValueError(
            f"unknown platform {required!r}; expected one of {', '.join(PLATFORMS)}"
        ) from None
    if info.platform == required:
        return None
    # Never empty: a PlatformInfo always names the backend JAX did start.
    cause = likely_causes(wanted, info.evidence, named=required)[0]
    return (
        f"this region requires {required}, but JAX runs on {info.describe()}; likely cause: {cause}"
    )


def likely_causes(required: Platform, evidence: Evidence, *, named: str) -> list[str]:
    """Why JAX is not on ``required``, most likely first, each as a fix to apply.

    ``named`` is how the caller's message names ``required`` ("gpu" after
    "requires gpu", "GPU" after "expected a GPU"). Empty only for a CPU
    wanted where JAX started no backend for lack of one.
    """
    causes = []
    platforms = evidence.jax_platforms
    if platforms and not required.backend_names & {p.strip() for p in platforms.split(",")}:
        causes.append(f"JAX_PLATFORMS={platforms} keeps JAX off the {named}; unset it")
    # JAX's own reason is the most specific evidence there is.
    causes.extend(
        f"JAX could not start its {name} backend: {why}"
        for name, why in evidence.backend_errors
        if name in required.backend_names
    )
    if required is Platform.GPU:
        causes.extend(_gpu_causes(evidence, any_yet=bool(causes)))
    elif required is Platform.TPU:
        causes.extend(_tpu_causes(evidence, any_yet=bool(causes)))
    elif evidence.backend is not None:
        causes.append(
            f"JAX picks an accelerator ({evidence.backend}) when it finds one; "
            "set JAX_PLATFORMS=cpu to run on the CPU"
        )
    return causes


def _gpu_causes(evidence: Evidence, *, any_yet: bool) -> list[str]:
    causes = []
    if not any(name.startswith(_GPU_PLUGIN_PREFIXES) for name in evidence.plugins):
        causes.append(
            "a CPU-only jaxlib: no jax-cuda12-plugin or jax-cuda13-plugin is installed; "
            'install "jax[cuda12]" or "jax[cuda13]"'
        )
    if not evidence.nvidia_device_files:
        causes.append(
            "no NVIDIA GPU in this container (no /dev/nvidia0): start it with --gpus all "
            "(a workflow job: container options: --gpus all) on a host with the NVIDIA "
            "driver and the NVIDIA Container Toolkit"
        )
    capabilities = evidence.driver_capabilities
    if capabilities is not None and not has_compute(capabilities):
        causes.append(
            f"NVIDIA_DRIVER_CAPABILITIES={capabilities} lacks 'compute', so libcuda is not "
            "mounted; set compute,utility"
        )
    elif evidence.nvidia_device_files and not evidence.libcuda:
        causes.append(
            "the NVIDIA driver is missing or not mounted (libcuda.so.1 not found): install it "
            "on the host, and the NVIDIA Container Toolkit for containers"
        )
    if not causes and not any_yet:
        causes.append(
            "the CUDA plugin and the GPU are there but JAX could not start it: check "
            "nvidia-smi and that the driver supports this CUDA version"
        )
    return causes


def _tpu_causes(evidence: Evidence, *, any_yet: bool) -> list[str]:
    causes = []
    if not _TPU_PLUGINS & set(evidence.plugins):
        causes.append('libtpu is not installed; install "jax[tpu]"')
    if not evidence.tpu_device_files:
        causes.append("no TPU device files (/dev/accel*, /dev/vfio): not a TPU VM")
    if not causes and not any_yet:
        causes.append("the TPU may be held by another process")
    return causes


def has_compute(capabilities: str) -> bool:
    """NVIDIA_DRIVER_CAPABILITIES lets the container toolkit mount libcuda."""
    names = {c.strip() for c in capabilities.split(",")}
    return bool(names & {"compute", "all"})


def direction_coverage(info: PlatformInfo, detector_active: bool) -> dict[Direction, CoverageJudge]:
    """Per direction, what judged it on this platform.

    The guard checks host-to-device and device-to-device everywhere, and
    device-to-host only where the buffer really is on a device (GPU, TPU;
    on an unknown backend it is not assumed). The detector sees
    device-to-host on every backend.
    """
    guard_sees_fetches = Platform.named(info.platform) in (Platform.GPU, Platform.TPU)
    if guard_sees_fetches:
        fetches = CoverageJudge.BOTH if detector_active else CoverageJudge.GUARD
    else:
        fetches = CoverageJudge.DETECTOR if detector_active else CoverageJudge.NOT_CHECKED
    return {
        Direction.HOST_TO_DEVICE: CoverageJudge.GUARD,
        Direction.DEVICE_TO_HOST: fetches,
        Direction.DEVICE_TO_DEVICE: CoverageJudge.GUARD,
    }
