"""Page counts per type and language: summed for the cluster in Redis, bounded per host, read back defensively."""

from __future__ import annotations

import asyncio

import pytest
import redis

from distributed_crawler.news import counts
from distributed_crawler.news.counts import NewsCounts, read_page_counts
from distributed_crawler.news.storing import StorePolicy, language_name, primary_language


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
    assert broken.fields == {"page_type:article:stored": 1}  # kept for the next flush


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
