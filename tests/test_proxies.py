"""End to end: worker processes crawl the demo site through local forward proxies and one Redis."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, crawl_preflight, dcrawl, free_port, one_error_line, queued_requests
from tests.proxies.flaky_site import OK_TEXT, FlakySite
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
        # RETRY_TIMES left at 2 while the site's /flaky answers 503 twice: a bad proxy's failure must not spend it
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


ROUNDS = 4  # crawls per test run; each re-arms the race (the bad proxies back in the pool)
FLAKY_PAGES = 12  # new flaky pages per round


def stat(log: str, name: str) -> int:
    """A counter of the end-of-crawl stats dump (0 when absent)."""
    match = re.search(rf"'{re.escape(name)}': (\d+)", log)
    return int(match.group(1)) if match else 0


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_flaky_pages_through_bad_proxies_are_all_stored_round_after_round(
    workers: Workers,
    redis_url: str,
    redis_client: redis.Redis,
    proxies: dict[str, TestProxy],
    tmp_path: Path,
) -> None:
    """Two good proxies, one answering 407, one 403, one closed port; pages answering 503 exactly
    RETRY_TIMES (2) times, then 200. Whether a page's attempts met a bad proxy before the pool evicted
    it was a race (a proxy's failure spent the page's retries: 3 crawls of 4 lost a page). Every round
    puts the bad proxies back (`dcrawl proxies reset`) and seeds new flaky pages first, so they meet
    the bad proxies: every page must be stored, none dead-lettered, in every round."""
    closed = f"http://127.0.0.1:{free_port()}"
    pool = [proxies["plain"].url, proxies["authed"].url, proxies["auth"].url, proxies["ban"].url, closed]
    settings = [
        f"PROXY_LIST={','.join(pool)}",
        "RETRY_TIMES=2",  # Scrapy's default, named: the flaky pages fail exactly this often
        "RETRY_BACKOFF_BASE=0.05",  # lifted from 1 s so the site's retries take a test's time
        "RETRY_BACKOFF_MAX=0.5",
        "CONCURRENT_REQUESTS=8",
        "DOMAIN_MAX_IN_FLIGHT=8",  # lifted from 2 per host: the pages race for the bad proxies together
        "DOWNLOAD_TIMEOUT=20",
    ]
    bad = ("auth", "ban")
    with FlakySite(failures=2, articles=10, per_page=5) as site:
        expected: set[str] = set()
        proxy_retries = 0
        for round_ in range(ROUNDS):
            if round_:
                assert dcrawl(redis_url, "proxies", "reset").returncode == 0
            received = {name: proxies[name].received for name in bad}
            flaky = site.flaky_urls([f"r{round_}p{i:02d}" for i in range(FLAKY_PAGES)])
            nodes = (f"node-{round_}a", f"node-{round_}b")
            for node in nodes:
                workers.start(node, *settings)
            workers.wait_ready(*nodes)
            # every bad proxy pooled again (round 0: loaded by the nodes as they open)
            wait_for(lambda: redis_client.zcard("dc:proxies") == len(pool), "the pool", timeout=30)
            # LPUSH: the flaky pages are taken first, while the bad proxies are still pooled
            redis_client.lpush("news:start_urls", *([site.url + "/"] if round_ == 0 else []), *reversed(flaky))
            codes = workers.wait_all(timeout=150)
            assert all(code == 0 for code in codes.values()), codes
            logs = "".join(workers.log(node) for node in nodes)
            failed = [json.loads(e) for e in redis_client.lrange("{news}:failed", 0, -1)]
            assert failed == [], f"round {round_}: {[(e['url'], e['reason']) for e in failed]}"
            expected |= set(flaky) | (site.expected_urls() if round_ == 0 else set())
            assert stored(tmp_path / "items.db") == expected, f"round {round_}"
            for url in flaky:  # each page: exactly its 2 failures and 1 success reached the site
                assert site.hits(url.removeprefix(site.url)) == 3, url
            # the race was armed: the bad proxies got requests this round
            assert all(proxies[name].received > received[name] for name in bad), f"round {round_}"
            assert stat(logs, "retry/max_reached") == 0 and "Traceback" not in logs
            assert SECRET not in logs and "wrong-pw" not in logs
            proxy_retries += sum(stat(workers.log(node), "proxy/retry_count") for node in nodes)
        with sqlite3.connect(tmp_path / "items.db") as conn:
            texts = [t for (u, t) in conn.execute("SELECT url, text FROM items") if "/flaky/" in u]
        assert len(texts) == ROUNDS * FLAKY_PAGES and all(OK_TEXT in t for t in texts)
        assert proxy_retries >= ROUNDS  # attempts lost to bad proxies, retried without spending RETRY_TIMES


def test_a_malformed_proxy_is_one_clear_line_and_exit_2(redis_url: str) -> None:
    bad = "http://crawler:s3cret-pw@127.0.0.1:notaport"
    proc = crawl_preflight({"REDIS_URL": redis_url}, "-s", f"PROXY_LIST=http://127.0.0.1:3128,{bad}")
    error = one_error_line(proc)
    assert "PROXY_LIST" in error and "http://crawler:***@127.0.0.1:notaport" in error
    assert "s3cret-pw" not in proc.stderr + proc.stdout
    bound = crawl_preflight({"REDIS_URL": redis_url}, "-s", "PROXY_RETRY_TIMES=many")
    assert "PROXY_RETRY_TIMES ('many') must be 'auto' or an integer >= 0" in one_error_line(bound)


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
