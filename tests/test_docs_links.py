"""Every relative link in the README, ARCHITECTURE.md and docs/ resolves: the file exists,
and a ``#anchor`` into a Markdown page names one of its headings; the README's docs table
lists every page, and its first two commands are the install and demo and the test command
``.ci/run`` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _prose(page: Path) -> str:
    return FENCE.sub("", page.read_text())


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    heads = re.findall(r"^#+\s+(.*?)\s*$", _prose(page), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def _relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(page)) if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def test_the_pages_have_relative_links() -> None:
    assert sum(len(_relative_links(p)) for p in PAGES) > 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path) if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, broken


def test_the_readme_lists_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", table))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages - listed == set(), "pages missing from the README's docs table"


def test_the_readme_starts_with_install_demo_and_the_ci_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    first, second = (ln.split("  #")[0].strip() for ln in block.splitlines()[:2])
    assert first.startswith("pip install -e ") and first.endswith("&& lb demo"), first
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert second in ci, f"{second!r} is not what .ci/run runs"
