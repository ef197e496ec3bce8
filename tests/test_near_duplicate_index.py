"""The near-duplicate index's window: generations on server time that expire by themselves.

Fast: a real redis-server, the index called directly with chosen times (no waiting).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from redis.asyncio import Redis

from distributed_crawler.connection.calls import run_sync, server_time
from distributed_crawler.news.nearduplicate import Match, NearDuplicateIndex

KEY = "{t}:simhash"
WINDOW = 1000.0
A = 0x0123_4567_89AB_CDEF


@pytest.fixture
def client(redis_url: str, redis_client: redis.Redis) -> Iterator[Redis]:
    redis_client.flushdb()
    yield Redis.from_url(redis_url)


def check(client: Redis, value: int, url: str, now: float | None = None, window: float = WINDOW) -> Match | None:
    async def go() -> Match | None:
        try:
            return await NearDuplicateIndex(client, KEY, 3, window).check_add(value, url, now)
        finally:
            await client.aclose()

    return asyncio.run(go())


def server_now(redis_client: redis.Redis) -> float:
    return float(run_sync(server_time(redis_client)))


def generation(now: float) -> int:
    return int(now // WINDOW)


def test_a_copy_is_found_for_one_to_two_windows_then_forgotten(client: Redis, redis_client: redis.Redis) -> None:
    t0 = generation(server_now(redis_client)) * WINDOW + 10  # early in a generation
    assert check(client, A, "http://a.example/story", t0) is None
    assert check(client, A ^ 1, "http://b.example/copy", t0 + 5) == Match("http://a.example/story", 1)
    # the next generation still reads the previous one
    assert check(client, A ^ 3, "http://c.example/copy", t0 + WINDOW) == Match("http://a.example/story", 2)
    assert not redis_client.exists(f"{KEY}:g{generation(t0) + 1}:urls")  # a copy is not stored
    # two generations later the original is forgotten: the copy is an original now
    assert check(client, A ^ 1, "http://d.example/late", t0 + 2 * WINDOW) is None
    assert redis_client.hvals(f"{KEY}:g{generation(t0) + 2}:urls") == [b"http://d.example/late"]


def test_a_generation_expires_when_no_node_reads_it(client: Redis, redis_client: redis.Redis) -> None:
    now = server_now(redis_client)
    assert check(client, A, "http://a.example/story", now) is None
    keys = redis_client.keys(f"{KEY}:g{generation(now)}:*")
    assert len(keys) == 1 + 4  # the urls hash and one bucket per block (distance 3: 4 blocks)
    expires = {redis_client.expiretime(k) for k in keys}
    assert expires == {(generation(now) + 2) * int(WINDOW)}  # when generation + 2 starts, nobody reads it


def test_default_time_is_the_servers(client: Redis, redis_client: redis.Redis) -> None:
    assert check(client, A, "http://a.example/story") is None
    gen = generation(server_now(redis_client))
    assert redis_client.exists(f"{KEY}:g{gen}:urls") or redis_client.exists(f"{KEY}:g{gen - 1}:urls")


def test_a_page_fetched_again_stays_remembered_once(client: Redis, redis_client: redis.Redis) -> None:
    t0 = generation(server_now(redis_client)) * WINDOW + 10
    url = "http://a.example/story"
    assert check(client, A, url, t0) is None
    assert check(client, A, url, t0 + 1) is None  # the same generation: nothing stored again
    assert redis_client.hlen(f"{KEY}:g{generation(t0)}:urls") == 1
    # only the previous generation remembers it: stored in the current one, once
    for changed in (A, A ^ 1, A):
        assert check(client, changed, url, t0 + WINDOW) is None
    current = f"{KEY}:g{generation(t0) + 1}"
    assert redis_client.hvals(f"{current}:urls") == [url.encode()]
    assert all(redis_client.strlen(k) == 8 for k in redis_client.keys(f"{current}:4.*"))
    # and so a copy three windows after the first fetch still finds it
    assert check(client, A ^ 1, "http://b.example/copy", t0 + 2 * WINDOW) == Match(url, 1)


def test_the_first_stored_of_equally_close_articles_wins_across_generations(
    client: Redis, redis_client: redis.Redis
) -> None:
    t0 = generation(server_now(redis_client)) * WINDOW + 10
    assert check(client, A, "http://old.example/a", t0) is None
    # stored in the next generation: 4 bits from the old one, so not its copy
    far = A ^ 0b1111
    assert check(client, far, "http://new.example/b", t0 + WINDOW) is None
    # the closest wins, whichever generation holds it
    assert check(client, A ^ 0b111, "http://x.example/c", t0 + WINDOW) == Match("http://new.example/b", 1)
    assert check(client, A ^ 1 ^ (1 << 40), "http://x.example/d", t0 + WINDOW) == Match("http://old.example/a", 2)
    # equally close to both (2 bits each): the one stored first
    assert check(client, A ^ 0b11, "http://x.example/e", t0 + WINDOW) == Match("http://old.example/a", 2)


def test_without_a_window_the_keys_never_expire(client: Redis, redis_client: redis.Redis) -> None:
    assert check(client, A, "http://a.example/story", window=0) is None
    assert redis_client.hvals(f"{KEY}:urls") == [b"http://a.example/story"]
    assert all(redis_client.ttl(k) == -1 for k in redis_client.keys(f"{KEY}:*"))
    assert check(client, A ^ 1, "http://b.example/copy", window=0) == Match("http://a.example/story", 1)


def test_garbage_in_either_generation_is_skipped(client: Redis, redis_client: redis.Redis) -> None:
    t0 = generation(server_now(redis_client)) * WINDOW + 10
    index = NearDuplicateIndex(redis_client, KEY, 3, WINDOW)
    prefixes, _ = index.generations(t0 + WINDOW)
    keys = index.script_keys(A, prefixes)
    new, old = keys[:5], keys[5:]  # the current generation's urls + 4 buckets, then the previous one's
    for key in old[1:] + new[1:]:
        redis_client.set(key, b"\x01\x02\x03")  # not a whole 8-byte entry
    redis_client.hset(old[0], b"\x00" * 8, "http://nowhere/")  # an entry no bucket holds
    assert check(client, A, "http://a.example/story", t0 + WINDOW) is None
    assert all(redis_client.strlen(k) == 8 for k in new[1:])  # cut to whole entries, then this one
    assert all(redis_client.strlen(k) == 3 for k in old[1:])  # the previous generation is only read
