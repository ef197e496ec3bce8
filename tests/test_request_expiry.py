"""Expiry (REQUEST_TTL, meta expires_at): an expired request is dropped at lease by Redis server time,
never leased, counted per host; members written before expiry existed never expire."""

from __future__ import annotations

import json
import time

import pytest
import redis
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.scheduler import RedisScheduler, SchedulerConfig
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.codec import RequestCodec, payload_url
from distributed_crawler.frontier.counts import crawl_counts
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import Envelope, make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.hosts import read_refusals
from distributed_crawler.monitoring.status import Skips
from tests.conftest import Workers
from tests.frontiers import pop
from tests.scheduler_parts import parts_without_redis
from tests.site.server import NewsSite

KEYS = SpiderKeys.from_settings(Settings(), "exp")


def server_now(client: redis.Redis) -> int:
    return int(client.time()[0])


def push(client: redis.Redis, mode: str, members: list[tuple[str, str]]) -> None:
    """(url, member) pairs, pushed as the scheduler does."""
    scripts = frontier_for_mode(client, KEYS, mode)
    entries = []
    for url, member in members:
        entry: tuple = (url, False, member, 0.0)
        if mode == "host":
            entry += (url.split("/")[2], 0.0, -1)
        entries.append(entry)
    run_sync(Enqueuer(scripts, SetDedup(KEYS.dupefilter)).run("push", entries))


def payload(url: str) -> str:
    return json.dumps({"url": url, "slot": url.split("/")[2]})


@pytest.mark.parametrize("mode", ["host", "priority", "fifo"])
def test_expired_requests_are_dropped_at_lease_and_counted_per_host(redis_client: redis.Redis, mode: str) -> None:
    now = server_now(redis_client)
    push(
        redis_client,
        mode,
        [
            ("http://old.example/gone", make_member(payload("http://old.example/gone"), 0, expires_at=now - 5)),
            ("http://old.example/fresh", make_member(payload("http://old.example/fresh"), 0, expires_at=now + 3600)),
            ("http://legacy.example/1", f"0:0:{payload('http://legacy.example/1')}"),  # written by older code
        ],
    )
    leases = pop(frontier_for_mode(redis_client, KEYS, mode), 10, 60)
    leased = sorted(payload_url(split_member(lease).payload) for lease in leases if lease)
    assert leased == ["http://legacy.example/1", "http://old.example/fresh"]
    assert leases.count(b"") == 1  # what the node counts as scheduler/expired
    assert redis_client.zcard(KEYS.processing) == 2
    counts = run_sync(crawl_counts(redis_client, KEYS, seeds=False))
    assert counts.pending == 0 and counts.leased == 2  # the expired one left the queue, counted
    assert run_sync(read_refusals(redis_client, KEYS, Skips())) == {"old.example": {"expired": 1}}


def test_host_pop_reports_expired_per_host(redis_client: redis.Redis) -> None:
    now = server_now(redis_client)
    urls = [f"http://a.example/{i}" for i in range(3)]
    push(redis_client, "host", [(u, make_member(payload(u), 0, expires_at=now - 1)) for u in urls])
    popped = run_sync(frontier_for_mode(redis_client, KEYS, "host").lease(10, 60))
    assert popped.leases == [] and popped.expired == 3 and popped.broken == []
    assert redis_client.hget(KEYS.refused, "expired a.example") == b"3"


def test_the_expiry_survives_reclaim_and_release(redis_client: redis.Redis) -> None:
    scripts = frontier_for_mode(redis_client, KEYS, "priority")
    at = server_now(redis_client) + 3600
    push(
        redis_client, "priority", [("http://r.example/1", make_member(payload("http://r.example/1"), 0, expires_at=at))]
    )
    (lease,) = pop(scripts, 1, 60)
    assert run_sync(scripts.release([lease])) == 1
    (lease,) = pop(scripts, 1, 60)
    redis_client.zadd(KEYS.processing, {lease: 1})  # expired lease
    assert run_sync(scripts.reclaim(5, limit=10, failed_cap=10, node_id="t")) == (1, 0)
    (member,) = redis_client.zrange(KEYS.requests, 0, -1)
    assert split_member(member).expires_at == at


def test_envelope_reads_old_and_new_members() -> None:
    old = split_member('2:5:{"url":"http://x/"}')
    assert old == (2, 5, '{"url":"http://x/"}', 0)
    assert split_member(make_member('{"url":"http://x/"}', 5, 2, expires_at=1700000000)) == (
        2,
        5,
        '{"url":"http://x/"}',
        1700000000,
    )
    assert make_member("{}", 0, expires_at=0) == "{}"  # TTL 0, 0 deliveries, priority 0: no envelope at all
    assert make_member("{}", 0, deliveries=1) == "1:0:{}"
    assert split_member("https://x/ {}") == (0, 0, "https://x/ {}", 0)
    for garbage in ("", "12", "1:x:{}", "no envelope"):
        with pytest.raises(ValueError):
            split_member(garbage)


class _Spider(Spider):
    name = "exp"

    def parse(self, response: object) -> None:
        return None


def scheduler(**settings: object) -> RedisScheduler:
    crawler = get_crawler(
        _Spider, settings_dict={"ADDONS": {"distributed_crawler.Addon": 0}, "NODE_ID": "n1", **settings}
    )
    crawler.spider = _Spider.from_crawler(crawler)
    node = RedisScheduler.from_crawler(crawler)
    parts_without_redis(node)  # what open() builds; nothing here talks to Redis
    return node


def enqueued(node: RedisScheduler, request: Request) -> Envelope:
    assert node.enqueue_request(request)
    return split_member(node.parts.outbox.entries[-1][1].member)


def test_request_ttl_and_meta_expires_at_in_the_member() -> None:
    assert enqueued(scheduler(), Request("http://e.example/0")).expires_at == 0  # TTL 0 = never
    node = scheduler(REQUEST_TTL=3600)
    request = Request("http://e.example/1")
    before = int(time.time())
    at = enqueued(node, request).expires_at
    assert before + 3600 <= at <= int(time.time()) + 3600
    assert request.meta["expires_at"] == at  # kept in meta: a retry keeps its first expiry
    given = Request("http://e.example/2", meta={"expires_at": 1_800_000_000.7})
    assert enqueued(node, given).expires_at == 1_800_000_000  # meta wins over REQUEST_TTL
    assert enqueued(scheduler(), Request("http://e.example/3", meta={"expires_at": 1_800_000_000})).expires_at
    bad = Request("http://e.example/4", meta={"expires_at": "soon"})
    assert enqueued(scheduler(), bad).expires_at == 0  # not a time: ignored


def test_a_negative_request_ttl_fails_at_start() -> None:
    with pytest.raises(ValueError, match=r"REQUEST_TTL \(-5\) must be"):
        SchedulerConfig.from_settings(Settings({"REQUEST_TTL": -5}))


@pytest.mark.e2e
@pytest.mark.slow
def test_a_worker_never_fetches_an_expired_request(workers: Workers, redis_client: redis.Redis) -> None:
    """A frontier holding expired and live requests (host mode, the default; at DEPTH_LIMIT, so no link
    between articles is followed): a real worker fetches only the live ones; the expired ones show as
    scheduler/expired and per host in the refused hash."""
    with NewsSite(articles=6) as site:
        keys = SpiderKeys.from_settings(Settings(), "news")
        codec = RequestCodec(None)
        now = server_now(redis_client)
        host = site.url.split("/")[2]
        entries = []
        for i in range(1, 7):
            url = f"{site.url}/article/{i}"
            at = now - 60 if i <= 3 else now + 3600
            member = make_member(
                codec.encode(Request(url, dont_filter=True, meta={"depth": 1}), slot=host), 0, expires_at=at
            )
            entries.append(("", True, member, 0.0, host, 0.0, -1))  # no fingerprint: the filter stays untouched
        scripts = frontier_for_mode(redis_client, keys, "host")
        run_sync(Enqueuer(scripts, SetDedup(keys.dupefilter)).run("push", entries))
        assert run_sync(crawl_counts(redis_client, keys)).pending == 6
        workers.start("w1", "DEPTH_LIMIT=1", "MAX_IDLE_TIME_BEFORE_CLOSE=2")
        assert workers.wait_all(timeout=90) == {"w1": 0}
        fetched = {i: site.hits(f"/article/{i}") for i in range(1, 7)}
    assert fetched[1] == fetched[2] == fetched[3] == 0, fetched
    assert all(fetched[i] >= 1 for i in (4, 5, 6)), fetched
    assert "'scheduler/expired': 3" in workers.log("w1")
    assert redis_client.hget(keys.refused, f"expired {host}") == b"3"
    assert run_sync(crawl_counts(redis_client, keys)).pending == 0
