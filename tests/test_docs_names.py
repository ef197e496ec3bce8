"""The docs name only real files and real settings: a renamed module or setting fails here, not in a user's hands."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from scrapy.settings import default_settings

from distributed_crawler.defaults import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# `name.py`, `pkg/name.py`, `lua/name.lua`, also inside a longer code span or a link target.
FILE_REF = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|lua))\b")
SETTING_REF = re.compile(r"`-?s? ?([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?:=[^`]*)?`")
# Upper-case names in backticks that are not settings of ours, Scrapy's or a library we configure.
NOT_SETTINGS = {
    "USER",  # environment variables
    "SCRAPY_SETTINGS_MODULE",
    "MAX_FILE_SIZE",  # trafilatura's own configuration
    "TRAFILATURA_OPTIONS",  # a constant of news/extract.py, named where its values are explained
    "TRANSIENT_ERRORS",  # a constant of connection/clients.py
    "OUTBOX_LINGER",  # a constant of core/outbox.py (docs/benchmarks.md: how it was chosen)
    "O_EXCL",  # os.open flag
}
# Settings of the libraries users configure through us (scrapy-playwright, and scrapy-redis's in the
# migration guide), read from their installed sources.
LIBRARY_SETTINGS = re.compile(r"[\"']((?:PLAYWRIGHT|SCHEDULER|REDIS|DUPEFILTER)_[A-Z_]+)[\"']")


def _repo_files() -> set[str]:
    skip = {".venv", ".git", "node_modules", ".run", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
    files: set[str] = set()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if rel.parts and rel.parts[0] in skip or path.suffix not in {".py", ".lua"}:
            continue
        files.add(rel.as_posix())
    return files


def _exists(ref: str, files: set[str]) -> bool:
    """A reference names a real file when some repo path ends with it (docs write `core/guard.py` or `guard.py`)."""
    return any(f == ref or f.endswith("/" + ref) for f in files)


def test_docs_name_only_real_files() -> None:
    files = _repo_files()
    missing = []
    for doc in DOCS:
        for ref in sorted(set(FILE_REF.findall(doc.read_text()))):
            if not _exists(ref, files):
                missing.append(f"{doc.relative_to(ROOT)}: {ref}")
    assert not missing, "docs name files that do not exist (renamed or removed?):\n" + "\n".join(missing)


def _library_settings() -> set[str]:
    names: set[str] = set()
    for package in ("scrapy_playwright", "scrapy_redis"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin, f"{package} is a dependency and must be installed"
        for source in Path(spec.origin).parent.glob("*.py"):
            names.update(LIBRARY_SETTINGS.findall(source.read_text()))
    return names


def test_docs_name_only_real_settings() -> None:
    scrapy_names = {name for name in dir(default_settings) if name.isupper()}
    known = set(DEFAULTS) | scrapy_names | _library_settings() | NOT_SETTINGS
    unknown = []
    for doc in DOCS:
        for name in sorted(set(SETTING_REF.findall(doc.read_text()))):
            if name not in known:
                unknown.append(f"{doc.relative_to(ROOT)}: {name}")
    assert not unknown, "docs name settings that do not exist (renamed or removed?):\n" + "\n".join(unknown)


def test_docs_hold_no_merge_conflict_markers() -> None:
    """A merge left `<<<<<<< HEAD ... >>>>>>> trips` in the key table once; users read that table."""
    marker = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)
    found = [
        f"{doc.relative_to(ROOT)}:{doc.read_text().count(chr(10), 0, m.start()) + 1}"
        for doc in DOCS
        for m in marker.finditer(doc.read_text())
    ]
    assert not found, f"merge conflict markers in the docs: {', '.join(found)}"
