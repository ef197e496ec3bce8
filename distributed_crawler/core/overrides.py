"""The operator's per-host overrides as this node sees them (`dcrawl host ... set/block`).

In host mode the lease script applies delay, concurrency, max-pages and blocks on the server; what
a node decides itself (render on/off/auto; in the single-queue modes also delay, concurrency and
blocks, in the politeness middleware) comes from this cache: the overrides hash read at most once
a second (REFRESH_SECONDS) in the background, never a round trip per page. An override reaches
every node within about a second.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from typing import TYPE_CHECKING, Any

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.core.context import RedisContext

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

REFRESH_SECONDS = 1.0
_CACHES: weakref.WeakKeyDictionary[Any, OverrideCache] = weakref.WeakKeyDictionary()


def closest_override(table: dict[str, dict[str, Any]], host: str) -> dict[str, Any] | None:
    """The override of `host` (host[:port]), else of its closest parent domain."""
    host = host.lower().rstrip(".")
    if host in table:
        return table[host]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    labels = name.split(".")
    for i in range(len(labels)):
        found = table.get(".".join(labels[i:]))
        if found is not None:
            return found
    return None


class OverrideCache:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.table: dict[str, dict[str, Any]] = {}
        self._read_at = 0.0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, crawler: Crawler) -> OverrideCache:
        cache = _CACHES.get(crawler)
        if cache is None:
            cache = _CACHES[crawler] = cls(crawler)
        return cache

    def get(self, host: str) -> dict[str, Any] | None:
        """The host's override as last read; starts a background refresh when the copy is a second old."""
        if time.monotonic() - self._read_at >= REFRESH_SECONDS and (self._task is None or self._task.done()):
            self._read_at = time.monotonic()
            try:
                self._task = asyncio.get_running_loop().create_task(self._refresh(), name="dc-overrides")
            except RuntimeError:  # no running loop (a unit test's sync call): the copy stays
                pass
        return closest_override(self.table, host) if self.table else None

    async def _refresh(self) -> None:
        crawler = self.crawler
        if crawler.spider is None:
            return
        context = RedisContext.of(crawler)
        frontier = context.frontier_for(crawler.spider.name)

        async def read() -> Any:
            return await frontier.overrides()

        raw = await context.policy.run(Purpose.CACHE, read, default=None)
        if raw is None:
            return  # Redis away or the key refused: the last copy stands
        table = {}
        for target, value in raw.items():
            try:
                decoded = json.loads(value)
            except (TypeError, ValueError):
                continue
            if isinstance(decoded, dict):
                name = target.decode("utf-8", "replace") if isinstance(target, bytes) else str(target)
                table[name] = decoded
        self.table = table
        self._read_at = time.monotonic()
