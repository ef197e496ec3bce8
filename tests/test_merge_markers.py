"""No tracked file holds a merge-conflict marker (the pre-commit hook `no-merge-markers` refuses
them at commit time; this catches a merge committed without the hook)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Built from parts so this file does not match itself.
MARKER = re.compile("^(" + "<" * 7 + "|" + ">" * 7 + r")( |$)", re.MULTILINE)


def markers(text: str) -> list[int]:
    """1-based line numbers of the conflict markers in `text`."""
    return [text.count("\n", 0, m.start()) + 1 for m in MARKER.finditer(text)]


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_marker_lines_are_found() -> None:
    ours, theirs = "<" * 7, ">" * 7
    text = f"| key |\n{ours} HEAD\n| a |\n=======\n| b |\n{theirs} trips\n"
    assert markers(text) == [2, 6]
    assert markers(f"x {ours} y\n{ours}{ours}\n") == []  # only a marker that starts a line, alone or with a label


def test_no_tracked_file_has_merge_markers() -> None:
    found = []
    for path in _tracked():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the work tree
        found += [f"{path.relative_to(ROOT)}:{line}" for line in markers(text)]
    assert not found, "merge-conflict markers (resolve the conflict): " + ", ".join(found)
