"""End to end: worker processes crawl the demo site through local forward proxies and one Redis."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, crawl_preflight, dcrawl, free_port, one_error_line, queued_requests
from tests.proxies.server import TestProxy
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e]

SECRET = "pr0xy-s3cret"


def stored(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {url for (url,) in conn.execute("SELECT url FROM items")}


def wait_for(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def proxies() -> Iterator[dict[str, TestProxy]]:
    started = {
        "plain": TestProxy("forward").start(),
        "authed": TestProxy("forward", credentials=("crawler", SECRET)).start(),
        "auth": TestProxy("auth", credentials=("crawler", "wrong-pw")).start(),
        "ban": TestProxy("ban").start(),
    }
    yield started
    for proxy in started.values():
        proxy.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_workers_crawl_through_the_pool_and_evict_the_bad_proxies(
    site: NewsSite,
    workers: Workers,
    redis_url: str,
    redis_client: redis.Redis,
    proxies: dict[str, TestProxy],
    tmp_path: Path,
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    good = {proxies["plain"].url, proxies["authed"].url}
    bad = {closed: "connection refused", proxies["auth"].url: "status 407", proxies["ban"].url: "status 403"}
    settings = [
        f"PROXY_LIST={','.join(sorted(good | set(bad)))}",
        "PROXY_MIN_SCORE=5",  # 10 -> 7 -> 4: evicted at the second failure
        "PROXY_REVIVE_SECONDS=0",
        "RETRY_TIMES=8",
        "RETRY_BACKOFF_BASE=0.05",
        "RETRY_BACKOFF_MAX=0.5",
        "CONCURRENT_REQUESTS=4",
        "DOWNLOAD_TIMEOUT=20",
    ]

    def crawl(nodes: tuple[str, str]) -> None:
        for node in nodes:
            workers.start(node, *settings)
        workers.wait_ready(*nodes)
        redis_client.lpush("news:start_urls", site.url + "/")
        codes = workers.wait_all(timeout=150)
        assert all(code == 0 for code in codes.values()), codes

    crawl(("node-a", "node-b"))
    assert stored(tmp_path / "items.db") == site.expected_urls()
    assert redis_client.llen("{news}:failed") == 0, redis_client.lrange("{news}:failed", 0, -1)
    # The bad three are dead, each with its own reason; the good two are still in the pool.
    dead = {k.decode(): json.loads(v) for k, v in redis_client.hgetall("dc:proxies:dead").items()}
    assert set(dead) == set(bad)
    for proxy, reason in bad.items():
        assert dead[proxy]["error"].startswith(reason), dead[proxy]
    assert {m.decode() for m in redis_client.zrange("dc:proxies", 0, -1)} == good
    # The site saw every request through a proxy (the bad ones forward nothing): none went direct.
    forwarded = proxies["plain"].forwarded + proxies["authed"].forwarded
    assert site.hits() == forwarded and proxies["plain"].forwarded and proxies["authed"].forwarded
    assert proxies["auth"].forwarded == proxies["ban"].forwarded == 0
    logs = workers.log("node-a") + workers.log("node-b")
    assert "evicted to dc:proxies:dead" in logs and "'proxy/used'" in logs and "'proxy/evicted'" in logs
    assert "Traceback" not in logs and SECRET not in logs and "wrong-pw" not in logs
    assert "http://crawler:***@127.0.0.1" in logs  # how a proxy with credentials is named

    # After eviction: a second crawl of the whole site goes through the healthy two only.
    received = {name: p.received for name, p in proxies.items()}
    hits = site.hits()
    redis_client.delete("{news}:dupefilter")
    crawl(("node-c", "node-d"))
    assert stored(tmp_path / "items.db") == site.expected_urls()
    assert {name: p.received for name, p in proxies.items() if name in ("auth", "ban")} == {
        "auth": received["auth"],
        "ban": received["ban"],
    }
    assert site.hits() - hits == proxies["plain"].forwarded + proxies["authed"].forwarded - forwarded > 0
    listed = json.loads(dcrawl(redis_url, "proxies", "list", "--json").stdout)
    assert (listed["healthy"], listed["dead"]) == (2, 3) and SECRET not in json.dumps(listed)


def test_a_malformed_proxy_is_one_clear_line_and_exit_2(redis_url: str) -> None:
    bad = "http://crawler:s3cret-pw@127.0.0.1:notaport"
    proc = crawl_preflight({"REDIS_URL": redis_url}, "-s", f"PROXY_LIST=http://127.0.0.1:3128,{bad}")
    error = one_error_line(proc)
    assert "PROXY_LIST" in error and "http://crawler:***@127.0.0.1:notaport" in error
    assert "s3cret-pw" not in proc.stderr + proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_empty_pool_holds_requests_until_a_proxy_is_added(
    site: NewsSite,
    workers: Workers,
    redis_url: str,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    workers.start("node-a", "PROXY_ENABLED=True", "CONCURRENT_REQUESTS=4")
    workers.wait_ready("node-a")
    redis_client.lpush("news:start_urls", site.url + "/")
    wait_for(lambda: "Proxy pool dc:proxies is empty: requests are held" in workers.log("node-a"), "the warning")
    wait_for(lambda: redis_client.llen("news:start_urls") == 0, "the seed to be taken")
    assert site.hits() == 0  # held: nothing went direct
    with TestProxy("forward") as proxy:
        assert dcrawl(redis_url, "proxies", "add", proxy.url).returncode == 0
        assert workers.wait_all(timeout=90) == {"node-a": 0}
        assert site.hits() == proxy.forwarded > 0
    assert stored(tmp_path / "items.db") == site.expected_urls()
    log = workers.log("node-a")
    assert log.count("is empty: requests are held") == 1 and "has proxies again" in log


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_empty_pool_with_direct_policy_goes_without_a_proxy(
    site: NewsSite,
    workers: Workers,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    workers.start("node-a", "PROXY_ENABLED=True", "PROXY_EMPTY_POLICY=direct")
    workers.wait_ready("node-a")
    redis_client.lpush("news:start_urls", site.url + "/")
    assert workers.wait_all(timeout=90) == {"node-a": 0}
    assert stored(tmp_path / "items.db") == site.expected_urls()
    log = workers.log("node-a")
    assert log.count("is empty: requests go without a proxy") == 1 and "'proxy/direct'" in log


@pytest.mark.timeout(120)
def test_a_stopping_node_hands_held_requests_back_to_the_queue(
    site: NewsSite,
    workers: Workers,
    redis_client: redis.Redis,
) -> None:
    import os
    import signal

    proc = workers.start("node-a", "PROXY_ENABLED=True", "ROBOTSTXT_OBEY=False")
    workers.wait_ready("node-a")
    redis_client.lpush("news:start_urls", site.url + "/")
    wait_for(lambda: "is empty: requests are held" in workers.log("node-a"), "the warning")
    wait_for(lambda: redis_client.zcard("{news}:processing") == 1, "the seed's lease")
    os.killpg(proc.pid, signal.SIGTERM)  # one signal: a graceful stop
    assert proc.wait(60) == 0
    assert site.hits() == 0
    assert redis_client.zcard("{news}:processing") == 0, "the held request kept its lease"
    assert queued_requests(redis_client) == 1, "the held request is not back in the queue"
    log = workers.log("node-a")
    assert "'proxy/handed_back': 1" in log and "Traceback" not in log
