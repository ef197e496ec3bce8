"""The doorbell's one message shape (frontier/doorbell.py, lua/lib/doorbell.lua): every script that
rings names its shard, and the rings of older nodes ("1", a bare count) still wake a node."""

from __future__ import annotations

import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.doorbell import PushesSeen, Ring
from distributed_crawler.frontier.factory import frontier_from_settings


def test_every_format_parses_into_one_shape() -> None:
    assert Ring.parse(b"3 news~1.7 42") == Ring(3, "news~1.7", 42)
    assert Ring.parse("0 news 9").drained and not Ring.parse(b"1 news 9").drained
    assert Ring.parse(b"1 news -1") == Ring(1, "news", None)  # no push named: never stale
    assert Ring.parse(b"1") == Ring(1, None, None)  # an older node's unblock ring: no shard named
    assert Ring.parse(b"17") == Ring(17, None, None)  # an older node's revisit ring
    assert Ring.parse(1) == Ring() and Ring.parse(None) == Ring()  # a subscription's confirmation
    assert Ring.parse(b"\xff garbage x") == Ring(None, "garbage", None)
    assert Ring.parse(Ring(2, "t", 5).text()) == Ring(2, "t", 5)


def test_a_ring_is_stale_only_for_a_push_a_lease_saw() -> None:
    seen = PushesSeen()
    assert not seen.stale(Ring(1, "t", 1))  # nothing seen yet
    seen.leased(5)
    assert seen.stale(Ring(1, "t", 5)) and not seen.stale(Ring(1, "t", 6)) and not seen.stale(Ring(1, "t", None))
    assert not seen.drained(Ring(1, "t", 9)) and seen.drained(Ring(0, "t", 9)) and seen.stale(Ring(1, "t", 8))


def test_an_unblock_rings_only_the_hosts_shard(redis_client: redis.Redis) -> None:
    """host_block.lua's ring names its shard (it used to publish a bare "1": every shard asked again)."""
    settings = Settings({"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    sharded = frontier_from_settings(settings, "bell", redis_client)
    hosts = sharded.host_control()
    assert hosts is not None
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(sharded.doorbell)
    pubsub.get_message(timeout=1)
    run_sync(hosts.block_host("a.test", 60, "robots.txt pending", 1.0, 60.0, 0.5))
    run_sync(hosts.unblock_host("a.test", "robots.txt pending"))
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert message is not None
    ring = Ring.parse(message["data"])
    shard = sharded.shard_for("http://a.test/")
    assert (ring.queued, ring.tag, ring.seq) == (1, shard.keys.tag, None)
