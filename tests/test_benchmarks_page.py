"""BENCHMARKS.md is the one-page summary and docs/benchmarks/ holds its sections: the page stays short and every
link from it, and between the sections, lands on a file and a heading that exist.

Fast: reads Markdown files, nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "BENCHMARKS.md"
SECTIONS = ROOT / "docs" / "benchmarks"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens.

    :returns: the fragment without its ``#``.
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, fenced code left out."""
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.*)", line)):
            found.add(github_anchor(match.group(1)))
    return found


def markdown_files() -> list[Path]:
    return [SUMMARY, *sorted(SECTIONS.glob("*.md"))]


def test_the_summary_is_under_30_kb_and_links_each_row_to_a_section():
    assert SUMMARY.stat().st_size < 30_000, SUMMARY.stat().st_size
    rows = [line for line in SUMMARY.read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 30
    for row in rows:
        assert "](docs/benchmarks/" in row, row
    capabilities = {row.split("|")[1].strip() for row in rows}
    assert {"CI time", "bad inputs"} <= capabilities


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_lands_on_a_file_and_heading(path):
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{path.name}: {target} does not exist"
        if fragment and linked.suffix == ".md":
            assert fragment in anchors(linked), f"{path.name}: no heading #{fragment} in {linked.name}"
