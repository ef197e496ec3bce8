"""Links between the docs land on a heading that exists: a renamed section fails here, not in a
reader's browser (GitHub's anchor rule: lower case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
LINK = re.compile(r"\]\(((?:[\w-]+/)*[\w.-]+\.md)?#([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


def test_slug_follows_githubs_rule() -> None:
    assert slug("Pages lost after `kill -9`") == "pages-lost-after-kill--9"
    assert slug("Source registry at 100,000 sources") == "source-registry-at-100000-sources"
    assert slug("6. The per-host frontier at 1M hosts") == "6-the-per-host-frontier-at-1m-hosts"


def test_every_anchor_link_lands_on_a_heading() -> None:
    broken = []
    for doc in DOCS:
        for target, anchor in LINK.findall(doc.read_text()):
            path = (doc.parent / target) if target else doc
            if path.exists() and anchor not in anchors(path):
                broken.append(f"{doc.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, "links to a missing heading:\n" + "\n".join(broken)
