"""The README is a front door: the two commands first, at most 200 lines, and every page it or the docs link to
exists (a moved paragraph stays reachable)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "results").glob("*/README.md"))]


def test_the_readme_opens_with_the_two_commands_and_is_short():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert [line.split()[:2] for line in block.strip().splitlines()] == [["make", "demo"], ["make", "test"]]
    assert len(text.splitlines()) <= 200


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    missing = [
        m.group(1)
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        if not m.group(1).startswith(("http://", "https://", "mailto:")) and not (page.parent / m.group(1)).exists()
    ]
    assert missing == []
