"""A duplicate link stops at the node that already sent it (dedup/recent.py), before any encoding or Redis call."""

from __future__ import annotations

import asyncio
from unittest.mock import AsyncMock

import redis
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.meta import LEASE_META
from tests.scheduler_parts import parts_without_redis


class _Spider(Spider):
    name = "news"

    def parse(self, response: object) -> None:
        return None


def test_bounded_oldest_forgotten_first() -> None:
    recent = RecentFingerprints(2)
    for fp in ("a", "b", "a", "c"):
        recent.add(fp)
    assert "a" not in recent and "b" in recent and "c" in recent and len(recent) == 2
    off = RecentFingerprints(0)
    off.add("a")
    assert "a" not in off and len(off) == 0


def _scheduler(**settings: object) -> RedisScheduler:
    crawler = get_crawler(
        _Spider, settings_dict={"ADDONS": {"distributed_crawler.Addon": 0}, "NODE_ID": "n1", **settings}
    )
    crawler.spider = _Spider.from_crawler(crawler)
    scheduler = RedisScheduler.from_crawler(crawler)
    parts_without_redis(scheduler)  # what open() builds; nothing here talks to Redis
    return scheduler


def test_a_link_this_node_already_sent_is_dropped_locally() -> None:
    scheduler = _scheduler()
    assert scheduler.enqueue_request(Request("http://site.test/a?utm_source=x"))
    assert not scheduler.enqueue_request(Request("http://site.test/a"))  # same canonical URL
    assert scheduler.enqueue_request(Request("http://site.test/b"))
    # dont_filter requests always reach the shared filter's script (it decides, and pushes them)
    assert scheduler.enqueue_request(Request("http://site.test/a", dont_filter=True))
    assert scheduler.enqueue_request(Request("http://site.test/a", dont_filter=True))
    assert len(scheduler.parts.outbox.entries) == 4
    stats = scheduler.stats.get_stats()
    assert stats["dupefilter/filtered_locally"] == 1 and stats["dupefilter/filtered"] == 1


def test_already_sent_answers_what_enqueue_would_drop_and_counts_it_the_same() -> None:
    """The news spider asks before it yields a link: a link this node queued lately is dropped there,
    counted as enqueue counts it; anything enqueue would not drop locally is yielded as before."""
    scheduler = _scheduler()
    assert scheduler.enqueue_request(Request("http://site.test/a?utm_source=x"))
    assert scheduler.already_sent(Request("http://site.test/a#top"))  # same canonical URL
    assert not scheduler.already_sent(Request("http://site.test/b"))  # never sent: to the scheduler
    assert not scheduler.already_sent(Request("http://site.test/a", dont_filter=True))
    assert not scheduler.already_sent(Request("http://site.test/a", meta={LEASE_META: b"x"}))  # a successor
    stats = scheduler.stats.get_stats()
    assert stats["dupefilter/filtered_locally"] == 1 and stats["dupefilter/filtered"] == 1
    assert len(scheduler.parts.outbox.entries) == 1
    off = _scheduler(DUPEFILTER_LOCAL_CACHE_SIZE=0)
    assert off.enqueue_request(Request("http://site.test/a"))
    assert not off.already_sent(Request("http://site.test/a"))  # no local memory: Redis decides


def test_size_zero_sends_every_link_to_the_shared_filter() -> None:
    scheduler = _scheduler(DUPEFILTER_LOCAL_CACHE_SIZE=0)
    assert scheduler.enqueue_request(Request("http://site.test/a"))
    assert scheduler.enqueue_request(Request("http://site.test/a"))
    assert len(scheduler.parts.outbox.entries) == 2


def test_a_redelivery_or_the_end_of_an_outage_empties_the_cache() -> None:
    """A failover can lose writes Redis acknowledged: a page fetched again must queue its links
    again (seen in the Sentinel demote test: a list page's 20 links lost for good)."""
    scheduler = _scheduler()
    scheduler.frontier.release = AsyncMock(return_value=1)  # type: ignore[method-assign]  # a busy node gives it back
    assert scheduler.enqueue_request(Request("http://site.test/a"))
    assert not scheduler.enqueue_request(Request("http://site.test/a"))
    first = make_member(scheduler.parts.intake.codec.encode(Request("http://site.test/list")), 0, 1)
    asyncio.run(scheduler.parts.feeder.accept([first.encode()]))  # a first delivery: the cache stays
    assert not scheduler.enqueue_request(Request("http://site.test/a"))
    again = make_member(scheduler.parts.intake.codec.encode(Request("http://site.test/list2")), 0, 2)
    asyncio.run(scheduler.parts.feeder.accept([again.encode()]))
    assert scheduler.enqueue_request(Request("http://site.test/a"))  # to the shared filter again
    scheduler.parts.trouble.policy.failed(Purpose.LEASE, redis.ConnectionError("gone"))  # Redis was unreachable
    scheduler.parts.trouble.policy.ok()  # and answers again
    assert scheduler.enqueue_request(Request("http://site.test/a"))
