"""Cluster-wide retries: backoff math, the delayed hand-over in Lua, the middleware, and real crawls."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from email.utils import formatdate
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.downloadermiddlewares.retry import (
    RetryConfig,
    backoff_delay,
    parse_retry_after,
    retry_delay,
)
from distributed_crawler.frontier.codec import payload_url, read_payload
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.conftest import ROOT, Workers, free_port
from tests.frontiers import pop as lease_flat
from tests.site.server import FLAKY_FAILURES, FLAKY_OK_TEXT, NewsSite

KEYS = SpiderKeys.from_settings(Settings(), "news")


# -- backoff math ---------------------------------------------------------------------------
def test_backoff_doubles_per_retry_with_jitter_in_the_upper_half_and_caps() -> None:
    assert [backoff_delay(n, 1.0, 60.0, lambda: 0.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert [backoff_delay(n, 1.0, 60.0, lambda: 1.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff_delay(3, 1.0, 60.0, lambda: 0.5) == 3.0
    assert backoff_delay(20, 1.0, 60.0, lambda: 1.0) == 60.0  # capped, and 2^19 does not overflow it
    assert backoff_delay(20, 1.0, 60.0, lambda: 0.0) == 30.0


def test_retry_after_seconds_and_http_dates() -> None:
    assert parse_retry_after(b"120") == 120.0
    assert parse_retry_after(None) is None
    assert parse_retry_after(b"soon") is None
    site_now = 1_700_000_000.0
    later = formatdate(site_now + 90, usegmt=True)
    # measured against the response's Date (the site's clock), not this node's
    assert parse_retry_after(later.encode(), formatdate(site_now, usegmt=True).encode(), now=0) == 90.0
    assert parse_retry_after(later, None, now=site_now + 30) == 60.0
    assert parse_retry_after(formatdate(site_now - 50, usegmt=True), None, now=site_now) == 0.0


def test_retry_delay_honours_retry_after_up_to_the_cap() -> None:
    config = RetryConfig(backoff_base=1.0, backoff_max=60.0)
    assert retry_delay(1, config, None, lambda: 1.0) == 1.0
    assert retry_delay(1, config, 30.0, lambda: 1.0) == 30.0  # the site asks for longer
    assert retry_delay(4, config, 2.0, lambda: 1.0) == 8.0  # our backoff is longer than the site's
    assert retry_delay(1, config, 1000.0, lambda: 1.0) == 60.0  # capped by RETRY_BACKOFF_MAX


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"RETRY_BACKOFF_BASE": 0}, "RETRY_BACKOFF_BASE (0.0) must be > 0 seconds"),
        (
            {"RETRY_BACKOFF_BASE": 5, "RETRY_BACKOFF_MAX": 2},
            "RETRY_BACKOFF_MAX (2.0) must be >= RETRY_BACKOFF_BASE (5.0)",
        ),
        ({"RETRY_TIMES": -1}, "RETRY_TIMES (-1) must be >= 0"),
    ],
)
def test_bad_retry_settings_are_rejected_with_the_value(settings: dict, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        RetryConfig.from_settings(Settings(settings))
    assert str(exc.value) == message


# -- the delayed hand-over, in Lua ----------------------------------------------------------
def push(client: redis.Redis, qtype: str, url: str, delay: float = 0, handover: list[bytes] = ()) -> list[int]:
    enqueuer = Enqueuer(frontier_for_mode(client, KEYS, qtype), SetDedup(KEYS.dupefilter))
    member = make_member(json.dumps({"url": url}), 0)
    return run_sync(enqueuer.run("push", [(url, True, member, delay)], list(handover)))


def pop(client: redis.Redis, qtype: str, n: int = 10) -> list[bytes]:
    return lease_flat(frontier_for_mode(client, KEYS, qtype), n, 60, due_batch=100)


@pytest.mark.parametrize("qtype", ["priority", "fifo", "lifo"])
def test_retry_successor_waits_in_delayed_and_takes_over_the_lease(redis_client: redis.Redis, qtype: str) -> None:
    push(redis_client, qtype, "http://e.com/a")
    (lease,) = pop(redis_client, qtype)
    assert push(redis_client, qtype, "http://e.com/a", delay=30, handover=[lease]) == [1]
    # one atomic step: the failed attempt's lease is gone, the successor waits in delayed
    assert redis_client.zcard(KEYS.processing) == 0 and redis_client.exists(KEYS.requests) == 0
    ((member, due),) = redis_client.zrange(KEYS.delayed, 0, -1, withscores=True)
    now = float(redis_client.time()[0])
    assert now + 25 <= due <= now + 31  # due on Redis server time
    assert pop(redis_client, qtype) == []  # not due yet
    redis_client.zadd(KEYS.delayed, {member: now - 1})  # make it due instead of sleeping
    (again,) = pop(redis_client, qtype)
    assert redis_client.zcard(KEYS.delayed) == 0
    # a retry successor starts its own delivery count: not a redelivery, never quarantined
    assert split_member(again).deliveries == 1
    assert payload_url(split_member(again).payload) == "http://e.com/a"


def test_due_retries_go_behind_waiting_requests_of_their_priority(redis_client: redis.Redis) -> None:
    push(redis_client, "priority", "http://e.com/retry", delay=5)
    redis_client.zadd(KEYS.delayed, {redis_client.zrange(KEYS.delayed, 0, 0)[0]: 1})
    push(redis_client, "priority", "http://e.com/waiting")
    urls = [payload_url(split_member(m).payload) for m in pop(redis_client, "priority")]
    assert urls == ["http://e.com/waiting", "http://e.com/retry"]


def test_delayed_push_does_not_ring_the_doorbell(redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(KEYS.doorbell)
    pubsub.get_message(timeout=1)
    enqueuer = Enqueuer(frontier_for_mode(redis_client, KEYS, "priority"), SetDedup(KEYS.dupefilter), KEYS.doorbell)
    run_sync(enqueuer.run("push", [("", True, make_member("{}", 0), 10.0)]))
    assert pubsub.get_message(timeout=0.3) is None
    run_sync(enqueuer.run("push", [("", True, make_member("{}", 0))]))
    assert pubsub.get_message(timeout=2) is not None
    pubsub.close()


# -- real crawls ------------------------------------------------------------------------------
def stored(db: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return {url: (text, node) for url, text, node in conn.execute("SELECT url, text, node FROM items")}


FAST = ("RETRY_BACKOFF_BASE=0.2", "RETRY_BACKOFF_MAX=2")


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_flaky_page_succeeds_on_a_later_attempt(workers: Workers, redis_client: redis.Redis, tmp_path: Path) -> None:
    with NewsSite(articles=4, per_page=2) as site:
        workers.start("node-a", *FAST)
        workers.start("node-b", *FAST)
        workers.wait_ready("node-a", "node-b")
        redis_client.lpush("news:start_urls", site.url + "/flaky")
        assert workers.wait_all(timeout=90) == {"node-a": 0, "node-b": 0}
        rows = stored(tmp_path / "items.db")
        assert FLAKY_OK_TEXT in rows[site.url + "/flaky"][0]
        assert set(rows) == site.expected_urls()
        assert site.hits("/flaky") == FLAKY_FAILURES + 1  # each failure retried once, no more
    assert redis_client.llen(KEYS.failed) == 0
    assert redis_client.zcard(KEYS.delayed) == 0 and redis_client.zcard(KEYS.processing) == 0
    logs = workers.log("node-a") + workers.log("node-b")
    assert logs.count("'retry/delayed': ") >= 1 and "Traceback" not in logs
    assert "scheduler/quarantined" not in logs  # a retry is not a redelivery


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_page_that_always_fails_is_dead_lettered_then_requeued(
    workers: Workers, redis_url: str, redis_client: redis.Redis
) -> None:
    with NewsSite(articles=0) as site:
        workers.start("node-a", "RETRY_TIMES=3", *FAST)
        workers.start("node-b", "RETRY_TIMES=3", *FAST)
        workers.wait_ready("node-a", "node-b")
        refused = f"http://127.0.0.1:{free_port()}/refused"  # nothing listens there
        redis_client.lpush("news:start_urls", site.url + "/down", site.url + "/missing", refused)
        assert workers.wait_all(timeout=90) == {"node-a": 0, "node-b": 0}
        assert site.hits("/down") == 4  # RETRY_TIMES + 1, counted by the site
        assert site.hits("/missing") == 1  # a 404 is the site's answer: not retried, not dead-lettered
        failed = {e["url"]: e for e in map(json.loads, redis_client.lrange(KEYS.failed, 0, -1))}
        assert set(failed) == {site.url + "/down", refused}
        network = failed[refused]
        assert network["status"] is None and network["attempts"] == 4 and "ConnectionRefused" in network["reason"]
        entry = failed[site.url + "/down"]
        assert entry["status"] == 503
        assert entry["reason"] == "503 Service Unavailable" and entry["attempts"] == 4
        assert entry["node"] in {"node-a", "node-b"} and abs(entry["time"] - time.time()) < 120
        assert entry["proxy"] is None and entry["source"] == "retry"
        assert redis_client.zcard(KEYS.delayed) == 0 and redis_client.zcard(KEYS.processing) == 0

        requeue = subprocess.run(
            [sys.executable, "-m", "distributed_crawler", "failed", "news", "--requeue", "--redis-url", redis_url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert requeue.returncode == 0 and "requeued 2" in requeue.stdout, requeue.stdout + requeue.stderr
        assert redis_client.llen(KEYS.failed) == 0
        # host mode (the default): one queue per host
        members = [  # each host's queue zset and its list (`<queue key>/`)
            m
            for key in redis_client.scan_iter(KEYS.host_queue("*"))
            for m in (
                redis_client.lrange(key, 0, -1)
                if redis_client.type(key) == b"list"
                else redis_client.zrange(key, 0, -1)
            )
        ]
        assert len(members) == 2 and {split_member(m).deliveries for m in members} == {0}
        assert all("retry_times" not in read_payload(split_member(m).payload).get("meta", {}) for m in members)

        workers.start("node-c", "RETRY_TIMES=3", *FAST)
        assert workers.wait_all(timeout=90)["node-c"] == 0
        assert site.hits("/down") == 8  # a fresh set of attempts after the requeue
        again = {e["url"]: e for e in map(json.loads, redis_client.lrange(KEYS.failed, 0, -1))}
        assert again[site.url + "/down"]["attempts"] == 4 and again[site.url + "/down"]["node"] == "node-c"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_retry_after_sets_the_due_time_and_the_node_waits_for_it(workers: Workers, redis_client: redis.Redis) -> None:
    with NewsSite(articles=0) as site:
        # Per-request due times: the single-queue mode. (In host mode, the default, the 429 blocks
        # the whole host and the other request waits with it: tests/test_politeness_inputs.py.)
        proc = workers.start(
            "node-a", "RETRY_BACKOFF_BASE=0.2", "RETRY_BACKOFF_MAX=120", "SCHEDULER_QUEUE_CLASS=priority"
        )
        workers.wait_ready("node-a")
        redis_client.lpush(
            "news:start_urls", site.url + "/busy?after=30", site.url + "/busy?after=1000&date=1&status=429"
        )
        deadline = time.monotonic() + 60
        # (the first attempts may wait in delayed a moment for robots.txt: wait for the site's answers)
        while (redis_client.zcard(KEYS.delayed) < 2 or site.hits("/busy") < 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        now = float(redis_client.time()[0])
        due = {
            payload_url(split_member(m).payload): s
            for m, s in redis_client.zrange(KEYS.delayed, 0, -1, withscores=True)
        }
        assert len(due) == 2, workers.log("node-a")[-3000:]
        assert now + 20 <= due[site.url + "/busy?after=30"] <= now + 31  # Retry-After: 30 (seconds)
        capped = due[site.url + "/busy?after=1000&date=1&status=429"]
        assert now + 100 <= capped <= now + 121  # an HTTP date 1000 s ahead, capped by RETRY_BACKOFF_MAX
        assert redis_client.zcard(KEYS.processing) == 0  # the leases were handed over
        # MAX_IDLE_TIME_BEFORE_CLOSE is 2 s: the cluster is not idle while retries wait
        time.sleep(5)
        assert proc.poll() is None, workers.log("node-a")[-3000:]
        assert site.hits("/busy") == 2
