"""The README and docs stand alone: every link resolves to a file of the repository, none leaves it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "perf" / "caches" / "README.md"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(document):
    text = document.read_text(encoding="utf-8")
    assert not re.findall(r"https?://|www\.", text), "a web address: the docs must stand alone"
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)]
    for target in filter(None, targets):
        path = (document.parent / target).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"{document.name} links to {target}, which is not a file of the repository"
