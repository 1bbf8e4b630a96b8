"""The README stays a five-minute read and the pages in docs/ stay true and reachable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import run_gate

from gate.cli.exit_codes import ExitCode
from gate.policy.load import BUILTIN_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MARKDOWN = [README, *PAGES]

# [text](target) or [text](target "title"); images too. Reference-style links are not used.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose(text: str) -> str:
    """The text outside fenced code blocks, with inline code spans kept as plain text."""
    kept, fence = [], ""
    for line in text.splitlines():
        marker = re.match(r"\s*(```+|~~~+)", line)
        if marker:
            if not fence:
                fence = marker.group(1)
                continue
            if marker.group(1).startswith(fence):
                fence = ""
                continue
        if not fence:
            kept.append(line)
    return "\n".join(kept)


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives a Markdown file (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link: its text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_readme_is_under_10_kb() -> None:
    size = len(README.read_bytes())
    assert size < 10 * 1024, f"README.md is {size} bytes: move detail to a page in docs/"


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if SCHEME.match(target):
            continue  # https:, mailto: ...: not this repository's to check
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert PAGES
    for page in PAGES:
        if page.name != "README.md":
            assert f"](docs/{page.name})" in text, f"README.md does not link docs/{page.name}"


def test_the_command_reference_documents_every_exit_code() -> None:
    # README.md's own table is pinned by tests/test_cli.py.
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"| {code.value} | {code.meaning} |" in text


def readme_policy() -> str:
    text = README.read_text(encoding="utf-8").split("## A minimal policy", 1)[1]
    return text.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_readmes_minimal_policy_is_valid(tmp_path: Path) -> None:
    policy = tmp_path / "train.yaml"
    policy.write_text(readme_policy(), encoding="utf-8")
    done = run_gate(ROOT, "validate", str(policy))
    assert done.returncode == 0, done


def test_the_readme_states_the_gates_defaults() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split("## A minimal policy", 1)[1].split())
    for key, value in BUILTIN_DEFAULTS.items():
        assert f"`{key}: {value}`" in text, key


def test_the_docs_failing_example_is_what_the_gate_prints(tmp_path: Path) -> None:
    text = (DOCS / "reports.md").read_text()
    intro = "`transfer-gate run\nexamples/policies/leaky.yaml` reads"
    block = text.split(intro, 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    run = run_gate(
        ROOT, "run", "examples/policies/leaky.yaml", "--junit", str(tmp_path / "leaky.xml"),
        report=str(tmp_path / "leaky.xml"),
    )  # fmt: skip
    assert run.returncode == 1, run
    printed = "".join(
        line + "\n" for line in run.stdout.splitlines() if not line.startswith("report:")
    )

    def steady(output: str) -> str:
        # The platform line names this machine's JAX; the median is a measurement, and XLA's
        # flop count is exact for one JAX but moves a little between versions (603k, 604k).
        output = re.sub(r"^platform: .*$", "platform: …", output, flags=re.MULTILINE)
        output = re.sub(r"\d+(\.\d+)? [kMGTP]?FLOP/step", "… FLOP/step", output)
        return re.sub(r"median \d+(\.\d+)? [µm]?s", "median …", output)

    assert steady(printed) == steady(block), run
