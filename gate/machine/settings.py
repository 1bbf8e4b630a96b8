"""What the settings that matter to the gate mean on this machine, for ``transfer-gate doctor``.

Read from the environment as the gate's process got it, before JAX is
imported: ``import jax`` sets ``TF_CPP_MIN_LOG_LEVEL=1`` when it is unset.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gate.levels import Direction
from gate.machine.diagnosis import has_compute

# The variables doctor reads, as the job gave them to the gate's process.
SETTINGS = (
    "JAX_PLATFORMS",
    "XLA_FLAGS",
    "TF_CPP_MIN_LOG_LEVEL",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_TRANSFER_GUARD",
    "NVIDIA_DRIVER_CAPABILITIES",
)
# JAX reads only JAX_TRANSFER_GUARD: with JAX 0.10.2, JAX_TRANSFER_GUARD_DEVICE_TO_HOST=disallow
# still leaves jax.config.jax_transfer_guard_device_to_host at None after `import jax`.
IGNORED_GUARD_VARIABLES = tuple(f"JAX_TRANSFER_GUARD_{d.name}" for d in Direction)


@dataclass(frozen=True)
class Setting:
    """One setting that matters to the gate: its value and what it means here."""

    name: str
    value: str | None  # None: unset
    meaning: str
    warning: bool = False  # it weakens the gate or will break it


def read_settings(
    environ: Mapping[str, str],
    cache_dir: str | None,
    min_compile_s: float | None,
    gate_environ: Mapping[str, str] | None = None,
) -> tuple[Setting, ...]:
    """Each setting in ``environ`` (and JAX's cache config) with what it means for the gate.

    ``gate_environ`` is the environment the gate runs its workers with
    (`gate.isolation.environment.prepare_environment` of ``environ``), where the command
    knows it: a setting the gate overrides for itself says so.
    """
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
        _log_level(
            environ.get("TF_CPP_MIN_LOG_LEVEL"),
            (gate_environ or environ).get("TF_CPP_MIN_LOG_LEVEL"),
        ),
        cache_setting(cache_dir, min_compile_s),
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
        for name in IGNORED_GUARD_VARIABLES
        if name in environ
    )
    capabilities = environ.get("NVIDIA_DRIVER_CAPABILITIES")
    if capabilities is not None and not has_compute(capabilities):
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


def _xla_flags(flags: str | None) -> str:
    if not flags:
        return "no extra XLA flags"
    if "xla_force_host_platform_device_count" in flags:
        return "as set; --xla_force_host_platform_device_count fakes several CPU devices"
    return "as set"


def _log_level(value: str | None, gate_runs_with: str | None) -> Setting:
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
    if gate_runs_with is not None and gate_runs_with != value:
        # The gate sets its own level (gate.isolation.environment.prepare_environment), but
        # every other JAX program in the job keeps this one.
        meaning += (
            f"; the gate runs with {gate_runs_with} and keeps them, but other JAX "
            "programs in this job (pytest) do not"
        )
    return Setting(name, value, meaning)


def cache_setting(cache_dir: str | None, min_compile_s: float | None) -> Setting:
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
