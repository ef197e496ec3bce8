"""docs/settings.md lists every setting of defaults.DEFAULTS, and only those (plus Scrapy's own)."""

from __future__ import annotations

import re
from pathlib import Path

from scrapy.settings import default_settings

from distributed_crawler.defaults import DEFAULTS

DOC = Path(__file__).resolve().parent.parent / "docs" / "settings.md"


def _table_names(text: str) -> set[str]:
    """Setting names in the first column of the table rows (`NAME`*, `A`, `B`)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", first))
    return names


def test_every_default_is_documented() -> None:
    text = DOC.read_text()
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", text))
    missing = sorted(set(DEFAULTS) - documented)
    assert not missing, f"docs/settings.md lacks {missing}: add a row (default and meaning) for each"


def test_documented_settings_exist() -> None:
    scrapy_names = {name for name in dir(default_settings) if name.isupper()}
    unknown = sorted(_table_names(DOC.read_text()) - set(DEFAULTS) - scrapy_names)
    assert not unknown, f"docs/settings.md lists {unknown}, which are neither in defaults.DEFAULTS nor Scrapy's"
