"""A leased request a middleware holds back (robots.txt: a new host's first request while this node
fetches the file) stays on this node with its lease: not pushed, renewed as work, served first
once its wait is over, given back at close."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.meta import HOLD_META, LEASE_META, RETRY_DELAY_META
from tests.scheduler_parts import parts_without_redis

pytestmark = pytest.mark.timeout(60)


class _Spider(Spider):
    name = "held"

    def parse(self, response: Any) -> None:
        return None


def _scheduler(redis_url: str) -> RedisScheduler:
    crawler = get_crawler(
        _Spider, settings_dict={"ADDONS": {"distributed_crawler.Addon": 0}, "NODE_ID": "n1", "REDIS_URL": redis_url}
    )
    crawler.spider = _Spider.from_crawler(crawler)
    crawler.stats.open_spider()
    scheduler = RedisScheduler.from_crawler(crawler)
    parts_without_redis(scheduler)  # nothing here reaches Redis
    return scheduler


def _downloading(scheduler: RedisScheduler, url: str, lease: bytes) -> Request:
    scheduler.leases.buffered(lease)
    scheduler.leases.started(lease)  # handed to the engine
    return Request(url, meta={LEASE_META: lease})


def test_a_held_request_stays_here_with_its_lease_and_is_served_first(redis_url: str) -> None:
    scheduler = _scheduler(redis_url)

    async def scenario() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        held = _downloading(scheduler, "http://new.test/a", b"1:0:a")
        held.meta[HOLD_META], held.meta[RETRY_DELAY_META] = done, 0.0
        assert scheduler.enqueue_request(held)
        assert not scheduler.parts.outbox.entries  # no trip through Redis
        assert HOLD_META not in held.meta
        assert b"1:0:a" in scheduler.parts.keeper.working()  # renewed as work
        assert scheduler.has_pending_requests()
        other = _downloading(scheduler, "http://old.test/b", b"1:0:b")
        scheduler.leases.finished(b"1:0:b", 0)
        scheduler.parts.held.buffer.append(other)
        done.set_result(None)
        await asyncio.sleep(0)
        assert scheduler.next_request() is held  # before the buffer
        assert scheduler.leases.holds(b"1:0:a")

        # one still held when the node closes: its lease is given back, it is never served
        later = _downloading(scheduler, "http://new.test/c", b"1:0:c")
        later.meta[HOLD_META] = asyncio.get_running_loop().create_future()
        assert scheduler.enqueue_request(later)
        assert b"1:0:c" in scheduler.parts.keeper.unstarted()
        assert not scheduler.parts.held.back
        await asyncio.sleep(0)
        assert later not in scheduler.parts.held.buffer

    asyncio.run(scenario())


def test_a_request_that_cannot_be_held_is_handed_back(redis_url: str) -> None:
    """Its lease is not mid-download here (a bug elsewhere): handed back to Redis as any other."""
    scheduler = _scheduler(redis_url)

    async def scenario() -> None:
        hold: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        request = Request("http://new.test/a", meta={LEASE_META: b"1:0:x", HOLD_META: hold, RETRY_DELAY_META: 1.0})
        scheduler.enqueue_request(request)
        assert hold.cancelled() and not scheduler.parts.held.back
        assert HOLD_META not in request.meta

    asyncio.run(scenario())
