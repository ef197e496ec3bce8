"""Parts of scrapy-redis's scheduler contract that need no running engine (the rest runs end to end
in test_example_project.py: resume with "Resuming crawl (N requests scheduled)", start_urls of a
plain spider, SCHEDULER_PERSIST=False on a closespider reason)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis
from scrapy import Request
from scrapy.spiders import CrawlSpider
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.outbox import OutboxEntry
from distributed_crawler.core.scheduler import RedisScheduler, SchedulerConfig
from distributed_crawler.dedup.dupefilter import BloomDupeFilter
from distributed_crawler.frontier.codec import RequestCodec
from distributed_crawler.frontier.factory import frontier_for_mode, mode_class
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.meta import LEASE_META
from tests.scheduler_parts import parts_without_redis


class RulesSpider(CrawlSpider):
    name = "sched"

    def _private(self, response):
        return None

    def parse_page(self, response):
        return None


def _scheduler(redis_url: str) -> tuple[RedisScheduler, RulesSpider]:
    crawler = get_crawler(RulesSpider, {"REDIS_URL": redis_url})
    spider = crawler._create_spider()
    crawler.spider = spider
    crawler.stats.open_spider()
    keys = SpiderKeys.from_settings(crawler.settings, spider.name)
    context = RedisContext.of(crawler)
    dupefilter = BloomDupeFilter(RedisConfig(url=redis_url), keys)
    scheduler = RedisScheduler(
        crawler,
        SchedulerConfig(),
        RedisConfig(url=redis_url),
        frontier_for_mode(None, keys, "host"),
        dupefilter,
        "n1",
        context,
    )
    return scheduler, spider


def test_refused_requests_are_logged_once_per_kind(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    scheduler, spider = _scheduler(redis_url)
    parts_without_redis(scheduler)
    with caplog.at_level(logging.ERROR, logger="distributed_crawler.core.intake"):
        for i in range(3):
            assert not scheduler.enqueue_request(Request(f"http://e.com/{i}", callback=spider._private))
            assert not scheduler.enqueue_request(Request(f"http://e.com/o{i}", meta={"obj": object()}))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "(callback)" in lines[0] and "'_private' is a private method" in lines[0]
    assert "(value)" in lines[1] and "meta['obj'] (object)" in lines[1]
    stats = scheduler.stats
    assert stats.get_value("scheduler/unserializable") == 6
    assert stats.get_value("scheduler/unserializable/callback") == 3
    assert stats.get_value("scheduler/unserializable/value") == 3
    assert not scheduler.has_pending_requests()


def test_pending_while_work_is_in_the_outbox(redis_url: str) -> None:
    scheduler, spider = _scheduler(redis_url)
    assert not scheduler.has_pending_requests() and len(scheduler) == 0  # not open: holds nothing
    parts = parts_without_redis(scheduler)
    assert not scheduler.has_pending_requests()
    parts.outbox.entries.append((1, OutboxEntry("ab" * 16, False, "0:0:{}", None)))
    assert scheduler.has_pending_requests()
    assert len(scheduler) == 1  # not open: what this node holds


def test_flush_drops_what_this_node_buffered(redis_url: str, redis_client: redis.Redis) -> None:
    scheduler, spider = _scheduler(redis_url)
    redis_client.zadd(scheduler.frontier.keys.processing, {b"0:0:lease": 1e12})
    redis_client.zadd(scheduler.frontier.keys.ready, {"e.com": 0})
    request = Request("http://e.com/buffered", meta={LEASE_META: b"0:0:lease"})

    async def flush() -> None:
        parts = await scheduler.open_parts(spider)
        try:
            scheduler.leases.buffered(b"0:0:lease", None)
            parts.held.buffer.append(request)
            parts.outbox.entries.append((1, OutboxEntry("cd" * 16, False, "0:0:{}", None)))
            parts.outbox.enqueued_seq = 1
            await scheduler.flush()
        finally:
            await scheduler.context.release()

    asyncio.run(flush())
    assert scheduler.next_request() is None
    assert not scheduler.has_pending_requests() and len(scheduler.parts.outbox.entries) == 0
    assert not redis_client.exists(scheduler.frontier.keys.processing, scheduler.frontier.keys.ready)
    assert len(scheduler.leases) == 0


@pytest.mark.parametrize(
    "name, mode",
    [
        ("scrapy_redis.queue.PriorityQueue", "priority"),
        ("scrapy_redis.queue.FifoQueue", "fifo"),
        ("scrapy_redis.queue.LifoQueue", "lifo"),
        ("scrapy_redis.queue.SpiderPriorityQueue", "priority"),
        ("scrapy_redis.queue.SpiderQueue", "fifo"),
        ("scrapy_redis.queue.SpiderStack", "lifo"),
    ],
)
def test_scrapy_redis_queue_classes_select_the_matching_mode(name: str, mode: str) -> None:

    assert mode_class(name)[1] == mode


def test_undecodable_payloads_are_logged_once_per_kind(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's CrawlSpider symptom: a payload naming a private callback used to land in failed
    with only a stat. Now each kind of refusal is one WARNING with its reason, then counted."""
    scheduler, spider = _scheduler(redis_url)
    good = RequestCodec(spider).encode(Request("http://e.com/ok", callback=spider.parse_page))
    private = good.replace('"callback":"parse_page"', '"callback":"_private"')
    members = [f"0:0:{private}".encode(), f"0:0:{private}".encode(), b"0:0:not json", b"0:0:still not json"]

    async def accept() -> None:
        parts = await scheduler.open_parts(spider)
        try:
            await parts.feeder.accept(members)
        finally:
            await scheduler.context.release()

    with caplog.at_level(logging.WARNING, logger="distributed_crawler.core.feeder"):
        asyncio.run(accept())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "(callback)" in lines[0] and "'_private' is not a public spider method" in lines[0]
    assert "(format)" in lines[1] and "not JSON" in lines[1]
    assert scheduler.stats.get_value("scheduler/undecodable") == 4
    assert scheduler.stats.get_value("scheduler/undecodable/callback") == 2
    assert redis_client.llen(scheduler.frontier.keys.failed) == 4
