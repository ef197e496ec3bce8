"""killed_worker (lua/reclaim.lua): a request whose node died twice while running it alone is
dead-lettered instead of being handed to a third node; deaths in company only count deliveries."""

from __future__ import annotations

import hashlib
import json

import pytest
import redis

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import payload_url
from tests.test_queue_scripts import KEYS_T, enqueue, pop, scripts  # noqa: F401 - scripts is a fixture


def expire(client: redis.Redis, lease: str) -> None:
    client.zadd(KEYS_T.processing, {lease: 0}, xx=True)


def die_alone(client: redis.Redis, scripts: Frontier) -> tuple[int, int]:  # noqa: F811
    """The one queued request is leased, marked as running alone, and its node dies."""
    (lease,) = pop(scripts, "priority", 1)
    client.hset(KEYS_T.solo, lease, "node-x")
    expire(client, lease)
    return run_sync(scripts.reclaim(5, 100, 1000, "reclaimer"))


@pytest.fixture(autouse=True)
def _clean(redis_client: redis.Redis) -> None:
    redis_client.flushdb()


def test_two_deaths_alone_dead_letter_it(redis_client: redis.Redis, scripts: Frontier) -> None:  # noqa: F811
    enqueue(scripts, "priority", [("http://poison.test/page", 0)])
    assert die_alone(redis_client, scripts) == (1, 0)  # the first death alone: given another chance
    assert redis_client.hlen(KEYS_T.deaths) == 1 and redis_client.hlen(KEYS_T.solo) == 0
    assert die_alone(redis_client, scripts) == (0, 1)  # the second: a dead letter, not a third node
    (letter,) = [json.loads(x) for x in redis_client.lrange(KEYS_T.failed, 0, -1)]
    assert letter["reason"] == "killed_worker" and letter["url"] == "http://poison.test/page"
    assert letter["attempts"] == 2 and payload_url(letter["payload"]) == letter["url"]
    assert redis_client.zcard(KEYS_T.processing) == 0 and redis_client.hlen(KEYS_T.deaths) == 0


def test_deaths_in_company_count_only_deliveries(redis_client: redis.Redis, scripts: Frontier) -> None:  # noqa: F811
    enqueue(scripts, "priority", [("http://innocent.test/page", 0)])
    for _ in range(3):  # killed three times beside other requests (kill -9 of busy nodes)
        (lease,) = pop(scripts, "priority", 1)
        expire(redis_client, lease)
        assert run_sync(scripts.reclaim(5, 100, 1000, "reclaimer")) == (1, 0)
    assert die_alone(redis_client, scripts) == (1, 0)  # then once alone: still one more chance
    assert redis_client.llen(KEYS_T.failed) == 0


def test_the_schedulers_death_field_is_the_scripts(redis_client: redis.Redis, scripts: Frontier) -> None:  # noqa: F811
    """A request that finished alone forgets its death: the field RedisScheduler._unmark_solo
    removes (sha1 of the payload, in Python) is the one reclaim.lua counted (redis.sha1hex)."""
    enqueue(scripts, "priority", [("http://flaky.test/page", 0)])
    die_alone(redis_client, scripts)
    (lease,) = pop(scripts, "priority", 1)
    redis_client.hdel(KEYS_T.deaths, hashlib.sha1(lease.encode().split(b":", 2)[2]).hexdigest())
    redis_client.zrem(KEYS_T.processing, lease)
    assert redis_client.hlen(KEYS_T.deaths) == 0
