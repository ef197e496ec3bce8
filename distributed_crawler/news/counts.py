"""Pages stored and not stored per page type (for whatever reason), and not stored per language
(or for the page's robots meta: a second instance, its own per-host zset), summed for the cluster
in Redis.

Each node counts in memory and adds its counts to `{spider}:stats` every few seconds and at close
(lua/news_counts.lua, one round trip), so `dcrawl status` shows the cluster's figures. Pages not
stored for their language are counted per host too, in a zset that keeps the `MAX_HOSTS` hosts
with the most such pages: memory stays bounded whatever the crawl covers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from redis.commands.core import AsyncScript, Script

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.connection.untrusted import text as decoded

MAX_HOSTS = 10_000  # hosts kept in the per-host zset, and counted in memory between flushes
FLUSH_SECONDS = 2.0


def stored_field(page_type: str) -> str:
    return f"page_type:{page_type}:stored"


def skipped_field(kind: str, value: str) -> str:
    """`page_type:list:skipped`, `language:fr:skipped`."""
    return f"{kind}:{value}:skipped"


class NewsCounts:
    """This node's counts not yet added to the cluster's."""

    def __init__(self, client: AnyRedis | None, stats_key: str, hosts_key: str) -> None:
        self.client = client
        self.keys = [stats_key, hosts_key]
        self._script: Script | AsyncScript | None = None
        self.fields: Counter[str] = Counter()
        self.hosts: Counter[str] = Counter()

    def stored(self, page_type: str) -> None:
        self.fields[stored_field(page_type)] += 1

    def not_stored(self, page_type: str, why: tuple[str, str], host: str | None) -> None:
        """A page of `page_type` left out for `why` (`("page_type", type)`, `("language", code)` or
        `("robots", "noindex")`); any reason but the page type is counted per host too."""
        self.fields[skipped_field("page_type", page_type)] += 1
        kind, value = why
        if kind != "page_type":
            self.skipped(kind, value, host)

    def skipped(self, kind: str, value: str, host: str | None) -> None:
        """A page left out for `kind:value` (`language:fr`, `robots:noindex`), counted per host too."""
        self.fields[skipped_field(kind, value)] += 1
        if host and (host in self.hosts or len(self.hosts) < MAX_HOSTS):
            self.hosts[host] += 1  # beyond MAX_HOSTS new hosts (Redis away for long): totals only

    async def flush(self) -> None:
        """Add the counts to the cluster's; on failure they stay here for the next flush."""
        if self.client is None or (not self.fields and not self.hosts):  # no client yet: they wait
            return
        fields, hosts = self.fields, self.hosts
        self.fields, self.hosts = Counter(), Counter()
        args: list[Any] = [MAX_HOSTS, len(fields)]
        for name, n in fields.items():
            args += [name, n]
        for host, n in hosts.items():
            args += [host, n]
        if self._script is None:
            self._script = self.client.register_script(lua_source("news_counts"))
        try:
            await maybe_await(self._script(keys=self.keys, args=args))
        except BaseException:
            self.fields.update(fields)
            for host, n in hosts.items():
                if host in self.hosts or len(self.hosts) < MAX_HOSTS:
                    self.hosts[host] += n
            raise


def _fields(raw: dict[Any, Any]) -> Iterator[tuple[str, str, str, int]]:
    """`(kind, name, what, count)` of each `kind:name:what` field of `{spider}:stats` whose value
    reads as a count; anything else is left out (untrusted data)."""
    for key, value in raw.items():
        parts = decoded(key).split(":")
        try:
            count = int(decoded(value))
        except ValueError:
            continue
        if len(parts) == 3 and count >= 0:
            yield parts[0], parts[1], parts[2], count


def read_page_counts(raw: dict[Any, Any]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """From `{spider}:stats` as HGETALL gives it: per page type `{"stored", "skipped"}`, and pages
    not stored per language."""
    page_types: dict[str, dict[str, int]] = {}
    languages: dict[str, int] = {}
    for kind, name, what, count in _fields(raw):
        if kind == "page_type" and what in ("stored", "skipped") and name.isalpha() and len(name) <= 20:
            page_types.setdefault(name, {"stored": 0, "skipped": 0})[what] = count
        elif kind == "language" and what == "skipped" and name.isalpha() and len(name) <= 3:
            languages[name] = count
    return page_types, languages


def read_robots_counts(raw: dict[Any, Any]) -> dict[str, int]:
    """From `{spider}:stats` as HGETALL gives it: pages not stored for what their robots meta asked
    (`{"noindex": 12}`)."""
    return {
        name: count
        for kind, name, what, count in _fields(raw)
        if kind == "robots" and what == "skipped" and name.isalpha() and len(name) <= 20
    }
