"""Do jax, jaxlib and the GPU plugins agree with each other, and with what the user's code asks for?

For ``transfer-gate doctor``. Among themselves: jaxlib must meet jax's own requirement on it
(jax's metadata; without it, one minor release), and each ``jax-cuda*``/``jax-rocm*`` plugin
and PJRT distribution must be at jaxlib's version: JAX uses no other one (it warns and runs
without the GPU, or crashes: https://github.com/jax-ml/jax/issues/24901). Against the user:
each requirement on a JAX distribution in a ``--requirements`` file
(`gate.machine.requirements`) must be met by what is installed.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from gate.machine.doctor import Diagnosis
from gate.machine.requirements import Requirement, RequirementsError, parse_requirement
from gate.package import docs_url

DEPENDENCIES_DOC = docs_url("docs/dependencies.md")


def installed_versions(diagnosis: Diagnosis) -> dict[str, str]:
    """Distribution -> version of JAX's own packages here; metadata first, then what imported."""
    found = dict(diagnosis.plugins)
    imported = {"jax": diagnosis.jax_version, "jaxlib": diagnosis.jaxlib_version}
    found.update((name, version) for name, version in imported.items() if version)
    found.update(diagnosis.installed)
    return found


def version_problems(diagnosis: Diagnosis, requirements: tuple[Requirement, ...] = ()) -> list[str]:
    """One line per disagreement: jax, jaxlib and the GPU plugins among themselves, then
    each of the user's ``requirements`` the installed versions do not meet."""
    installed = installed_versions(diagnosis)
    problems = _jaxlib_problems(diagnosis, installed)
    jaxlib = installed.get("jaxlib")
    for name, version in diagnosis.plugins:
        if jaxlib and name.startswith(("jax-cuda", "jax-rocm")) and not _same(version, jaxlib):
            problems.append(
                f"{name} {version} does not match jaxlib {jaxlib}: JAX uses a GPU plugin only at "
                f"jaxlib's version (another one warns and leaves the GPU unused, or crashes); "
                f'pip install "{name}=={jaxlib}"'
            )
    for requirement in requirements:
        problem = _requirement_problem(requirement, installed)
        if problem is not None:
            problems.append(problem)
    return problems


def _jaxlib_problems(diagnosis: Diagnosis, installed: dict[str, str]) -> list[str]:
    jax, jaxlib = installed.get("jax"), installed.get("jaxlib")
    if jax is None or jaxlib is None:
        return []
    fix = f'pip install "jax=={jax}" "jaxlib=={jax}"'
    wanted = _parsed(diagnosis.jaxlib_requirement)
    if wanted is not None:
        if _admits(wanted, jaxlib) is False:
            return [
                f"jax {jax} needs {wanted.text} (its own requirement), but jaxlib {jaxlib} is "
                f"installed; {fix}"
            ]
        return []
    # No metadata to go by (a jax from source): JAX releases jax and jaxlib together.
    try:
        if Version(jax).release[:2] != Version(jaxlib).release[:2]:
            return [f"jax {jax} and jaxlib {jaxlib} are not of one minor release; {fix}"]
    except InvalidVersion:
        pass
    return []


def _parsed(text: str | None) -> Requirement | None:
    if text is None:
        return None
    try:
        return parse_requirement(text, "jax's metadata")
    except RequirementsError:
        return None


def _admits(requirement: Requirement, version: str) -> bool | None:
    """Whether ``version`` meets it; None when the installed version is not PEP 440.

    An installed pre-release counts as inside a specifier it is inside, as ``pip check``
    counts it: doctor judges what is installed, not what to download.
    """
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return None


def _same(plugin: str, jaxlib: str) -> bool:
    # `==jaxlib.*`: jax pins jax-rocm7-plugin==0.10.2.* and the CUDA plugins to jaxlib exactly.
    try:
        wanted, found = Version(jaxlib), Version(plugin)
    except InvalidVersion:
        return plugin == jaxlib
    padded = found.release + (0,) * (len(wanted.release) - len(found.release))
    return found.epoch == wanted.epoch and padded[: len(wanted.release)] == wanted.release


def _requirement_problem(requirement: Requirement, installed: dict[str, str]) -> str | None:
    if requirement.unchecked is not None:
        return None
    where, text, name = requirement.where, requirement.text, requirement.name
    version = installed.get(name)
    if version is None:
        return (
            f"{where}: {text} asks for {name}, which is not installed here; install it in "
            f"the gate's environment, or run the gate in an image that has it ({DEPENDENCIES_DOC})"
        )
    if _admits(requirement, version) is False:
        return (
            f"{where}: {text} is not met: {name} {version} is installed; run the gate with a "
            f"JAX that meets it (the gate's image: --build-arg JAX_VERSION=...), or change the "
            f"requirement ({DEPENDENCIES_DOC})"
        )
    return None


def requirements_text(
    diagnosis: Diagnosis, files: tuple[tuple[str, tuple[Requirement, ...]], ...]
) -> str:
    """The ``requirements:`` section: each stated JAX requirement and what is installed."""
    installed = installed_versions(diagnosis)
    lines = ["requirements:"]
    for path, requirements in files:
        if not requirements:
            lines.append(f"  {path}: names no JAX distribution; nothing to check")
        for requirement in requirements:
            version = installed.get(requirement.name)
            found = f"{requirement.name} {version}" if version else "not installed"
            if requirement.unchecked is not None:
                verdict = f"not checked: {requirement.unchecked}"
            elif version is None:
                verdict = "not met"
            else:
                verdict = {True: "met", False: "not met", None: "not checked: not PEP 440"}[
                    _admits(requirement, version)
                ]
            lines.append(f"  {requirement.where}  {requirement.text}: {found}, {verdict}")
    return "\n".join(lines)
