"""What `len(scheduler)` and has_pending_requests see (frontier/counts.py crawl_counts): the shared
queue in every queue mode, as scrapy-redis's `len(queue)` is the Redis queue, not a node's buffer."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.counts import crawl_counts
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.frontiers import pop

KEYS = SpiderKeys.from_settings(Settings(), "sz")


def _push(client: redis.Redis, mode: str, urls: list[str], delay: float = 0.0) -> None:
    scripts = frontier_for_mode(client, KEYS, mode)
    entries = []
    for url in urls:
        host = url.split("/")[2]
        body = {"url": url, "slot": host} if mode == "host" else {"url": url}
        entry: tuple = (url, False, make_member(json.dumps(body), 0), delay)
        if mode == "host":
            entry += (host, 0.0, -1)
        entries.append(entry)
    run_sync(Enqueuer(scripts, SetDedup(KEYS.dupefilter)).run("push", entries))


@pytest.mark.parametrize("mode", ["host", "priority", "fifo"])
def test_counts_queued_delayed_and_leased_in_every_mode(redis_client: redis.Redis, mode: str) -> None:
    assert not run_sync(crawl_counts(redis_client, KEYS, seeds=False)).frontier_busy
    _push(redis_client, mode, [f"http://h{i % 3}.example/{i}" for i in range(7)])
    _push(redis_client, mode, ["http://late.example/1"], delay=60)
    size = run_sync(crawl_counts(redis_client, KEYS, seeds=False))
    assert (size.pending, size.delayed, size.leased, size.scheduled) == (7, 1, 0, 8)
    assert size.frontier_busy
    pop(frontier_for_mode(redis_client, KEYS, mode), 2, 60)
    size = run_sync(crawl_counts(redis_client, KEYS, seeds=False))
    assert (size.pending, size.leased, size.scheduled) == (5, 2, 6)


def test_a_leased_request_alone_is_pending_work(redis_client: redis.Redis) -> None:
    """A node still crawling may push children: the others must not close meanwhile."""
    _push(redis_client, "priority", ["http://e.example/1"])
    pop(frontier_for_mode(redis_client, KEYS, "priority"), 1, 60)
    size = run_sync(crawl_counts(redis_client, KEYS, seeds=False))
    assert size.scheduled == 0 and size.frontier_busy


def test_keys_of_another_type_count_nothing(redis_client: redis.Redis) -> None:
    redis_client.set(KEYS.requests, "garbage")
    redis_client.hset(KEYS.ready, "a", "b")
    assert run_sync(crawl_counts(redis_client, KEYS, seeds=False)).scheduled == 0
