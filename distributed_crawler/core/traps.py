"""Crawler traps refused before they are queued (docs/security.md#traps).

A trap is a site that makes URLs without end: a calendar one page per day for ever, a path that
grows a segment per link (`/a/a/a/...`, relative links on an error page), a wildcard DNS that turns
every link into a new subdomain with its own politeness budget. Each defence is a setting:
- `url_shape_check` (an admission check, core/admission.py): a URL longer than Scrapy's
  `URLLENGTH_LIMIT` (`url_length`), with more than `URL_MAX_SEGMENTS` path segments
  (`path_segments`), or whose path repeats one segment or one run of segments `URL_MAX_REPEATS`
  times in a row (`/a/a/a/`, `/x/y/x/y/x/y/`: `repeated_segments`);
- `DomainHosts` (the scheduler's outbox, cluster-wide): at most `DOMAIN_MAX_HOSTS` hosts per
  registered domain (public suffix list, private suffixes included, so each `*.blogspot.com` blog
  is its own domain); requests for further hosts are refused (`domain_max_hosts`). The hosts a
  domain was allowed live in Redis (lua/domain_hosts.lua: one set per domain, never more than the
  cap, on the domain's frontier shard: one script call per shard, the shards' calls sent together),
  so every node agrees; a node remembers the answers for hosts it asked about (bounded).
`DEPTH_LIMIT` (20 by default, Scrapy's DepthMiddleware) bounds the calendar; these bound the rest.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.core.checks import Check, Refusal
from distributed_crawler.defaults import SettingsReader

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings
    from tldextract import TLDExtract

REPEAT_SCAN_SEGMENTS = 64  # segments looked at for repeats when URL_MAX_SEGMENTS is off (0)
KNOWN_HOSTS_MAX = 10_000  # host answers a node remembers (least recently used forgotten first: asked again)


def path_segments(url: str) -> list[str]:
    """The non-empty segments of a URL's path (`/a//b/` -> ["a", "b"]); [] for an unparsable URL."""
    try:
        path = urlsplit(url).path
    except ValueError:
        return []
    return [segment for segment in path.split("/") if segment]


def repeated_run(segments: Sequence[str], times: int) -> tuple[str, ...] | None:
    """The first run of segments repeated `times` times in a row (("a",) for a/a/a, ("x", "y") for
    x/y/x/y/x/y), or None. Quadratic in the segments, which the caller bounds."""
    n = len(segments)
    for length in range(1, n // times + 1):
        for start in range(n - length * times + 1):
            run = tuple(segments[start : start + length])
            if all(tuple(segments[start + k * length : start + (k + 1) * length]) == run for k in range(1, times)):
                return run
    return None


def url_shape_check(settings: BaseSettings) -> Check | None:
    """Admission check factory: URLs a trap makes (see the module docstring); None if all three are off."""
    read = SettingsReader(settings)
    max_length = read.int("URLLENGTH_LIMIT", min=0, hint="characters (0 = no limit)")
    max_segments = read.int("URL_MAX_SEGMENTS", min=0, hint="(0 = no limit)")
    repeats = read.int("URL_MAX_REPEATS", min=0, hint="(0 = off; 2 would refuse /2024/01/01/)")
    if repeats == 1:
        raise ValueError("URL_MAX_REPEATS (1) must be 0 (off) or >= 2 (3 refuses /a/a/a/)")
    if not (max_length or max_segments or repeats):
        return None

    def check(request: Request) -> Refusal | None:
        url = request.url
        if max_length and len(url) > max_length:
            return Refusal("url_length", f"URL of {len(url)} characters, over URLLENGTH_LIMIT ({max_length})")
        segments = path_segments(url)
        if max_segments and len(segments) > max_segments:
            return Refusal("path_segments", f"{len(segments)} path segments, over URL_MAX_SEGMENTS ({max_segments})")
        if repeats:
            run = repeated_run(segments[:REPEAT_SCAN_SEGMENTS], repeats)
            if run is not None:
                shown = "/".join(run)[:100]
                return Refusal(
                    "repeated_segments", f"path repeats /{shown}/ {repeats} times in a row (URL_MAX_REPEATS)"
                )
        return None

    return check


@lru_cache(maxsize=1)
def _extractor() -> TLDExtract:
    import tldextract

    # the public suffix list shipped with tldextract: no download at start, no cache directory
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def registered_domain(host: str) -> str:
    """`a.b.example.co.uk` -> `example.co.uk`; an IP address, or a name without a public suffix
    (`localhost`, `site.test`), is its own domain."""
    host = host.lower().rstrip(".").strip("[]")
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    return _extractor()(host).top_domain_under_public_suffix or host


def hash_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes: its `{tag}` (first non-empty one), else the key."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else key


class DomainHosts:
    """`DOMAIN_MAX_HOSTS` for one node: which hosts may be crawled, asked from Redis once per host.

    The outbox calls `unknown` to pick the hosts of a batch it has no answer for, then `ask` once
    for them all (lua/domain_hosts.lua, atomic for the cluster), then `allowed` per request. This
    class owns the script's KEYS/ARGV order.
    """

    def __init__(self, key: Callable[[str], str], max_hosts: int) -> None:
        self.max_hosts = max_hosts
        self.key = key  # registered domain -> its set (SpiderKeys.domain_hosts)
        self._script: Any = None  # registered on the client of the first `ask`
        self._known: OrderedDict[str, bool] = OrderedDict()  # host -> allowed

    @staticmethod
    def max_hosts_from_settings(settings: BaseSettings) -> int:
        return SettingsReader(settings).int("DOMAIN_MAX_HOSTS", min=0, hint="(0 = no limit)")

    def unknown(self, hosts: Sequence[str]) -> list[str]:
        if not self.max_hosts:
            return []
        return list(dict.fromkeys(h for h in hosts if h and h not in self._known))

    async def ask(self, client: AnyRedis, hosts: Sequence[str]) -> None:
        """Register `hosts` with their domains in Redis (allowed while a domain has room)."""
        if not hosts or not self.max_hosts:
            return
        if self._script is None or self._script.registered_client is not client:
            self._script = client.register_script(lua_source("domain_hosts"))
        groups: dict[str, list[tuple[str, str]]] = {}  # one script call per hash tag (a Cluster node)
        for host in hosts:
            key = self.key(registered_domain(host))
            groups.setdefault(hash_tag(key), []).append((host, key))
        calls = [
            self._script(keys=[key for _, key in group], args=[self.max_hosts, *(host for host, _ in group)])
            for group in groups.values()
        ]
        for group, answers in zip(groups.values(), await asyncio.gather(*map(maybe_await, calls))):
            for (host, _), answer in zip(group, answers):
                self._remember(host, int(answer) == 1)

    def allowed(self, host: str) -> bool:
        """True unless Redis said this host is over its domain's cap (an unasked host: True)."""
        answer = self._known.get(host)
        if answer is None:
            return True
        self._known.move_to_end(host)
        return answer

    def refusal(self, host: str) -> Refusal:
        domain = registered_domain(host)
        return Refusal(
            "domain_max_hosts", f"host {host} would be host {self.max_hosts + 1}+ of {domain} (DOMAIN_MAX_HOSTS)"
        )

    def _remember(self, host: str, allowed: bool) -> None:
        self._known[host] = allowed
        self._known.move_to_end(host)
        while len(self._known) > KNOWN_HOSTS_MAX:
            self._known.popitem(last=False)
