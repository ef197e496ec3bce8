"""Page counts per type and language: summed for the cluster in Redis, bounded per host, read back defensively."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.news import counts
from distributed_crawler.news.counts import NewsCounts, read_page_counts
from distributed_crawler.news.storing import StorePolicy, language_name, primary_language
from tests.conftest import RedisServer
from tests.lost_reply import lossy_proxy


def test_two_nodes_add_up_and_a_failed_flush_keeps_its_counts(redis_client: redis.Redis) -> None:
    a, b = (NewsCounts(redis_client, "{n}:stats", "{n}:language:skipped") for _ in range(2))
    for node in (a, b):
        node.stored("article")
        node.not_stored("list", ("page_type", "list"), "x.example")
        node.not_stored("article", ("language", "fr"), "x.example")
    b.not_stored("article", ("language", "fr"), "y.example")
    asyncio.run(a.flush())
    asyncio.run(b.flush())
    asyncio.run(b.flush())  # nothing new: no round trip, nothing added twice
    stats = redis_client.hgetall("{n}:stats")
    assert read_page_counts(stats) == (
        {"article": {"stored": 2, "skipped": 3}, "list": {"stored": 0, "skipped": 2}},
        {"fr": 3},
    )
    assert redis_client.zrange("{n}:language:skipped", 0, -1, withscores=True) == [
        (b"y.example", 1.0),
        (b"x.example", 2.0),
    ]
    redis_client.set("{n}:wrong", "a string")
    broken = NewsCounts(redis_client, "{n}:wrong", "{n}:language:skipped")
    broken.stored("article")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        asyncio.run(broken.flush())
    assert broken.pending() == {"page_type:article:stored": 1}  # kept for the next flush


def test_per_host_counts_keep_the_hosts_with_the_most(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counts, "MAX_HOSTS", 3)
    node = NewsCounts(redis_client, "{n}:stats", "{n}:language:skipped")
    for host, n in (("a", 5), ("b", 1), ("c", 3)):
        for _ in range(n):
            node.not_stored("article", ("language", "en"), host)
    node.not_stored("article", ("language", "en"), "d")  # a fourth host in memory: only the totals count it
    assert set(node.hosts) == {"a", "b", "c"} and node.fields["language:en:skipped"] == 10
    asyncio.run(node.flush())
    for _ in range(2):
        node.not_stored("article", ("language", "en"), "e")
    asyncio.run(node.flush())
    assert redis_client.zrevrange("{n}:language:skipped", 0, -1, withscores=True) == [
        (b"a", 5.0),
        (b"c", 3.0),
        (b"e", 2.0),
    ]


def test_garbage_in_the_stats_hash_is_reset_or_left_out(redis_client: redis.Redis) -> None:
    redis_client.hset(
        "{n}:stats",
        mapping={
            "pages": 7,
            "page_type:article:stored": "garbage",
            "page_type:x y:stored": 3,
            "page_type:list:skipped": -4,
            "language:toolong:skipped": 1,
            "language:de:skipped": 2,
            "page_type:list:what": 1,
        },
    )
    node = NewsCounts(redis_client, "{n}:stats", "{n}:language:skipped")
    node.stored("article")
    asyncio.run(node.flush())
    assert redis_client.hget("{n}:stats", "page_type:article:stored") == b"1"  # garbage reset to the delta
    assert read_page_counts(redis_client.hgetall("{n}:stats")) == ({"article": {"stored": 1, "skipped": 0}}, {"de": 2})


def test_a_refused_flush_writes_nothing_so_its_retry_counts_once(redis_client: redis.Redis) -> None:
    """A per-host zset of the wrong type: the stats hash must not take the counts of a flush that
    is refused (they are kept on the node and sent again: a partial write would count them twice)."""
    redis_client.hset("{n}:stats", "page_type:article:skipped", 5)
    redis_client.set("{n}:language:skipped", "a string")
    node = NewsCounts(redis_client, "{n}:stats", "{n}:language:skipped")
    node.not_stored("article", ("language", "fr"), "x.example")
    for _ in range(2):  # the node's next flushes meet the same key
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            asyncio.run(node.flush())
    assert redis_client.hgetall("{n}:stats") == {b"page_type:article:skipped": b"5"}
    redis_client.delete("{n}:language:skipped")  # the operator's fix
    asyncio.run(node.flush())
    assert read_page_counts(redis_client.hgetall("{n}:stats")) == ({"article": {"stored": 0, "skipped": 6}}, {"fr": 1})


def test_a_flush_whose_reply_is_lost_is_counted_once(redis_server: RedisServer, redis_client: redis.Redis) -> None:
    """The script runs, its answer is lost: redis-py sends the call again on a new connection
    (its retry), or the flush fails and the node sends it at its next flush."""
    redis_client.flushall()
    with lossy_proxy(redis_server.port) as proxy:
        retrying = RedisConfig(url=proxy.url).sync_client()  # a node's client: a dropped call is sent again
        node = NewsCounts(retrying, "{n}:stats", "{n}:language:skipped")
        node.stored("article")
        asyncio.run(node.flush())  # loads the script
        for _ in range(3):
            node.stored("article")
        node.not_stored("article", ("language", "fr"), "x.example")
        proxy.lose.set()
        asyncio.run(node.flush())
        assert proxy.lost == 1
        retrying.close()

        once = redis.Redis.from_url(proxy.url, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
        other = NewsCounts(once, "{n}:stats", "{n}:language:skipped")
        other.stored("article")
        proxy.lose.set()
        with pytest.raises(redis.ConnectionError):
            asyncio.run(other.flush())
        other.stored("article")  # counted meanwhile
        asyncio.run(other.flush())
        asyncio.run(other.flush())
        once.close()
    assert read_page_counts(redis_client.hgetall("{n}:stats")) == (
        {"article": {"stored": 6, "skipped": 1}},
        {"fr": 1},
    )
    assert redis_client.zscore("{n}:language:skipped", "x.example") == 1


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    """A redis-server that refuses writes once set full (maxmemory, noeviction), as the product
    harness's `redis-full` fault does."""
    server = RedisServer(tmp_path, "--maxmemory-policy", "noeviction").start()
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()
        server.stop()


def test_a_full_redis_is_not_taken_for_garbage_and_the_counts_land_once(full_redis: redis.Redis) -> None:
    full_redis.hset("{n}:stats", "page_type:article:stored", 40)
    node = NewsCounts(full_redis, "{n}:stats", "{n}:language:skipped")
    for _ in range(8):
        node.stored("article")
    full_redis.config_set("maxmemory", "1")
    try:
        for _ in range(2):
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                asyncio.run(node.flush())
        assert full_redis.hget("{n}:stats", "page_type:article:stored") == b"40"  # neither reset nor added
    finally:
        full_redis.config_set("maxmemory", "0")
    asyncio.run(node.flush())
    asyncio.run(node.flush())
    assert full_redis.hget("{n}:stats", "page_type:article:stored") == b"48"


def test_languages_compare_on_their_primary_subtag() -> None:
    assert [primary_language(v) for v in ("en-GB", "de_AT", "fr", "", None, "e", "1x", "en gb")] == [
        "en",
        "de",
        "fr",
        None,
        None,
        None,
        None,
        None,
    ]
    policy = StorePolicy(("article",), ("de",))
    assert policy.skip_reason("article", "de-CH") is None
    assert policy.skip_reason("mystery", "de") == ("page_type", "other")  # an unknown type is "other"
    assert language_name("de") == "German" and language_name("qq") == "qq"
