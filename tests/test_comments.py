"""Comments and docstrings in the package say why, not which issue or branch brought the code: the
history is in git, and a reader of `issue 14` learns nothing without it."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "distributed_crawler"
HISTORY = re.compile(r"\bissue #?\d+|\bused to be\b|\badded by F\d\b|\bstop \d+\b", re.IGNORECASE)


def test_no_comment_narrates_history() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*"))
        if path.suffix in (".py", ".lua")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, "say why instead of naming the history:\n" + "\n".join(found)
