"""How much work the whole cluster has, as this node last counted it (what has_pending_requests reports).

Cheap: one read-only script call per COUNTS_INTERVAL while this node holds no work, the pending
counter the frontier's scripts keep, never a scan. When the cluster's work runs out, the engine is
woken to see it and close the spider.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from redis.exceptions import ResponseError

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.types import AnyRedis, SyncRedis
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.counts import CrawlCounts

COUNTS_INTERVAL = 1.0  # while this node holds no work: how often it asks how much the cluster has


class ClusterWork:
    def __init__(
        self,
        frontier: Frontier,
        trouble: RedisTrouble,
        lifecycle: Lifecycle,
        holds_work: Callable[[], bool],
        ran_out: Callable[[], None],
    ) -> None:
        self.frontier = frontier
        self.trouble = trouble
        self.lifecycle = lifecycle
        self.holds_work = holds_work  # this node holds work: it asks nothing meanwhile
        self.ran_out = ran_out  # the cluster's work ran out: the engine is woken to see it and close
        self.counts = CrawlCounts()
        # pushes this node made / of them, those the last count had seen: work not yet counted
        # keeps the node busy (a push to a host in ready shows only in the next count)
        self._pushes = self._pushes_counted = 0

    @property
    def busy(self) -> bool:
        return self.counts.frontier_busy or self._pushes != self._pushes_counted

    def pushed(self, n: int) -> None:
        """This node pushed `n` requests: counted as pending at once (the next count may not have run)."""
        self.counts = replace(self.counts, pending=(self.counts.pending or 0) + n)
        self._pushes += 1

    def reset(self) -> None:
        self.counts = CrawlCounts()

    async def count(self, client: AnyRedis | None = None) -> CrawlCounts:
        before = self._pushes
        self.counts = await self.frontier.counts(client=client)
        self._pushes_counted = before
        return self.counts

    def count_sync(self, client: SyncRedis) -> CrawlCounts:
        """Count on a sync client (Scrapy's `len(scheduler)` is synchronous); Redis away or refusing:
        the last count stands (the background tasks report it)."""
        try:
            self.trouble.policy.run_sync(Purpose.STATS, lambda: run_sync(self.count(client)))
        except ResponseError:
            pass
        return self.counts

    async def run(self) -> None:
        while not self.lifecycle.stopped:
            await asyncio.sleep(COUNTS_INTERVAL)
            if self.holds_work():
                continue
            was_busy = self.counts.frontier_busy
            if await self.trouble.run(Purpose.HEARTBEAT, "counting the queue", self.count) is None:
                continue  # Redis away or refusing: the last count stands
            if was_busy and not self.counts.frontier_busy:
                self.ran_out()
