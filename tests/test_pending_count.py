"""The pending counter (SCHEDULER_PENDING_KEY, lua/lib/queue.lua): after every step of a crawl's
life, in every queue mode, `pending` equals the entries really waiting in the queue(s)."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup, flush_crawl
from distributed_crawler.frontier.counts import crawl_counts
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.status import status_now
from tests.frontiers import pop

SPIDER = "pc"
KEYS = SpiderKeys.from_settings(Settings(), SPIDER)
MODES = ["host", "priority", "fifo", "lifo"]


def real_pending(client: redis.Redis) -> int:
    """The entries waiting, counted the slow way: the single queue plus every host queue."""
    kind = client.type(KEYS.requests)
    n = client.zcard(KEYS.requests) if kind == b"zset" else client.llen(KEYS.requests) if kind == b"list" else 0
    hosts = client.scan_iter(match=KEYS.host_queue("*"), count=1000)  # queue zsets and lists (`<queue key>/`)
    return n + sum(client.llen(k) if client.type(k) == b"list" else client.zcard(k) for k in hosts)


def counted(client: redis.Redis) -> int | None:
    return run_sync(crawl_counts(client, KEYS, seeds=False)).pending


def push(client: redis.Redis, mode: str, urls: list[str], dont_filter: bool = False) -> int:
    scripts = frontier_for_mode(client, KEYS, mode)
    entries = []
    for url in urls:
        host = url.split("/")[2]
        entry: tuple = (url, dont_filter, make_member(json.dumps({"url": url, "slot": host}), 0), 0.0)
        if mode == "host":
            entry += (host, 0.0, -1)
        entries.append(entry)
    return sum(run_sync(Enqueuer(scripts, SetDedup(KEYS.dupefilter)).run("push", entries)))


def expire_leases(client: redis.Redis) -> None:
    for member in client.zrange(KEYS.processing, 0, -1):
        client.zadd(KEYS.processing, {member: 1})


@pytest.mark.parametrize("mode", MODES)
def test_pending_is_exact_after_every_step(redis_client: redis.Redis, mode: str) -> None:
    scripts = frontier_for_mode(redis_client, KEYS, mode)
    steps: list[str] = []

    def check(step: str) -> None:
        steps.append(step)
        assert counted(redis_client) == real_pending(redis_client), steps

    check("fresh")
    push(redis_client, mode, [f"http://h{i % 5}.example/{i}" for i in range(30)])
    check("push")
    push(redis_client, mode, [f"http://h{i % 5}.example/{i}" for i in range(10)])  # all seen: nothing pushed
    check("push duplicates")
    leases = pop(scripts, 7, 60)
    assert leases
    check("lease")
    redis_client.zrem(KEYS.processing, leases[0])  # ack
    check("ack")
    assert run_sync(scripts.release(leases[1:3])) == 2
    check("release")
    expire_leases(redis_client)
    requeued, dead = run_sync(scripts.reclaim(5, limit=100, failed_cap=100, node_id="t"))
    assert requeued == 4 and dead == 0
    check("reclaim")
    push(redis_client, mode, ["http://h1.example/0"], dont_filter=True)  # what `dcrawl failed --requeue` pushes
    check("requeue")
    while pop(scripts, 50, 60):
        check("drain")
    assert counted(redis_client) == 0
    push(redis_client, mode, [f"http://x{i}.example/" for i in range(5)])
    run_sync(flush_crawl(frontier_for_mode(redis_client, KEYS, "host"), KEYS.dupefilter))
    check("flush")
    assert counted(redis_client) == 0
    push(redis_client, mode, ["http://after.example/1"])
    check("push after flush")
    assert counted(redis_client) == 1


def test_a_frontier_written_without_the_counter_is_rebuilt_by_the_next_script(redis_client: redis.Redis) -> None:
    push(redis_client, "host", [f"http://h{i % 4}.example/{i}" for i in range(12)])
    redis_client.delete(KEYS.pending)  # as older code left it
    assert counted(redis_client) == 12  # a read counts the entries itself, without writing
    assert not redis_client.exists(KEYS.pending)
    assert run_sync(crawl_counts(redis_client, KEYS)).busy
    pop(frontier_for_mode(redis_client, KEYS, "host"), 2, 60)
    assert redis_client.get(KEYS.pending) == b"10"  # the next script wrote it
    assert counted(redis_client) == real_pending(redis_client) == 10


def test_without_the_counter_more_hosts_than_a_script_recounts_read_unknown(redis_client: redis.Redis) -> None:
    redis_client.zadd(KEYS.ready, {f"h{i}.example": 0 for i in range(10_001)})
    redis_client.delete(KEYS.pending)
    assert counted(redis_client) is None
    assert run_sync(crawl_counts(redis_client, KEYS)).busy


def test_a_garbage_counter_is_rebuilt(redis_client: redis.Redis) -> None:
    push(redis_client, "priority", [f"http://g.example/{i}" for i in range(3)])
    redis_client.set(KEYS.pending, "-7")
    assert counted(redis_client) == 3  # recounted by the read
    push(redis_client, "priority", ["http://g.example/new"])
    assert counted(redis_client) == 4


def test_status_counts_every_host_queue(redis_client: redis.Redis) -> None:
    """The measured bug: 4,000 requests on 400 hosts in host mode were reported as `pending 0`."""
    urls = [f"http://host{i % 400}.example/{i}" for i in range(4000)]
    for i in range(0, len(urls), 500):
        push(redis_client, "host", urls[i : i + 500])
    assert real_pending(redis_client) == 4000
    status = status_now(redis_client, Settings(), SPIDER)
    assert status["pending"] == 4000
