"""`RecrawlMover` (extension): every node moves due revisits into the frontier (recrawl_move.lua).

The move is one atomic script per frontier shard (a shard's schedule holds its own hosts' URLs),
so any number of nodes may run it: a due URL is moved once, goes into its host's queue like any
request (politeness and fairness are the frontier's) and whichever node is free pops it. One round
moves up to RECRAWL_MOVE_BATCH per shard, then sleeps until the next URL of any shard is due, at
most RECRAWL_POLL_SECONDS; while the schedule is empty (a crawl without revisits), EMPTY_POLLS times
that, or until this node records a first visit: an idle crawl costs a call per shard every 10 s per node.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError
from scrapy import signals

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.untrusted import EpisodeLog
from distributed_crawler.recrawl.node import RecrawlNode

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)
EMPTY_POLLS = 10  # an empty schedule is looked at every RECRAWL_POLL_SECONDS x this


class RecrawlMover:
    def __init__(self, node: RecrawlNode) -> None:
        self.node = node
        self.config = node.config
        self._task: asyncio.Task[None] | None = None
        self._errors = EpisodeLog(logger)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMover:
        mover = cls(RecrawlNode.of(crawler))
        crawler.signals.connect(mover.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mover.spider_closed, signal=signals.spider_closed)
        return mover

    def spider_opened(self, spider: Spider) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dc-recrawl-mover")

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _refused(self, exc: BaseException) -> None:
        """A key of the wrong type: one line, then keep looking (with backoff)."""
        if not isinstance(exc, ResponseError):
            raise exc
        schedule = self.node.schedule
        self._errors.failed(
            "move",
            "Redis refused to move due revisits (%s); check %s (`dcrawl schedule %s`)",
            str(exc)[:200],
            schedule.where,
            schedule.frontier.spider,
        )

    async def _moved_ok(self) -> None:
        self._errors.ok("move")

    async def _run(self) -> None:
        schedule = self.node.schedule
        stats = self.node.stats
        move = partial(schedule.move_due, self.config.move_batch, self.config.pending_seconds)
        while True:
            wait = self.config.poll_seconds
            empty = False
            # PUSH: due revisits become new work; Redis away, this waits (the schedule keeps them)
            moved = await self.node.policy.run(Purpose.PUSH, move, on_error=self._refused, on_ok=self._moved_ok)
            if moved.moved:
                stats.inc_value("recrawl/moved", moved.moved)
            if moved.ended:
                stats.inc_value("recrawl/ended", moved.ended)
            if moved.dropped:
                stats.inc_value("recrawl/dropped", moved.dropped)
                logger.warning("Dropped %d unreadable revisit states from %s", moved.dropped, schedule.where)
            if moved.moved >= self.config.move_batch:
                wait = 0.0
            elif moved.next_due is not None:
                wait = min(wait, max(0.01, moved.next_due))
            else:
                empty = True
            if not empty:
                await asyncio.sleep(wait)
                continue
            self.node.recorded.clear()  # the schedule is empty: look again in a while, or at a first record
            try:
                await asyncio.wait_for(self.node.recorded.wait(), timeout=wait * EMPTY_POLLS)
            except TimeoutError:
                pass
