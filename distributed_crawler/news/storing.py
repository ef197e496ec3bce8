"""Which pages a news spider stores: `STORE_PAGE_TYPES` and `LANGUAGES` (docs/news.md).

A page that is not stored is still crawled for links: the filter only decides whether its item is
yielded. The page type is checked first, then the language of a page of a stored type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from babel import Locale

from distributed_crawler.defaults import SettingsReader

PAGE_TYPES = ("article", "list", "other")
_PRIMARY = re.compile(r"[a-z]{2,3}")


def _iso_639_1() -> frozenset[str]:
    """The ISO 639-1 codes (two letters) CLDR names, through Babel (a dependency of trafilatura)."""
    codes = (str(code) for code in Locale("en").languages)
    return frozenset(code for code in codes if len(code) == 2 and code.isalpha())


def language_name(code: str) -> str:
    """`de` -> `German` (the code itself when CLDR does not name it)."""
    return str(Locale("en").languages.get(code, code))


def read_page_types(values: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(v.lower() for v in values))
    unknown = [v for v in chosen if v not in PAGE_TYPES]
    if unknown or not chosen:
        raise ValueError(
            f"STORE_PAGE_TYPES ({','.join(unknown) or 'empty'}) must be page types among {', '.join(PAGE_TYPES)}; "
            "e.g. -s STORE_PAGE_TYPES=article,list"
        )
    return chosen


def read_languages(values: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(v.lower() for v in values))
    known = _iso_639_1()
    unknown = [v for v in chosen if v not in known]
    if unknown:
        raise ValueError(
            f"LANGUAGES ({','.join(unknown)}) must be ISO 639-1 codes such as en, de, fr (two letters, no region); "
            "leave it empty to store every language"
        )
    return chosen


def primary_language(lang: str | None) -> str | None:
    """`en-gb` -> `en`; None for a missing or malformed code (a page's declaration is untrusted)."""
    primary = (lang or "").strip().lower().replace("_", "-").split("-")[0]
    return primary if _PRIMARY.fullmatch(primary) else None


def page_type_of(value: Any) -> str:
    """The page type an item carries, one of PAGE_TYPES (anything else counts as "other")."""
    return value if value in PAGE_TYPES else "other"


@dataclass(frozen=True)
class StorePolicy:
    page_types: tuple[str, ...] = ("article",)
    languages: tuple[str, ...] = ()  # empty: every language

    @classmethod
    def from_settings(cls, settings: Any) -> StorePolicy:
        read = SettingsReader(settings)
        return cls(read_page_types(read.list("STORE_PAGE_TYPES")), read_languages(read.list("LANGUAGES")))

    def skip_reason(self, page_type: Any, lang: str | None) -> tuple[str, str] | None:
        """None: store the page; else why not, `("page_type", type)` or `("language", code)`.

        A page whose language is unknown is stored: not knowing is not "another language".
        """
        kind = page_type_of(page_type)
        if kind not in self.page_types:
            return "page_type", kind
        primary = primary_language(lang)
        if self.languages and primary is not None and primary not in self.languages:
            return "language", primary
        return None
