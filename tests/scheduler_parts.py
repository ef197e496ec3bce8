"""A scheduler's parts without Redis: what RedisScheduler.open builds, for tests that drive the
parts by hand (no background task, no client; the frontier's Redis methods are replaced by the test
or never called). A test against a real Redis awaits `scheduler.open_parts(spider)` instead."""

from __future__ import annotations

from typing import Any

from distributed_crawler.core.scheduler import RedisScheduler, SchedulerParts
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.codec import RequestCodec
from distributed_crawler.frontier.enqueue import Enqueuer


def parts_without_redis(scheduler: RedisScheduler, enqueuer: Any = None) -> SchedulerParts:
    """The parts on the scheduler's unbound frontier and the crawler's spider; `enqueuer` (None: one
    on a set filter, never opened: a push through it needs a client)."""
    frontier = scheduler.frontier
    trouble = RedisTrouble(frontier, scheduler.df, scheduler.context.policy, scheduler.recent, scheduler.lifecycle)
    enqueuer = enqueuer or Enqueuer(frontier, SetDedup(frontier.keys.dupefilter))
    codec = RequestCodec(scheduler.crawler.spider, scheduler.config.allowed_classes)
    scheduler.parts = scheduler.build_parts(frontier, trouble, enqueuer, codec)
    return scheduler.parts
