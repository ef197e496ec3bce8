"""Canonical URLs and request fingerprints.

Two URLs that name the same page (tracking params, fragment, query order, host case, default port)
must give one fingerprint, or the cluster fetches and stores the same page twice. The canonical URL
is also the key of the stored row, so dedup and storage agree on what "the same page" means.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from w3lib.url import canonicalize_url as w3lib_canonicalize_url

from distributed_crawler.defaults import SettingsReader

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

# Query parameters that never make a page different (analytics and ad click ids).
DEFAULT_DROP_PARAMS: tuple[str, ...] = (
    "utm_*",
    "gclid",
    "gclsrc",
    "dclid",
    "fbclid",
    "msclkid",
    "yclid",
    "mc_cid",
    "mc_eid",
    "_ga",
    "_gl",
    "igshid",
    "spm",
)

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class FingerprintConfig:
    """`FINGERPRINT_DROP_PARAMS`: shell-style patterns (``utm_*``) of params to remove."""

    drop_params: tuple[str, ...] = DEFAULT_DROP_PARAMS

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FingerprintConfig:
        read = SettingsReader(settings)
        if read.raw("FINGERPRINT_DROP_PARAMS") is None:  # the default: DEFAULT_DROP_PARAMS
            return cls()
        return cls(drop_params=tuple(read.list("FINGERPRINT_DROP_PARAMS")))


class ParamMatcher:
    """Case-insensitive wildcard match of query parameter names, compiled once."""

    def __init__(self, patterns: Iterable[str]) -> None:
        regexes = [fnmatch.translate(p.lower()) for p in patterns]
        self._regex = re.compile("|".join(regexes)) if regexes else None

    def __call__(self, name: str) -> bool:
        return bool(self._regex and self._regex.match(name.lower()))


def canonicalize_url(url: str, drop: ParamMatcher | None = None) -> str:
    """Scheme/host lower-cased, default port, fragment and dropped params removed, query sorted."""
    if drop is None:
        drop = _DEFAULT_MATCHER
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host
    if parts.username or parts.password:
        userinfo = parts.username or ""
        if parts.password:
            userinfo += ":" + parts.password
        netloc = f"{userinfo}@{host}"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        netloc += f":{port}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not drop(k)]
    rebuilt = urlunsplit((scheme, netloc, parts.path or "/", urlencode(query), ""))
    return w3lib_canonicalize_url(rebuilt, keep_fragments=False)


_DEFAULT_MATCHER = ParamMatcher(DEFAULT_DROP_PARAMS)
CANONICAL_CACHE = 4096  # canonical URLs a fingerprinter remembers (~1 MB)


class CanonicalFingerprinter:
    """`REQUEST_FINGERPRINTER_CLASS`: SHA1 of method, canonical URL and body.

    Scrapy's default fingerprinter keeps tracking params and port quirks, so the same page
    under two URLs would be fetched twice; this one shares `canonicalize_url` with storage.
    """

    def __init__(self, config: FingerprintConfig | None = None) -> None:
        self.config = config or FingerprintConfig()
        self._drop = ParamMatcher(self.config.drop_params)
        # the same links recur on every page of a site (home, sections, neighbours): canonicalizing
        # is a third of a link's cost; bounded, so a site of endless URLs costs no more memory
        self._canonical = lru_cache(maxsize=CANONICAL_CACHE)(partial(canonicalize_url, drop=self._drop))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CanonicalFingerprinter:
        return cls(FingerprintConfig.from_settings(crawler.settings))

    def canonical_url(self, url: str) -> str:
        return self._canonical(url)

    def fingerprint(self, request: Request) -> bytes:
        digest = hashlib.sha1()
        digest.update(request.method.encode("ascii"))
        digest.update(b"\n")
        digest.update(self.canonical_url(request.url).encode("utf-8"))
        digest.update(b"\n")
        digest.update(request.body or b"")
        return digest.digest()
