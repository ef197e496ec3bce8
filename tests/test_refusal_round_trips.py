"""A batch holding refused requests costs the outbox one round trip, counted on the wire (one socket
write of redis-py = one round trip, as bench/probe.py counts them): the refused links' fingerprints
and dead letters ride in enqueue.lua with the pushes, a new link dead-lettered once, the lease a
refused successor replaces removed in the step that writes its letter; over frontier shards one
script call per shard the batch touches."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.admission import Refusal
from distributed_crawler.core.outbox import OutboxEntry
from distributed_crawler.frontier.factory import frontier_from_settings
from tests.round_trips import member_of, push_and_lease, scheduler_for

pytestmark = pytest.mark.timeout(120)
HANDSHAKE = {"hello", "ping", "client", "auth", "select"}  # a connection's opening, once per connection


class _Spider(Spider):
    name = "rr"


def _batch_with_refusals(settings: dict[str, Any], client: redis.Redis, round_trips: list[str]) -> dict[str, Any]:
    crawler, spider, scheduler = scheduler_for(_Spider, settings)
    frontier = frontier_from_settings(Settings(settings), "rr", client)
    lease = push_and_lease(frontier, "http://home.test/moved").lease
    fp = {u: scheduler.df.fingerprint_hex(Request(u)) for u in ("http://a.test/", "http://b.test/", "http://c.test/")}
    private = Refusal("private_address", "private")

    def letter(url: str) -> str:
        return scheduler.refusals.note(url, private, "enqueue", attempts=0, payload=json.dumps({"url": url}))

    async def scenario() -> dict[str, Any]:
        parts = await scheduler.open_parts(spider)
        outbox = parts.outbox
        try:
            # warm-up: the connection open, the script loaded, c.test's link seen (a node does this once)
            outbox.add(OutboxEntry(fp["http://c.test/"], False, member_of(frontier, "http://c.test/"), None))
            task = asyncio.ensure_future(outbox.run())
            for _ in range(500):
                if outbox.flushed_seq == outbox.enqueued_seq:
                    break
                await asyncio.sleep(0.01)
            round_trips.clear()
            outbox.add(OutboxEntry(fp["http://a.test/"], False, member_of(frontier, "http://a.test/"), None))
            outbox.add(OutboxEntry(fp["http://b.test/"], False, "", None, refused=letter("http://b.test/")))
            outbox.add(OutboxEntry(fp["http://c.test/"], False, "", None, refused=letter("http://c.test/")))
            outbox.add(OutboxEntry("", True, "", lease, refused=letter("http://10.0.0.1/moved")))
            for _ in range(500):
                if outbox.flushed_seq == outbox.enqueued_seq:
                    break
                await asyncio.sleep(0.01)
            sent = list(round_trips)
            scheduler.lifecycle.stop()
            outbox.ready.set()
            await asyncio.wait_for(task, 10)
            return {"sent": sent}
        finally:
            await scheduler.context.release()

    seen = asyncio.run(scenario())
    failed = [json.loads(x)["url"] for x in client.lrange("{rr}:failed", 0, -1)]
    if hasattr(frontier, "move_dead_letters"):
        run_sync(frontier.move_dead_letters(100_000))  # what the reclaim round does over shards
        failed = [json.loads(x)["url"] for x in client.lrange("{rr}:failed", 0, -1)]
    seen["failed"] = sorted(failed)
    seen["processing"] = sum(client.zcard(part.keys.processing) for part in frontier.each_shard())
    seen["dead_lettered"] = crawler.stats.get_value("scheduler/dead_lettered/refused")
    seen["enqueued"] = crawler.stats.get_value("scheduler/enqueued/redis")
    seen["shards"] = (
        {
            frontier.shard_of_url(u)
            for u in ("http://a.test/", "http://b.test/", "http://c.test/", "http://10.0.0.1/moved")
        }
        if hasattr(frontier, "shard_of_url")
        else {0}
    )
    return seen


def test_a_batch_with_refusals_is_one_round_trip(
    redis_url: str, redis_client: redis.Redis, round_trips: list[str]
) -> None:
    redis_client.flushdb()
    seen = _batch_with_refusals({"REDIS_URL": redis_url}, redis_client, round_trips)
    assert seen["sent"] == ["evalsha"], seen["sent"]  # enqueue.lua: the push, the filter, the letters, the lease
    assert seen["failed"] == ["http://10.0.0.1/moved", "http://b.test/"]  # c.test's link was seen before
    assert seen["processing"] == 0  # the redirect's lease went with its letter
    assert seen["dead_lettered"] == 2 and seen["enqueued"] == 2  # the warm-up's push and a.test's


def test_a_batch_with_refusals_over_frontier_shards_is_a_call_per_shard(
    redis_url: str, redis_client: redis.Redis, round_trips: list[str]
) -> None:
    redis_client.flushdb()
    seen = _batch_with_refusals({"REDIS_URL": redis_url, "FRONTIER_SHARDS": 3}, redis_client, round_trips)
    calls = [c for c in seen["sent"] if c not in HANDSHAKE]  # the shards' calls in parallel: new connections
    assert set(calls) == {"evalsha"} and len(calls) <= len(seen["shards"]), seen["sent"]
    assert seen["failed"] == ["http://10.0.0.1/moved", "http://b.test/"]
    assert seen["processing"] == 0
    assert seen["dead_lettered"] == 2 and seen["enqueued"] == 2
