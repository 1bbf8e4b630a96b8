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
- the installed distributions ``jax-cuda*-plugin``/``-pjrt`` and ``libtpu``;
- the environment as the gate's process got it, read before JAX is
  imported: ``import jax`` sets ``TF_CPP_MIN_LOG_LEVEL=1`` when it is unset.

Reporting only: doctor runs no step and changes no setting.
"""

from __future__ import annotations

import enum
import glob
import importlib.metadata
import os
import platform
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate import __version__
from gate.jaxhooks import internals
from gate.policy.levels import Direction
from gate.report.github import in_github_actions, workflow_command
from gate.report.terminal import one_line
from gate.witness.transfer_map import prepare_environment

DOCTOR_OK = 0
DOCTOR_FAILED = 1  # the expected accelerator is missing, or JAX cannot start at all
DOCTOR_BUG = 3  # as for `run`: the gate itself broke

EXIT_CODES_HELP = (
    "exit codes:\n"
    f"  {DOCTOR_OK}  JAX starts (and has the --expect'ed accelerator)\n"
    f"  {DOCTOR_FAILED}  the --expect'ed accelerator is missing, or JAX cannot start\n"
    "  2  usage error\n"
    f"  {DOCTOR_BUG}  doctor itself broke (a bug: please report it)"
)

# Distributions that give jaxlib a GPU or TPU backend, newest CUDA first as JAX tries them.
_PLUGIN_DISTRIBUTIONS = (
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

_SETTINGS = (
    "JAX_PLATFORMS",
    "XLA_FLAGS",
    "TF_CPP_MIN_LOG_LEVEL",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_TRANSFER_GUARD",
    "NVIDIA_DRIVER_CAPABILITIES",
)
# JAX reads only JAX_TRANSFER_GUARD; these are reset when jax is imported (FIELD-NOTES).
_IGNORED_GUARD_VARIABLES = tuple(f"JAX_TRANSFER_GUARD_{d.name}" for d in Direction)


class Accelerator(enum.Enum):
    """What ``--expect`` can ask for; the value is how JAX names the backend."""

    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


@dataclass(frozen=True)
class DeviceGroup:
    """Devices of one kind on the default backend."""

    platform: str  # "gpu", "tpu", "cpu"
    kind: str  # e.g. "NVIDIA H200"
    count: int
    compute_capability: str | None = None


@dataclass(frozen=True)
class Setting:
    """One setting that matters to the gate: its value and what it means here."""

    name: str
    value: str | None  # None: unset
    meaning: str
    warning: bool = False  # it weakens the gate or will break it


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
    backend_errors: tuple[tuple[str, str], ...] = ()  # (platform, why JAX could not start it)


def collect(environ: Mapping[str, str] | None = None) -> Diagnosis:
    """Look at this machine: versions, devices, settings. Imports jax (not before reading env)."""
    snapshot = {
        name: value
        for name, value in (os.environ if environ is None else environ).items()
        if name in _SETTINGS or name in _IGNORED_GUARD_VARIABLES
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
    backend_errors = _backend_errors() if jax_version is not None else ()
    return Diagnosis(
        python=platform.python_version(),
        system=f"{platform.system()} {platform.release()} {platform.machine()}",
        jax_version=jax_version,
        jaxlib_version=jaxlib_version,
        plugins=_installed(_PLUGIN_DISTRIBUTIONS),
        backend=backend,
        devices=devices,
        backend_error=backend_error,
        cuda=cuda,
        nvidia_device_files=bool(glob.glob("/dev/nvidia[0-9]*")),
        tpu_device_files=bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")),
        environ=snapshot,
        settings=_settings(snapshot, cache_dir, min_compile_s),
        guard=guard,
        backend_errors=backend_errors,
    )


def _backend_errors() -> tuple[tuple[str, str], ...]:
    """Why backends failed to start, as JAX noted it (``xla_bridge._backend_errors``).

    Private to JAX, so optional: without it the causes are less specific,
    never wrong. JAX fills it when a plugin (CUDA, TPU) fails to initialize
    and falls back to another backend with only a warning.
    """
    errors = internals.backend_errors()
    if errors is None:
        return ()
    return tuple(sorted((str(name), one_line(str(why))) for name, why in errors.items()))


def _exception_text(exc: BaseException) -> str:
    """One line; where JAX raised without a message, where it raised instead."""
    text = one_line(str(exc))
    if text:
        return f"{type(exc).__name__}: {text}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}, without a message"


def _installed(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found = []
    for name in names:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(found)


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
        ("CUDA runtime", "cuda_runtime_get_version", "cuda_runtime_build_version", _cuda),
        ("CUDA driver", "cuda_driver_get_version", None, _cuda),
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


def _cuda(version: int) -> str:
    """CUDA's encoding, 1000 * major + 10 * minor: 12080 is 12.8."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _cudnn(version: int) -> str:
    """cuDNN's encoding: 10000 * major + 100 * minor + patch from 9.0 on, 1000 * major before."""
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


# --- what the settings mean ----------------------------------------------------------------------


def _settings(
    environ: Mapping[str, str], cache_dir: str | None, min_compile_s: float | None
) -> tuple[Setting, ...]:
    platforms = environ.get("JAX_PLATFORMS")
    settings = [
        Setting(
            "JAX_PLATFORMS",
            platforms,
            f"JAX uses only {platforms}"
            if platforms
            else "JAX takes the best backend it finds, and falls back to the CPU with only a "
            "warning when a GPU plugin finds no GPU",
        ),
        Setting("XLA_FLAGS", environ.get("XLA_FLAGS"), _xla_flags(environ.get("XLA_FLAGS"))),
        _log_level(environ.get("TF_CPP_MIN_LOG_LEVEL")),
        _cache(cache_dir, min_compile_s),
    ]
    guard_default = environ.get("JAX_TRANSFER_GUARD")
    if guard_default:
        settings.append(
            Setting(
                "JAX_TRANSFER_GUARD",
                guard_default,
                "JAX's process-wide level: the gate sets each region's levels from its policy "
                "while the region runs, and this applies everywhere else",
            )
        )
    settings.extend(
        Setting(
            name,
            environ[name],
            "ignored: JAX resets the per-direction levels when it is imported; set levels "
            "per region with `guard:` in the policy",
            warning=True,
        )
        for name in _IGNORED_GUARD_VARIABLES
        if name in environ
    )
    capabilities = environ.get("NVIDIA_DRIVER_CAPABILITIES")
    if capabilities is not None and not _has_compute(capabilities):
        settings.append(
            Setting(
                "NVIDIA_DRIVER_CAPABILITIES",
                capabilities,
                "lacks 'compute': the NVIDIA container toolkit then mounts no libcuda, and JAX "
                "finds no GPU; set it to compute,utility (the gate's image does)",
                warning=True,
            )
        )
    return tuple(settings)


def _has_compute(capabilities: str) -> bool:
    names = {c.strip() for c in capabilities.split(",")}
    return bool(names & {"compute", "all"})


def _xla_flags(flags: str | None) -> str:
    if not flags:
        return "no extra XLA flags"
    if "xla_force_host_platform_device_count" in flags:
        return "as set; --xla_force_host_platform_device_count fakes several CPU devices"
    return "as set"


def _log_level(value: str | None) -> Setting:
    """TF_CPP_MIN_LOG_LEVEL, read by jaxlib when it loads: the guard's `log` lines are warnings."""
    name = "TF_CPP_MIN_LOG_LEVEL"
    if value is None:
        return Setting(
            name,
            None,
            "jax sets 1 when it is imported: warnings are shown, so the guard's `log` lines appear",
        )
    meanings = {
        "0": "every message is shown, the guard's `log` lines and jaxlib's INFO lines included",
        "1": "INFO hidden, warnings shown: the guard's `log` lines appear",
        "2": "warnings hidden: every line of the guard's `log` and `log_explicit` levels is lost",
        "3": "warnings and errors hidden: every line of the guard's `log` levels is lost",
    }
    meaning = meanings.get(value.strip(), "not a level from 0 to 3")
    gate_runs_with = dict(os.environ) | {name: value}
    prepare_environment(gate_runs_with)
    if gate_runs_with[name] != value:
        # The gate raises the level for itself (gate.witness.transfer_map.prepare_environment),
        # but every other JAX program in the job keeps this one.
        meaning += (
            f"; the gate runs with {gate_runs_with[name]} and keeps them, but other JAX "
            "programs in this job (pytest) do not"
        )
    return Setting(name, value, meaning)


def _cache(cache_dir: str | None, min_compile_s: float | None) -> Setting:
    name = "JAX_COMPILATION_CACHE_DIR"
    if not cache_dir:
        return Setting(
            name, None, "no persistent compilation cache: every run compiles from scratch"
        )
    threshold = (
        f"; JAX stores compilations that took at least {min_compile_s:g} s"
        if min_compile_s is not None
        else ""
    )
    problem = _unwritable(Path(cache_dir))
    if problem:
        return Setting(name, cache_dir, f"{problem}: JAX will not cache compilations", True)
    return Setting(name, cache_dir, f"writable{threshold}")


def _unwritable(folder: Path) -> str:
    """Why `folder` cannot hold cache entries, or "" when it can."""
    if folder.exists() and not folder.is_dir():
        return "not a folder"
    if folder.is_dir():
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".transfer-gate-doctor-"):
                return ""
        except OSError as exc:
            return f"not writable ({exc.strerror or exc})"
    existing = folder.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be created ({existing} is not a folder)"
    # JAX creates the folder; try the same (and take it back) rather than trust
    # os.access, which says yes to root even where nothing can be written.
    try:
        Path(tempfile.mkdtemp(dir=existing, prefix=".transfer-gate-doctor-")).rmdir()
    except OSError as exc:
        return f"does not exist and cannot be created in {existing} ({exc.strerror or exc})"
    return ""


# --- the verdict ---------------------------------------------------------------------------------


def found_accelerator(diagnosis: Diagnosis) -> Accelerator | None:
    """The accelerator JAX runs on by default; None when JAX could not start."""
    backend = diagnosis.backend
    if backend is None:
        return None
    if backend in ("gpu", "cuda", "rocm"):
        return Accelerator.GPU
    if backend == "tpu":
        return Accelerator.TPU
    if backend == "cpu":
        return Accelerator.CPU
    return None


def expectation_problem(diagnosis: Diagnosis, expect: Accelerator) -> str | None:
    """What is wrong when JAX does not run on `expect`: expected, found, likely causes."""
    if found_accelerator(diagnosis) is expect:
        return None
    if diagnosis.backend is not None:
        found = f"JAX runs on {diagnosis.backend} ({_devices_text(diagnosis)})"
    elif diagnosis.jax_version is None:
        found = f"jax does not import ({diagnosis.backend_error})"
    else:
        found = f"JAX could not start a backend ({diagnosis.backend_error})"
    causes = likely_causes(diagnosis, expect)
    text = f"expected a {expect.value.upper()}, but {found}."
    if causes:
        text += "\nlikely cause: " + "\nlikely cause: ".join(causes)
    return text


def _requested(platforms: str | None) -> Accelerator | None:
    """The accelerator JAX_PLATFORMS asks for first, if any."""
    first = (platforms or "").split(",")[0].strip()
    if first in ("cuda", "rocm", "gpu"):
        return Accelerator.GPU
    if first in ("tpu", "cpu"):
        return Accelerator(first)
    return None


def likely_causes(diagnosis: Diagnosis, expect: Accelerator) -> list[str]:
    """Why JAX is not on `expect`, most likely first."""
    causes = []
    platforms = diagnosis.environ.get("JAX_PLATFORMS")
    wanted = {
        Accelerator.GPU: {"cuda", "rocm", "gpu"},
        Accelerator.TPU: {"tpu"},
        Accelerator.CPU: {"cpu"},
    }[expect]
    if platforms and not wanted & {p.strip() for p in platforms.split(",")}:
        causes.append(
            f"JAX_PLATFORMS={platforms} keeps JAX off the {expect.value.upper()}; unset it"
        )
    plugins = {name for name, _ in diagnosis.plugins}
    started = {
        Accelerator.GPU: ("cuda", "rocm", "gpu"),
        Accelerator.TPU: ("tpu",),
        Accelerator.CPU: ("cpu",),
    }[expect]
    causes.extend(
        f"JAX could not start its {name} backend: {why}"
        for name, why in diagnosis.backend_errors
        if name in started
    )
    if expect is Accelerator.GPU:
        if not any(name.startswith(("jax-cuda", "jax-rocm")) for name in plugins):
            causes.append(
                "a CPU-only jaxlib: no jax-cuda12-plugin or jax-cuda13-plugin is installed; "
                'install "jax[cuda12]" (the gate\'s Dockerfile does)'
            )
        if not diagnosis.nvidia_device_files:
            causes.append(
                "no NVIDIA GPU in this container (no /dev/nvidia0): start it with --gpus all "
                "(a workflow job: container options: --gpus all) on a host with the NVIDIA "
                "driver and the NVIDIA Container Toolkit"
            )
        capabilities = diagnosis.environ.get("NVIDIA_DRIVER_CAPABILITIES")
        if capabilities is not None and not _has_compute(capabilities):
            causes.append(
                f"NVIDIA_DRIVER_CAPABILITIES={capabilities} lacks 'compute', so libcuda is not "
                "mounted; set compute,utility"
            )
        if not causes:
            causes.append(
                "the CUDA plugin is installed and the GPU device files exist, but JAX could not "
                "use the GPU: check nvidia-smi and that the driver is new enough for the CUDA "
                "version above"
            )
    elif expect is Accelerator.TPU:
        if not plugins & {"libtpu", "libtpu-nightly"}:
            causes.append('libtpu is not installed; install "jax[tpu]"')
        if not diagnosis.tpu_device_files:
            causes.append("no TPU device files (/dev/accel*, /dev/vfio): not a TPU VM")
        if not causes:
            causes.append("the TPU may be held by another process")
    elif diagnosis.backend is not None and not platforms:
        causes.append("JAX prefers an accelerator when it finds one; set JAX_PLATFORMS=cpu")
    return causes


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


def format_diagnosis(diagnosis: Diagnosis) -> str:
    """The report doctor prints; no trailing newline."""
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
    rows.extend((f"{name} failed", why) for name, why in diagnosis.backend_errors)
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
            "note: on the CPU the guard never sees device-to-host transfers (print(x), "
            "float(x), np.asarray(x)); a CPU run does not judge that direction."
        )
    return "\n".join(lines)


def main_doctor(
    expect: str | None,
    environ: Mapping[str, str] | None = None,
    diagnosis: Diagnosis | None = None,
) -> int:
    """The ``doctor`` command: print the diagnosis; 1 when `expect` is not met or JAX is broken."""
    environ = os.environ if environ is None else environ
    try:
        diagnosis = collect(environ) if diagnosis is None else diagnosis
        report = format_diagnosis(diagnosis)
    except Exception:
        traceback.print_exc()
        print("error: transfer-gate doctor itself failed; this is a bug", file=sys.stderr)
        return DOCTOR_BUG
    print(report)
    problem: str | None
    if expect is not None:
        problem = expectation_problem(diagnosis, Accelerator(expect))
    elif diagnosis.backend is None:
        problem = f"JAX cannot start: {diagnosis.backend_error}."
        requested = _requested(diagnosis.environ.get("JAX_PLATFORMS"))
        if requested is not None:
            problem += "".join(
                f"\nlikely cause: {cause}" for cause in likely_causes(diagnosis, requested)
            )
    else:
        problem = None
    if problem is None:
        if expect is not None:
            print(f"\nok: JAX runs on the expected {expect.upper()}")
        return DOCTOR_OK
    sys.stdout.flush()  # the diagnosis first, then the verdict, also when both go to one log
    print(f"\nerror: {problem}", file=sys.stderr)
    if in_github_actions(environ):
        print(workflow_command("error", problem, title="transfer-gate doctor"))
    return DOCTOR_FAILED
