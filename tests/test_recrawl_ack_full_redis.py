"""A full Redis (maxmemory, noeviction) refuses the write of a page's revisit record: the ack that
carries it must then wait too (lua/recrawl_ack.lua), on one Redis and over shards, or the page is
acked without its record and never revisited. Found by `make test-matrix` (the redis-full fault:
fewer revisits scheduled than pages stored)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import OutOfMemoryError
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import refused_for_good
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.recrawl.schedule import RevisitSchedule
from tests.conftest import RedisServer
from tests.round_trips import first_visit_records, push_and_lease

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("shards", [1, 3])
def test_a_full_redis_holds_the_ack_until_the_record_is_written(server: RedisServer, shards: int) -> None:
    client = redis.Redis.from_url(server.url)
    frontier = frontier_from_settings(Settings({"FRONTIER_SHARDS": shards}), "full", client)
    schedule = RevisitSchedule(client, frontier)
    urls = [f"http://h{i}.test/story/{i}" for i in range(4)]
    leases = [push_and_lease(frontier, url).lease for url in urls]
    records = first_visit_records(schedule, leases, urls)
    held = sum(client.zcard(part.keys.processing) for part in frontier.each_shard())
    assert held == len(urls)

    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")  # every write that may grow memory is refused
    try:
        with pytest.raises(OutOfMemoryError):
            run_sync(frontier.ack_recorded(leases, records))
        assert sum(client.zcard(part.keys.processing) for part in frontier.each_shard()) == held  # not acked
    finally:
        client.config_set("maxmemory", "0")

    replies = run_sync(frontier.ack_recorded(leases, records))  # Redis has room: the node sends it again
    assert [int(reply[1]) for reply in replies] == [-1] * len(urls)  # every record written: first visits
    assert sum(client.zcard(part.keys.processing) for part in frontier.each_shard()) == 0
    assert run_sync(schedule.summary(time.time()))["scheduled"] == len(urls)


def test_a_full_redis_is_a_wait_and_a_wrong_type_a_refusal(server: RedisServer) -> None:
    """What a component's own `except ResponseError` must tell apart (connection/clients.py
    `refused_for_good`): a revisit record or a dead letter refused by a full Redis waits (the policy
    retries it); one refused for a key of another type is dropped with its line."""
    client = redis.Redis.from_url(server.url)
    client.set("a-string", "x")
    with pytest.raises(redis.ResponseError) as wrong_type:
        client.lpush("a-string", "entry")
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")
    try:
        with pytest.raises(redis.ResponseError) as full:
            client.lpush("a-list", "entry")
    finally:
        client.config_set("maxmemory", "0")
    assert refused_for_good(wrong_type.value)
    assert not refused_for_good(full.value)
