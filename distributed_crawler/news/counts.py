"""Pages stored and not stored per page type (for whatever reason), and not stored per language
(or for the page's robots meta: a second instance, its own per-host zset), summed for the cluster
in Redis.

Each node counts in memory and adds its counts to `{spider}:stats` every few seconds and at close
(lua/news_counts.lua, one round trip), so `dcrawl status` shows the cluster's figures. Pages not
stored for their language are counted per host too, in a zset that keeps the `MAX_HOSTS` hosts
with the most such pages: memory stays bounded whatever the crawl covers.

Adding is not idempotent, and a call whose reply is lost may have landed (redis-py itself sends a
pipeline again after a dropped connection). So every write is numbered per writer (`CountsWriter`),
a write that failed is sent again exactly as it was, and the script skips a write it applied
already: each page is counted once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from redis.commands.core import AsyncScript, Script

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.connection.untrusted import text as decoded

MAX_HOSTS = 10_000  # hosts kept in the per-host zset, and counted in memory between flushes
FLUSH_SECONDS = 2.0
#: How long a writer's last applied write is remembered (s): far longer than a write is retried.
APPLIED_SECONDS = 7 * 86_400


def applied_key(stats_key: str, writer: str) -> str:
    """`{spider}:stats:applied:<writer>`: the number of the last write of `writer` (one node's
    counts, or its change feed) that news_counts.lua applied; on the stats hash's hash tag."""
    return f"{stats_key}:applied:{writer}"


class CountsWriter:
    """Owns news_counts.lua's KEYS and ARGV for one writer: each call is a new numbered write."""

    def __init__(self, stats_key: str, hosts_key: str) -> None:
        self.keys = [stats_key, hosts_key, applied_key(stats_key, uuid.uuid4().hex)]
        self.written = 0

    def call(self, fields: Mapping[str, int], hosts: Mapping[str, int] | None = None) -> tuple[list[str], list[Any]]:
        """(keys, args) of the next write; send the same pair again to retry it."""
        self.written += 1
        args: list[Any] = [MAX_HOSTS, len(fields), self.written, APPLIED_SECONDS]
        for name, n in fields.items():
            args += [name, n]
        for host, n in (hosts or {}).items():
            args += [host, n]
        return list(self.keys), args

    @staticmethod
    def fields_of(args: list[Any]) -> Counter[str]:
        """The field deltas of a write made by `call`."""
        n = int(args[1])
        return Counter({str(args[i]): int(args[i + 1]) for i in range(4, 4 + 2 * n, 2)})


def stored_field(page_type: str) -> str:
    return f"page_type:{page_type}:stored"


def skipped_field(kind: str, value: str) -> str:
    """`page_type:list:skipped`, `language:fr:skipped`."""
    return f"{kind}:{value}:skipped"


class NewsCounts:
    """This node's counts not yet added to the cluster's."""

    def __init__(self, client: AnyRedis | None, stats_key: str, hosts_key: str) -> None:
        self.client = client
        self.writer = CountsWriter(stats_key, hosts_key)
        self._script: Script | AsyncScript | None = None
        self.fields: Counter[str] = Counter()
        self.hosts: Counter[str] = Counter()
        self.unsent: tuple[list[str], list[Any]] | None = None  # a write that failed: it may have landed

    def pending(self) -> Counter[str]:
        """Every field count not known to have landed: the failed write's and those gathered since."""
        total = Counter(self.fields)
        if self.unsent is not None:
            total.update(self.writer.fields_of(self.unsent[1]))
        return total

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
        """Add the counts to the cluster's. A write that fails is kept as it was and sent first
        next time (the script skips it if it had landed), then the counts gathered meanwhile."""
        if self.client is None:  # no client yet: they wait
            return
        if self.unsent is None and (self.fields or self.hosts):
            self.unsent = self.writer.call(self.fields, self.hosts)
            self.fields, self.hosts = Counter(), Counter()
        if self.unsent is None:
            return
        if self._script is None:
            self._script = self.client.register_script(lua_source("news_counts"))
        keys, args = self.unsent
        await maybe_await(self._script(keys=keys, args=args))
        self.unsent = None
        if self.fields or self.hosts:
            await self.flush()


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
