"""The news settings, read once into a frozen config (docs/settings.md, docs/news.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.keyspace import default, fill
from distributed_crawler.news.nearduplicate import MAX_DISTANCE
from distributed_crawler.news.rules import SiteRules, parse_rules
from distributed_crawler.news.storing import StorePolicy

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def parse_duration(value: Any, name: str = "SITEMAP_SINCE") -> float:
    """A duration setting: seconds (a number) or text such as "2d", "36h", "90m"; 0 = no limit."""
    hint = f"{name} ({value!r}) must be seconds or a duration like 2d, 36h, 90m (0 = no limit)"
    if isinstance(value, bool):
        raise ValueError(hint)
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(str(value or "0").strip().lower())
        if match is None:
            raise ValueError(hint)
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not 0 <= seconds < 1e10:
        raise ValueError(f"{name} ({value!r}) must be >= 0 (0 = no limit)")
    return seconds


@dataclass(frozen=True)
class NewsConfig:
    extract_main_text: bool = True
    extract_threads: int = 2
    near_duplicates: bool = True
    near_duplicate_distance: int = 3
    near_duplicate_min_words: int = 50
    near_duplicate_keep_text: bool = False
    near_duplicate_key: str = default("NEAR_DUPLICATE_KEY")
    near_duplicate_window: float = 14 * 86400.0
    sitemap_since: float = 0.0
    sitemap_max_bytes: int = 50 * 1024 * 1024
    sitemap_max_entries: int = 50_000
    sitemap_max_depth: int = 3
    store: StorePolicy = StorePolicy()  # STORE_PAGE_TYPES, LANGUAGES
    language_skipped_key: str = default("LANGUAGE_SKIPPED_KEY")
    extraction_rules: Mapping[str, SiteRules] = field(default_factory=dict)
    extract_max_bytes: int = 2 * 1024 * 1024
    robots_meta_obey: bool = True
    robots_meta_skipped_key: str = default("ROBOTS_META_SKIPPED_KEY")

    @classmethod
    def from_settings(cls, settings: Any) -> NewsConfig:
        read = SettingsReader(settings)
        return cls(
            extract_main_text=read.bool("EXTRACT_MAIN_TEXT"),
            extract_threads=read.int("EXTRACT_THREADS", min=0, max=64, hint="(0 = on the reactor thread)"),
            near_duplicates=read.bool("NEAR_DUPLICATES"),
            near_duplicate_distance=read.int("NEAR_DUPLICATE_DISTANCE", min=0, max=MAX_DISTANCE),
            near_duplicate_min_words=read.int("NEAR_DUPLICATE_MIN_WORDS", min=1),
            near_duplicate_keep_text=read.bool("NEAR_DUPLICATE_KEEP_TEXT"),
            near_duplicate_key=read.str("NEAR_DUPLICATE_KEY"),
            near_duplicate_window=parse_duration(read.raw("NEAR_DUPLICATE_WINDOW"), "NEAR_DUPLICATE_WINDOW"),
            sitemap_since=parse_duration(read.raw("SITEMAP_SINCE")),
            sitemap_max_bytes=read.int("SITEMAP_MAX_BYTES", min=1024),
            sitemap_max_entries=read.int("SITEMAP_MAX_ENTRIES", min=1),
            sitemap_max_depth=read.int("SITEMAP_MAX_DEPTH", min=1, max=10),
            store=StorePolicy.from_settings(settings),
            language_skipped_key=read.str("LANGUAGE_SKIPPED_KEY"),
            extraction_rules=parse_rules(read.raw("EXTRACTION_RULES")),
            extract_max_bytes=read.int("EXTRACT_MAX_BYTES", min=0, hint="bytes (0 = no limit)"),
            robots_meta_obey=read.bool("ROBOTS_META_OBEY"),
            robots_meta_skipped_key=read.str("ROBOTS_META_SKIPPED_KEY"),
        )

    def key(self, spider: str) -> str:
        return fill(self.near_duplicate_key, spider)

    def skipped_hosts_key(self, spider: str) -> str:
        return fill(self.language_skipped_key, spider)

    def robots_skipped_hosts_key(self, spider: str) -> str:
        return fill(self.robots_meta_skipped_key, spider)
