"""host_block.lua on a real redis-server: block a host for every node, adaptive backoff, reset, garbage.

Every value in the host hash and the ready zset is untrusted (a manual `redis-cli`, an older
version): the script returns normally whatever they hold; only a key of the wrong Redis type
raises, and then WRONGTYPE. Nothing here sleeps: times are compared with Redis TIME.
"""

from __future__ import annotations

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys

KEYS = SpiderKeys.from_settings(Settings(), "g")
HOST = "site.test"
HASH = KEYS.host(HOST)
GARBAGE = [b"abc", b"nan", b"inf", b"-inf", b"1e400", b"", b"\xff\xfe", b"99999999999999999999", b"-5", b"2.5"]


def now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


@pytest.fixture
def scripts(redis_client: redis.Redis) -> Frontier:
    return frontier_for_mode(redis_client, KEYS, "host")


def block(scripts: Frontier, seconds: float | None = None, rand: float = 0.5, cap: float = 60.0) -> float:
    return float(run_sync(scripts.block_host(HOST, seconds, "429 Too Many Requests", 1.0, cap, rand)))


def test_retry_after_blocks_the_host_and_pushes_its_ready_time(scripts: Frontier, redis_client: redis.Redis) -> None:
    start = now(redis_client)
    redis_client.zadd(KEYS.ready, {HOST: start})
    assert block(scripts, seconds=7) == pytest.approx(7, abs=0.01)
    state = redis_client.hgetall(HASH)
    assert float(state[b"until"]) == pytest.approx(start + 7, abs=0.5)
    assert state[b"why"] == b"429 Too Many Requests" and state[b"bo"] == b"0"  # Retry-After: no escalation
    assert redis_client.zscore(KEYS.ready, HOST) == pytest.approx(start + 7, abs=0.5)
    # A shorter Retry-After never shortens a block; the cap bounds a long one.
    assert block(scripts, seconds=1) == pytest.approx(7, abs=0.5)
    assert block(scripts, seconds=3600, cap=20) == pytest.approx(20, abs=0.5)


def test_a_host_without_pending_requests_is_not_added_to_ready(scripts: Frontier, redis_client: redis.Redis) -> None:
    block(scripts, seconds=5)
    assert redis_client.zcard(KEYS.ready) == 0
    assert float(redis_client.hget(HASH, "until") or 0) > now(redis_client)


def test_adaptive_backoff_doubles_with_equal_jitter_and_resets(scripts: Frontier, redis_client: redis.Redis) -> None:
    delays = []
    for _ in range(8):
        redis_client.hset(HASH, "until", 0)  # the previous block is over (written, not slept)
        delays.append(block(scripts, rand=0.0, cap=16))
    # step = min(16, 2^(bo-1)); rand 0 = the lower bound, step / 2
    assert delays == pytest.approx([0.5, 1, 2, 4, 8, 8, 8, 8], abs=0.01)
    assert redis_client.hget(HASH, "bo") == b"8"
    redis_client.hset(HASH, "until", 0)
    assert block(scripts, rand=0.999999, cap=16) == pytest.approx(16, abs=0.01)  # upper bound: the step
    run_sync(scripts.reset_host_backoff(HOST))
    assert redis_client.hget(HASH, "bo") == b"0"
    redis_client.hset(HASH, "until", 0)
    assert block(scripts, rand=0.0) == pytest.approx(0.5, abs=0.01)


def test_a_blocked_host_is_not_escalated_by_the_429s_already_in_flight(
    scripts: Frontier, redis_client: redis.Redis
) -> None:
    first = block(scripts, rand=0.0)
    for _ in range(5):
        assert block(scripts, rand=0.0) <= first
    assert redis_client.hget(HASH, "bo") == b"1"


def test_reset_keeps_the_block_and_creates_no_hash(scripts: Frontier, redis_client: redis.Redis) -> None:
    run_sync(scripts.reset_host_backoff("never.seen"))
    assert not redis_client.exists(KEYS.host("never.seen"))
    block(scripts, seconds=30)
    run_sync(scripts.reset_host_backoff(HOST))
    assert float(redis_client.hget(HASH, "until") or 0) > now(redis_client) + 20


def test_unblock_lifts_only_a_block_of_its_own_reason(scripts: Frontier, redis_client: redis.Redis) -> None:
    start = now(redis_client)
    redis_client.zadd(KEYS.ready, {HOST: start})
    run_sync(scripts.block_host(HOST, 5, "robots.txt pending", 1.0, 60.0, 0.5))
    assert redis_client.zscore(KEYS.ready, HOST) == pytest.approx(start + 5, abs=0.5)
    doorbell = redis_client.pubsub()
    doorbell.subscribe(KEYS.doorbell)
    assert doorbell.get_message(timeout=1)["type"] == "subscribe"
    assert run_sync(scripts.unblock_host(HOST, "robots.txt pending")) is True
    # idle nodes wake and pop the host now: a ring on the host's shard that names no push
    assert doorbell.get_message(timeout=1)["data"] == b"1 g -1"
    doorbell.close()
    assert float(redis_client.hget(HASH, "until") or 1) == 0
    assert redis_client.zscore(KEYS.ready, HOST) == pytest.approx(now(redis_client), abs=0.5)  # due now
    # A 429's block is not lifted by the robots.txt fetch ending, and a host not in ready is not added.
    redis_client.zrem(KEYS.ready, HOST)
    block(scripts, seconds=7)
    assert run_sync(scripts.unblock_host(HOST, "robots.txt pending")) is False
    assert float(redis_client.hget(HASH, "until") or 0) > now(redis_client) + 5
    assert redis_client.zcard(KEYS.ready) == 0


@pytest.mark.parametrize("value", GARBAGE)
@pytest.mark.parametrize("field", ["bo", "until", "iv", "cd", "why", "pages", "max"])
def test_garbage_in_the_host_hash_never_crashes(
    scripts: Frontier, redis_client: redis.Redis, field: str, value: bytes
) -> None:
    redis_client.hset(HASH, field, value)
    redis_client.zadd(KEYS.ready, {HOST: 0})
    delay = block(scripts, rand=0.0, cap=16)
    assert 0 <= delay <= 16
    bo = int(redis_client.hget(HASH, "bo") or 0)
    assert 0 <= bo <= 64
    until = float(redis_client.hget(HASH, "until") or 0)
    assert until <= now(redis_client) + 16.5
    run_sync(scripts.reset_host_backoff(HOST))
    assert redis_client.hget(HASH, "bo") == b"0"


def test_a_far_future_until_is_garbage_not_a_block_for_ever(scripts: Frontier, redis_client: redis.Redis) -> None:
    redis_client.hset(HASH, mapping={"until": "99999999999", "bo": "3"})
    assert block(scripts, seconds=2) == pytest.approx(2, abs=0.5)


@pytest.mark.parametrize("score", [float("inf"), float("-inf"), 0, 1e18])
def test_any_ready_score_is_raised_only(scripts: Frontier, redis_client: redis.Redis, score: float) -> None:
    redis_client.zadd(KEYS.ready, {HOST: score, "other.test": 0})
    block(scripts, seconds=5)
    after = redis_client.zscore(KEYS.ready, HOST)
    assert after is not None and after >= score
    assert redis_client.zscore(KEYS.ready, "other.test") == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["block", HOST, "abc", "", "x", "y", "z"],
        ["block", HOST, "nan", "r", "nan", "inf", "2"],
        ["block", HOST, "-3", "r" * 10_000, "-1", "-1", "-1"],
        ["block", HOST],
        ["nonsense"],
    ],
)
def test_garbage_argv_takes_defaults(redis_client: redis.Redis, argv: list[str]) -> None:
    raw = redis_client.register_script(lua_source("host_block"))
    delay = float(raw(keys=[KEYS.ready, HASH], args=argv))
    assert 0 <= delay <= 60
    assert len(redis_client.hget(HASH, "why") or b"") <= 200


def test_keys_of_the_wrong_type_raise_wrongtype(scripts: Frontier, redis_client: redis.Redis) -> None:
    redis_client.set(HASH, "a string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        block(scripts, seconds=1)
    redis_client.delete(HASH)
    redis_client.set(KEYS.ready, "a string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        block(scripts, seconds=1)
