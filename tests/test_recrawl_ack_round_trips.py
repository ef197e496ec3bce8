"""A fetched page's revisit record rides with its ack (lua/recrawl_ack.lua), counted on the wire (one
socket write of redis-py = one round trip, as bench/probe.py counts them): scraping a batch of pages
costs no round trip for their records, and acking the batch costs one for every record and lease
together, on one Redis and over frontier shards. The record is written in the script that removes
the lease, so a lease is never acked without its record; a record Redis refuses does not hold the
ack back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.meta import HOST_SLOT_META, LEASE_META
from distributed_crawler.recrawl.schedule import RevisitSchedule
from distributed_crawler.recrawl.spidermiddleware import RecrawlSpiderMiddleware
from tests.round_trips import first_visit_records, push_and_lease, scheduler_for

pytestmark = pytest.mark.timeout(120)
PAGES = 12


class _Spider(Spider):
    name = "ra"

    def parse(self, response: Any) -> None:
        return None


async def _article(response: HtmlResponse) -> AsyncIterator[Any]:
    yield {"url": response.url, "text": f"the story of {response.url}", "page_type": "article"}


def _scrape_and_ack(settings: dict[str, Any], client: redis.Redis, round_trips: list[str]) -> dict[str, Any]:
    crawler, spider, scheduler = scheduler_for(_Spider, settings)
    middleware = RecrawlSpiderMiddleware.from_crawler(crawler)
    frontier = frontier_from_settings(Settings(settings), "ra", client)
    urls = [f"http://h{i}.test/story/{i}" for i in range(PAGES)]  # one a host: due at once
    leases = [push_and_lease(frontier, url).lease for url in urls]
    warm = push_and_lease(frontier, "http://warm.test/a").lease

    async def scrape(url: str, lease: bytes) -> None:
        scheduler.leases.buffered(lease)
        scheduler.leases.started(lease)
        scheduler.leases.scraping(lease)
        request = Request(url, meta={LEASE_META: lease, HOST_SLOT_META: frontier.placement(url).slot})
        response = HtmlResponse(url, body=b"<html><p>story</p></html>", request=request)
        async for _ in middleware.process_spider_output(response, _article(response)):
            pass
        scheduler.leases.finished(lease, 0)

    async def scenario() -> dict[str, Any]:
        parts = await scheduler.open_parts(spider)
        try:
            # warm-up: the node's connection open and its scripts loaded (a node does this once)
            await scrape("http://warm.test/a", warm)
            await parts.keeper.ack()
            round_trips.clear()
            for url, lease in zip(urls, leases):
                await scrape(url, lease)
            scraping = list(round_trips)
            round_trips.clear()
            await parts.keeper.ack()
            return {"scraping": scraping, "acking": list(round_trips)}
        finally:
            await scheduler.context.release()

    seen = asyncio.run(scenario())
    schedule = RevisitSchedule(client, frontier)
    try:
        seen["scheduled"] = [run_sync(schedule.state(middleware.node.fingerprint(Request(u)), u)) for u in urls]
    except redis.ResponseError:  # the state hash replaced by another type
        seen["scheduled"] = None
    seen["processing"] = sum(client.zcard(part.keys.processing) for part in frontier.each_shard())
    seen["first"] = crawler.stats.get_value("recrawl/recorded/first")
    seen["acked"] = crawler.stats.get_value("scheduler/acked")
    return seen


def test_records_ride_with_the_ack_in_one_round_trip(
    redis_url: str, redis_client: redis.Redis, round_trips: list[str]
) -> None:
    redis_client.flushdb()
    seen = _scrape_and_ack({"REDIS_URL": redis_url}, redis_client, round_trips)
    assert seen["scraping"] == []  # no record call of its own per page
    assert seen["acking"] == ["evalsha"], seen["acking"]  # recrawl_ack.lua: every record and lease
    assert all(state is not None and state.member for state in seen["scheduled"]), seen["scheduled"]
    assert seen["processing"] == 0
    assert seen["first"] == PAGES + 1 and seen["acked"] == PAGES + 1  # the warm-up's too


def test_records_ride_with_the_ack_over_frontier_shards(
    redis_url: str, redis_client: redis.Redis, round_trips: list[str]
) -> None:
    redis_client.flushdb()
    seen = _scrape_and_ack({"REDIS_URL": redis_url, "FRONTIER_SHARDS": 3}, redis_client, round_trips)
    assert seen["scraping"] == []
    assert len(seen["acking"]) == 1, seen["acking"]  # one pipeline: a recrawl_ack.lua call per shard
    assert all(state is not None for state in seen["scheduled"]), seen["scheduled"]  # each on its host's shard
    assert seen["processing"] == 0
    assert seen["first"] == PAGES + 1


def test_a_record_redis_refuses_does_not_hold_the_ack_back(
    redis_url: str, redis_client: redis.Redis, round_trips: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    redis_client.flushdb()
    redis_client.set("{ra}:recrawl:state", "not a hash")  # what a stray SET does to the state hash
    with caplog.at_level(logging.ERROR):
        seen = _scrape_and_ack({"REDIS_URL": redis_url}, redis_client, round_trips)
    assert seen["acking"] == ["evalsha"]
    assert seen["processing"] == 0  # acked: the page is done, only its next visit is lost
    assert not seen["first"]
    refused = [r.getMessage() for r in caplog.records if "refused to record the revisit" in r.getMessage()]
    assert len(refused) == PAGES + 1 and "WRONGTYPE" in refused[0], refused[:1]


@pytest.mark.parametrize("shards", [1, 3])
def test_a_sync_client_acks_with_records_and_a_record_of_another_shard_lands_too(
    shards: int, redis_url: str, redis_client: redis.Redis
) -> None:
    """What the second stop signal runs (a sync client): each record on the shard of its URL, even
    when its lease came from another shard (a redirect's URL, a custom slot), the leases removed."""
    redis_client.flushdb()
    settings = {"REDIS_URL": redis_url, "FRONTIER_SHARDS": shards}
    frontier = frontier_from_settings(Settings(settings), "ra", redis_client)
    schedule = RevisitSchedule(redis_client, frontier)
    urls = [f"http://h{i}.test/story" for i in range(6)]
    leases = [push_and_lease(frontier, url).lease for url in urls]
    # each lease carries the record of the next host's URL: with 3 shards some land on another shard
    records = first_visit_records(schedule, leases, urls[1:] + urls[:1], digest="d")
    replies = run_sync(frontier.ack_recorded(leases, records))
    assert [int(reply[1]) for reply in replies] == [-1] * len(urls)  # first visits, all written
    assert sum(redis_client.zcard(part.keys.processing) for part in frontier.each_shard()) == 0
    for i, url in enumerate(urls[1:] + urls[:1]):
        assert run_sync(schedule.state(f"{i:016x}", url)) is not None, url  # on the shard of its URL
