"""Delivery guarantee end to end (docs/architecture.md §5): kill -9, slow pages, poison, ack after commit, stop."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest
import redis

from distributed_crawler.dedup.fingerprint import canonicalize_url
from distributed_crawler.storage.backends import open_storage
from tests.conftest import Workers
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST_LEASE = ["SCHEDULER_LEASE_SECONDS=3"]


def rows(db: Path) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=10) as conn:
        try:
            return [r[0] for r in conn.execute("SELECT url FROM items")]
        except sqlite3.OperationalError:
            return []


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def assert_no_traceback(workers: Workers, *nodes: str) -> None:
    for node in nodes:
        assert "Traceback" not in workers.log(node), workers.log(node)[-4000:]


@pytest.mark.timeout(90)
def test_slow_page_is_not_redelivered_while_its_node_lives(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with NewsSite(articles=4, per_page=20, delay=4.0) as site:  # every article takes 4 s > lease 2 s
        redis_client.lpush("news:start_urls", site.url + "/")
        for node in ("a", "b"):
            workers.start(node, "SCHEDULER_LEASE_SECONDS=2", "MAX_IDLE_TIME_BEFORE_CLOSE=2")
        assert workers.wait_all(timeout=70) == {"a": 0, "b": 0}
        article_hits = [site.hits(f"/article/{i}") for i in range(1, 5)]
        stored = rows(tmp_path / "items.db")
        expected = site.expected_urls()
    assert article_hits == [1, 1, 1, 1], "a slow page was fetched twice: its lease was not renewed"
    assert set(stored) == expected
    for node in ("a", "b"):
        assert "Reclaimed" not in workers.log(node)


@pytest.mark.timeout(150)
def test_poison_request_is_dead_lettered_and_the_crawl_goes_on(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings = [
        "SPIDER_MODULES=demo.spiders,tests.spiders",
        "SCHEDULER_LEASE_SECONDS=2",  # SCHEDULER_MAX_DELIVERIES stays 5: killed_worker ends it before
        "MAX_IDLE_TIME_BEFORE_CLOSE=3",
    ]
    with NewsSite(articles=40, per_page=20, delay=0.0) as site:
        redis_client.lpush("poison:start_urls", site.url + "/")
        deadline = time.monotonic() + 120
        runs = 0
        while True:  # a supervisor: restart the worker until it exits by itself
            runs += 1
            proc = workers.start("w", *settings, spider="poison")
            code = proc.wait(max(1, deadline - time.monotonic()))
            if code == 0:
                break
            assert code == -signal.SIGKILL and time.monotonic() < deadline and runs <= 6
        stored = set(rows(tmp_path / "items.db"))
        expected = site.expected_urls()
        poison = site.url + "/article/7"
        hits = site.hits("/article/7")
    failed = [json.loads(e) for e in redis_client.lrange("{poison}:failed", 0, -1)]
    assert [canonicalize_url(f["url"]) for f in failed] == [poison]
    # killed its node once beside other requests, then twice alone (quarantine): killed_worker
    assert failed[0]["attempts"] == 3 and failed[0]["reason"] == "killed_worker"
    assert hits == 3
    assert stored == expected - {poison}


@pytest.mark.timeout(120)
def test_kill_between_callback_and_commit_loses_nothing(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    open_storage(f"sqlite:///{db}").close()  # create the table, then lock the database:
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # commits now wait: callbacks run, nothing is stored
    try:
        with NewsSite(articles=60, per_page=20, delay=0.0) as site:
            redis_client.lpush("news:start_urls", site.url + "/")
            workers.start("blocked", *FAST_LEASE)
            wait_until(lambda: site.hits("/article") >= 30, 30, "30 articles fetched")
            workers.kill9("blocked")
            lock.execute("ROLLBACK")
            assert rows(db) == []
            assert redis_client.zcard("{news}:processing") > 0, "leases must survive until the commit"
            workers.start("finisher", *FAST_LEASE, "MAX_IDLE_TIME_BEFORE_CLOSE=4")
            assert workers.procs["finisher"].wait(60) == 0
            stored = rows(db)
            expected = site.expected_urls()
    finally:
        lock.close()
    assert sorted(stored) == sorted(expected)


@pytest.mark.timeout(120)
def test_sigterm_finishes_in_flight_work_and_leaves_no_lease(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    with NewsSite(articles=200, per_page=20, delay=0.05) as site:
        redis_client.lpush("news:start_urls", site.url + "/")
        proc = workers.start("graceful", "CONCURRENT_REQUESTS=8")
        wait_until(lambda: site.hits("/article") >= 20, 30, "20 articles fetched")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert redis_client.zcard("{news}:processing") == 0, "graceful stop left leases"
        assert redis_client.zcard("{news}:hosts") > 0, "the rest of the crawl is still queued"  # host mode
        first = set(rows(db))
        assert first
        # A second SIGTERM stops at once but also gives the leases back immediately.
        proc = workers.start("forced", "CONCURRENT_REQUESTS=8")
        wait_until(lambda: len(rows(db)) > len(first) + 10, 30, "progress after restart")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        assert redis_client.zcard("{news}:processing") == 0, "forced stop left leases"
        proc = workers.start("finisher", "MAX_IDLE_TIME_BEFORE_CLOSE=2")
        assert proc.wait(60) == 0
        stored = rows(db)
        expected = site.expected_urls()
    assert sorted(stored) == sorted(expected)
    assert_no_traceback(workers, "graceful", "finisher")
