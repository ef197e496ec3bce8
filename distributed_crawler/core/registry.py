"""The source registry as a node sees it: which source a URL belongs to, and its scope rules.

The registry lives in Redis (`SOURCE_REGISTRY_KEY`, a hash site -> source JSON, written by `dcrawl sources
SPIDER import`); its version counter (`SOURCE_REGISTRY_VERSION_KEY`) is read with the pause and the
overrides in the control watch's one round trip every 1.5 s (core/pause.py), and the hash itself
only when the version moved. So a change reaches every node within 2 s, and a node with 100,000
sources does not re-read them while nothing changes.

A source's scope is checked at admission (core/admission.py): `deny` first (never fetched), then
`subdomains`, `max_depth` and `allow`; the home page, robots.txt, sitemaps and feeds pass all but
`deny`. Each refusal is counted per host and reason (`{spider}:refused`), which `dcrawl sources
SPIDER show` sums per source.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from distributed_crawler.core.checks import Check, Refusal
from distributed_crawler.core.source_records import Source, decode_source
from distributed_crawler.core.traps import registered_domain
from distributed_crawler.meta import NEWS_SITE_META
from distributed_crawler.news.rules import SiteRules, parse_rules

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

_CACHES: weakref.WeakKeyDictionary[Any, SourceCache] = weakref.WeakKeyDictionary()
ALWAYS_PATHS = ("/", "/robots.txt")  # the home page and robots.txt: any source may fetch them
REASONS = ("source_deny", "source_subdomain", "source_depth", "source_allow")


class ScopedSource:
    """A source with its regexes compiled once."""

    __slots__ = ("allow", "deny", "extraction", "raw", "recrawl", "source", "tags_json")

    def __init__(self, source: Source, raw: Any = None) -> None:
        self.source = source
        self.raw = digest(raw)  # of the registry value it was read from: an unchanged entry is not parsed again
        self.allow = any_of(source.allow)
        self.deny = any_of(source.deny)
        self.tags_json = json.dumps(list(source.tags), ensure_ascii=False) if source.tags else None
        self.recrawl = tuple((re.compile(p), interval_of(v)) for p, v in source.recrawl.items())
        self.extraction = parse_rules({source.site: dict(source.extraction)}) if source.extraction else None

    def refusal(self, url: str, host: str, depth: int, listing: bool) -> Refusal | None:
        s = self.source
        if self.deny is not None and self.deny.search(url):
            return Refusal("source_deny", f"{url[:200]} matches a deny rule of source {s.name}")
        path = urlsplit(url).path or "/"
        if listing or path in ALWAYS_PATHS:
            return None
        if s.subdomains and host not in s.subdomains and host not in (s.site, f"www.{s.site}"):
            return Refusal("source_subdomain", f"host {host} is not among the subdomains of source {s.name}")
        if s.max_depth is not None and depth > s.max_depth:
            return Refusal(
                "source_depth", f"{url[:200]} is {depth} links deep; source {s.name} has max_depth {s.max_depth}"
            )
        if self.allow is not None and not self.allow.search(url):
            return Refusal("source_allow", f"{url[:200]} matches no allow rule of source {s.name}")
        return None


def digest(raw: Any) -> bytes | None:
    """16 bytes standing for a registry value (kept instead of the value: a third of the memory)."""
    if raw is None:
        return None
    return hashlib.blake2b(raw if isinstance(raw, bytes) else str(raw).encode(), digest_size=16).digest()


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def any_of(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex matching any of `patterns`; sources sharing rules share the compiled pattern."""
    return _compiled("|".join(f"(?:{p})" for p in patterns)) if patterns else None


def interval_of(value: Any) -> tuple[float, float] | None:
    """A checked `recrawl` value (seconds or [min, max]; 0 = never) as RECRAWL_RULES' interval."""
    low, high = value if isinstance(value, list) else (value, value)
    return None if not high else (float(low), float(high))


class SourceTable:
    """The registry, indexed by site; `find` walks a host up to its closest registered site."""

    def __init__(self, sources: Iterable[Source | ScopedSource] = ()) -> None:
        self.sites: dict[str, ScopedSource] = {}
        for s in sources:
            scoped = s if isinstance(s, ScopedSource) else ScopedSource(s)
            self.sites[scoped.source.site] = scoped

    def __len__(self) -> int:
        return len(self.sites)

    def find(self, host: str) -> ScopedSource | None:
        host = host.lower().rstrip(".")
        labels = host.split(".")
        for i in range(len(labels)):
            found = self.sites.get(".".join(labels[i:]))
            if found is not None:
                return found
        return None

    def by_name(self, name_or_site: str) -> Source | None:
        """A source by its name (any case) or its site / domain (`www.` or not)."""
        wanted = name_or_site.strip().lower()
        found = self.find(wanted[4:] if wanted.startswith("www.") else wanted) if wanted else None
        if found is not None and found.source.site in (wanted, wanted.removeprefix("www.")):
            return found.source
        return next((s.source for s in self.sites.values() if s.source.name.lower() == wanted), None)

    def recrawl_rule(self, url: str) -> tuple[bool, tuple[float, float] | None]:
        """(a rule of the URL's source matched, its interval: None = never revisited)."""
        found = self._of_url(url)
        for pattern, interval in found.recrawl if found is not None else ():
            if pattern.search(url):
                return True, interval
        return False, None

    def extraction_rules(self, url: str, rules: Mapping[str, SiteRules]) -> Mapping[str, SiteRules]:
        """EXTRACTION_RULES with the URL's source's own `extraction` over its site's entry."""
        found = self._of_url(url)
        return {**rules, **found.extraction} if found is not None and found.extraction else rules

    def _of_url(self, url: str) -> ScopedSource | None:
        if not self.sites:
            return None
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return None
        return self.find(host) if host else None

    def label(self, url: str) -> tuple[str, str | None]:
        """(source, source_tags) of a stored row: the source's name and tags (a JSON array), else
        the URL's registered domain and no tags."""
        host = (urlsplit(url).hostname or "").lower()
        found = self.find(host) if host and self.sites else None
        if found is None:
            return (registered_domain(host) if host else ""), None
        return found.source.name, found.tags_json


def table_of(raw: dict[Any, Any], previous: SourceTable | None = None) -> SourceTable:
    """A read of the registry hash -> SourceTable; entries that do not decode are skipped. An entry
    whose value is the one `previous` was built from is kept as it was (an import that changes 10
    sources of 100,000 parses 10)."""
    known = {s.raw: s for s in previous.sites.values()} if previous is not None else {}
    scoped = []
    for value in (raw or {}).values():
        kept = known.get(digest(value))
        if kept is None:
            source = decode_source(value)
            kept = ScopedSource(source, value) if source is not None else None
        if kept is not None:
            scoped.append(kept)
    return SourceTable(scoped)


class SourceCache:
    """The node's copy of the registry, one per crawler, refreshed by the control watch."""

    def __init__(self) -> None:
        self.table = SourceTable()
        self.version: Any = None

    @classmethod
    def of(cls, crawler: Crawler) -> SourceCache:
        cache = _CACHES.get(crawler)
        if cache is None:
            cache = _CACHES[crawler] = cls()
        return cache

    def stale(self, version: Any) -> bool:
        return version != self.version

    def update(self, version: Any, raw: dict[Any, Any]) -> None:
        self.table = table_of(raw, self.table)
        self.version = version

    def label(self, url: str) -> tuple[str, str | None]:
        return self.table.label(url)


def source_scope_check(cache: SourceCache) -> Check:
    """Admission check of the registry's scope rules (a URL outside every source passes)."""

    def check(request: Request) -> Refusal | None:
        if not cache.table.sites:
            return None
        try:
            host = (urlsplit(request.url).hostname or "").lower()
        except ValueError:
            return None
        found = cache.table.find(host) if host else None
        if found is None:
            return None
        depth = request.meta.get("depth", 0)
        depth = depth if isinstance(depth, int) and not isinstance(depth, bool) else 0
        return found.refusal(request.url, host, depth, NEWS_SITE_META in request.meta)

    return check
