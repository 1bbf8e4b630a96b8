"""``transfer-gate doctor``: what JAX sees on this machine, and what that means for the gate.

CI's most expensive silent failure is a GPU job that runs on the CPU: JAX
falls back to the CPU with only a warning when it finds no usable GPU, and
on the CPU the guard never sees a device-to-host transfer. ``doctor
--expect gpu`` turns that into a failed step that names the likely cause.

Where the numbers come from (JAX 0.10):
- ``jax.__version__`` and ``jaxlib.version.__version__``;
- the CUDA plugin's ``_versions`` module, which JAX loads as ``cuda_versions``
  (``jax_cuda13_plugin``, ``jax_cuda12_plugin``; see `gate.jaxhooks.internals`): runtime,
  driver and cuDNN versions, and the ones JAX was built against;
- ``jax.default_backend()``, ``jax.devices()`` and each device's
  ``device_kind`` (and ``compute_capability`` on CUDA);
- the installed distributions ``jax-cuda*-plugin``/``-pjrt`` and ``libtpu``, and the
  versions of ``jax`` and ``jaxlib`` as installed (their metadata, readable also when
  ``import jax`` fails) with jax's own requirement on jaxlib;
- the environment as the gate's process got it, read before JAX is
  imported: ``import jax`` sets ``TF_CPP_MIN_LOG_LEVEL=1`` when it is unset.

The likely causes come from `gate.machine.diagnosis`, the same words a
region's report uses; `gate.cli.doctor` prints this module's findings.
`gate.machine.version_check` checks that those versions agree with each
other and with the user's stated requirements.
Reporting only: doctor runs no step and changes no setting.
"""

from __future__ import annotations

import os
import platform
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.jaxhooks import internals
from gate.levels import Direction
from gate.machine.diagnosis import (
    Evidence,
    Platform,
    cuda_version_text,
    failed_backends,
    installed_jax,
    installed_plugins,
    jaxlib_requirement,
    libcuda_found,
    likely_causes,
    not_installed,
    nvidia_device_files,
    slow_jax_import,
    tpu_device_files,
)
from gate.machine.holders import busy_device_problem
from gate.machine.settings import (
    IGNORED_GUARD_VARIABLES,
    SETTINGS,
    Setting,
    read_settings,
)
from gate.package import __version__, docs_url


@dataclass(frozen=True)
class DeviceGroup:
    """Devices of one kind on the default backend."""

    platform: str  # "gpu", "tpu", "cpu"
    kind: str  # e.g. "NVIDIA H200"
    count: int
    compute_capability: str | None = None


@dataclass(frozen=True)
class Diagnosis:
    """Everything doctor found; `collect` makes it, `format_diagnosis` prints it."""

    python: str
    system: str
    jax_version: str | None  # None: jax does not import
    jaxlib_version: str | None
    plugins: tuple[tuple[str, str], ...]  # (distribution, version) installed
    backend: str | None  # jax.default_backend(); None when JAX could not start
    devices: tuple[DeviceGroup, ...]
    backend_error: str | None  # why JAX could not start, one line
    cuda: tuple[tuple[str, str], ...]  # (component, version text)
    nvidia_device_files: bool  # /dev/nvidia* exist: the container got GPUs
    tpu_device_files: bool  # /dev/accel* or /dev/vfio exist
    environ: Mapping[str, str]  # the settings, as the process got them
    settings: tuple[Setting, ...]
    guard: tuple[tuple[str, str], ...]  # (config name, value)
    libcuda: bool  # the NVIDIA driver's libcuda can be found
    backend_errors: tuple[tuple[str, str], ...] = ()  # (platform, why JAX could not start it)
    installed: tuple[tuple[str, str], ...] = ()  # (distribution, version): jax, jaxlib by metadata
    jaxlib_requirement: str | None = None  # jax's own, e.g. "jaxlib<=0.10.2,>=0.10.1"
    # Another process holds the accelerator JAX tried: who, and what to do (`gate.machine.holders`).
    busy_device: str | None = None
    # Why every worker's `import jax` is slow here, from the installed numpy and ml_dtypes.
    slow_import: str | None = None

    @property
    def evidence(self) -> Evidence:
        return Evidence(
            backend=self.backend,
            jax_platforms=self.environ.get("JAX_PLATFORMS"),
            plugins=tuple(name for name, _ in self.plugins),
            nvidia_device_files=self.nvidia_device_files,
            tpu_device_files=self.tpu_device_files,
            libcuda=self.libcuda,
            driver_capabilities=self.environ.get("NVIDIA_DRIVER_CAPABILITIES"),
            backend_errors=self.backend_errors,
        )


def collect(
    environ: Mapping[str, str] | None = None, gate_environ: Mapping[str, str] | None = None
) -> Diagnosis:
    """Look at this machine: versions, devices, settings. Imports jax (not before reading env).

    ``gate_environ``: what the gate's workers run with (`read_settings`).
    """
    snapshot = {
        name: value
        for name, value in (os.environ if environ is None else environ).items()
        if name in SETTINGS or name in IGNORED_GUARD_VARIABLES
    }
    jax_version = jaxlib_version = backend = backend_error = None
    devices: tuple[DeviceGroup, ...] = ()
    cuda: tuple[tuple[str, str], ...] = ()
    guard: tuple[tuple[str, str], ...] = ()
    cache_dir = snapshot.get("JAX_COMPILATION_CACHE_DIR")
    min_compile_s: float | None = None
    try:
        import jax
        import jaxlib.version

        jax_version = str(jax.__version__)
        jaxlib_version = str(jaxlib.version.__version__)
        guard = _guard_config(jax.config)
        cache_dir = getattr(jax.config, "jax_compilation_cache_dir", None) or cache_dir
        min_compile_s = getattr(jax.config, "jax_persistent_cache_min_compile_time_secs", None)
        cuda = _cuda_versions()
        backend = str(jax.default_backend())
        devices = _device_groups(jax.devices())
    except Exception as exc:  # doctor reports a broken JAX rather than breaking on it
        backend_error = _exception_text(exc)
    backend_errors = failed_backends() if jax_version is not None else ()
    return Diagnosis(
        python=platform.python_version(),
        system=f"{platform.system()} {platform.release()} {platform.machine()}",
        jax_version=jax_version,
        jaxlib_version=jaxlib_version,
        plugins=installed_plugins(),
        backend=backend,
        devices=devices,
        backend_error=backend_error,
        cuda=cuda,
        nvidia_device_files=nvidia_device_files(),
        tpu_device_files=tpu_device_files(),
        environ=snapshot,
        settings=read_settings(snapshot, cache_dir, min_compile_s, gate_environ),
        guard=guard,
        libcuda=libcuda_found(),
        backend_errors=backend_errors,
        installed=installed_jax(),
        jaxlib_requirement=jaxlib_requirement(),
        busy_device=_busy_device([backend_error or "", *(why for _, why in backend_errors)]),
        slow_import=slow_jax_import(),
    )


def _busy_device(errors: list[str]) -> str | None:
    """Who holds the device, when JAX's reason for not starting a backend is that it is held."""
    for error in errors:
        problem = busy_device_problem(error)
        if problem is not None:
            return problem
    return None


def _exception_text(exc: BaseException) -> str:
    """One line; where JAX raised without a message, where it raised instead."""
    text = " ".join(str(exc).split())
    if text:
        return f"{type(exc).__name__}: {text}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}, without a message"


def _device_groups(devices: list[Any]) -> tuple[DeviceGroup, ...]:
    counts: Counter[tuple[str, str, str | None]] = Counter()
    for device in devices:
        capability = getattr(device, "compute_capability", None)
        counts[(str(device.platform), str(device.device_kind), capability and str(capability))] += 1
    return tuple(
        DeviceGroup(platform, kind, count, capability)
        for (platform, kind, capability), count in counts.items()
    )


def _guard_config(config: Any) -> tuple[tuple[str, str], ...]:
    names = ["jax_transfer_guard"] + [f"jax_transfer_guard_{d.value}" for d in Direction]
    return tuple((name, str(getattr(config, name, None))) for name in names)


def _cuda_versions() -> tuple[tuple[str, str], ...]:
    """CUDA components as the CUDA plugin reports them; () without a CUDA plugin."""
    cuda_versions = internals.cuda_versions_module()
    if cuda_versions is None:
        return ()
    found: list[tuple[str, str]] = []
    components: tuple[tuple[str, str, str | None, Callable[[int], str]], ...] = (
        (
            "CUDA runtime",
            "cuda_runtime_get_version",
            "cuda_runtime_build_version",
            cuda_version_text,
        ),
        ("CUDA driver", "cuda_driver_get_version", None, cuda_version_text),
        ("cuDNN", "cudnn_get_version", "cudnn_build_version", _cudnn),
    )
    for label, getter, build_getter, spell in components:
        version = _call(cuda_versions, getter)
        # cudaDriverGetVersion answers 0 when no driver is loaded.
        text = spell(version) if version else "not found"
        built = _call(cuda_versions, build_getter) if build_getter else None
        if built is not None:
            text += f" (JAX built against {spell(built)})"
        found.append((label, text))
    return tuple(found)


def _call(module: Any, name: str) -> int | None:
    # Each getter loads its library; one that is missing raises, the rest still answer.
    try:
        return int(getattr(module, name)())
    except Exception:
        return None


def _cudnn(version: int) -> str:
    """cuDNN's encoding: 10000 * major + 100 * minor + patch from 9.0 on, 1000 * major before."""
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


# --- the verdict ---------------------------------------------------------------------------------


def expectation_problem(diagnosis: Diagnosis, expect: Platform) -> str | None:
    """What is wrong when JAX does not run on `expect`: expected, found, likely causes; or,
    when another process holds the accelerator, who holds it and what to do."""
    if Platform.named(diagnosis.backend) is expect:
        return None
    if diagnosis.busy_device is not None:
        return diagnosis.busy_device
    if diagnosis.backend is not None:
        found = f"JAX runs on {diagnosis.backend} ({_devices_text(diagnosis)})"
    elif diagnosis.jax_version is None:
        found = f"jax does not import ({diagnosis.backend_error})"
    else:
        found = f"JAX could not start a backend ({diagnosis.backend_error})"
    causes = _causes(diagnosis, expect)
    text = f"expected a {expect.value.upper()}, but {found}."
    if causes:
        text += "\nlikely cause: " + "\nlikely cause: ".join(causes)
    return text


def doctor_problem(diagnosis: Diagnosis, expect: Platform | None) -> str | None:
    """Why doctor fails: `expect` not met, or (without one) JAX starting no backend; else None."""
    if expect is not None:
        return expectation_problem(diagnosis, expect)
    if diagnosis.backend is not None:
        return None
    if diagnosis.busy_device is not None:
        return diagnosis.busy_device
    problem = f"JAX cannot start: {diagnosis.backend_error}."
    # What JAX_PLATFORMS asks for first is what JAX failed to start.
    first = (diagnosis.environ.get("JAX_PLATFORMS") or "").split(",")[0].strip()
    requested = Platform.named(first)
    if requested is not None:
        problem += "".join(f"\nlikely cause: {cause}" for cause in _causes(diagnosis, requested))
    return problem


def _causes(diagnosis: Diagnosis, expect: Platform) -> list[str]:
    # Named as the verdict names it: "expected a GPU".
    return likely_causes(expect, diagnosis.evidence, named=expect.value.upper())


# --- output --------------------------------------------------------------------------------------


def _devices_text(diagnosis: Diagnosis) -> str:
    if not diagnosis.devices:
        return "no devices"
    parts = []
    for group in diagnosis.devices:
        text = f"{group.kind} x{group.count}"
        if group.compute_capability:
            text += f" (compute capability {group.compute_capability})"
        parts.append(text)
    return ", ".join(parts)


def format_diagnosis(diagnosis: Diagnosis, expect: Platform | None = None) -> str:
    """The report doctor prints; no trailing newline. A backend that is not installed, and
    not `expect`ed, reads as such rather than as a failure."""
    rows = [
        ("transfer-gate", __version__),
        ("python", f"{diagnosis.python} on {diagnosis.system}"),
        ("jax", diagnosis.jax_version or "not importable"),
        ("jaxlib", diagnosis.jaxlib_version or "not importable"),
        (
            "plugins",
            ", ".join(f"{name} {version}" for name, version in diagnosis.plugins)
            or "none (a CPU-only jaxlib)",
        ),
        ("backend", diagnosis.backend or f"none: {diagnosis.backend_error}"),
        ("devices", _devices_text(diagnosis)),
    ]
    rows.extend(diagnosis.cuda)
    rows.extend(
        (name, "not installed")
        if not_installed(name, diagnosis.evidence, expect)
        else (f"{name} failed", why)
        for name, why in diagnosis.backend_errors
    )
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    lines.append("")
    lines.append("settings:")
    for setting in diagnosis.settings:
        value = setting.value if setting.value is not None else "(unset)"
        mark = "warning: " if setting.warning else ""
        lines.append(f"  {setting.name}={value}")
        lines.append(f"    {mark}{setting.meaning}")
    if diagnosis.guard:
        lines.append("")
        lines.append("transfer guard (JAX's config now; the gate sets levels per region):")
        lines.extend(
            f"  {name} = {'unset (allow)' if value == 'None' else value}"
            for name, value in diagnosis.guard
        )
    if diagnosis.backend == "cpu":
        lines.append("")
        lines.append(
            "note: on the CPU JAX's guard never sees device-to-host transfers (print(x), "
            "float(x), np.asarray(x)); the gate's own detector judges that direction there "
            f"instead ({docs_url('docs/how-it-works.md')}), and each region's report says what "
            "judged it."
        )
    if diagnosis.slow_import is not None:
        lines.append("")
        lines.append(f"note: {diagnosis.slow_import}")
    return "\n".join(lines)
