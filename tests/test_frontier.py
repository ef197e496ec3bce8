"""The per-host frontier end to end: real workers, real redis-server, sites on their own
loopback addresses (127.0.0.x all reach a server bound there, so each site is a host of its own)."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@contextmanager
def sites(*specs: tuple[str, int], delay: float = 0.0) -> Iterator[list[NewsSite]]:
    """NewsSites bound to the given loopback addresses: (address, articles); `delay` s per article."""
    with ExitStack() as stack:
        out = []
        for address, articles in specs:
            site = NewsSite(articles=articles, per_page=10, delay=delay)
            site.bind_host = address  # type: ignore[attr-defined]
            out.append(stack.enter_context(site))
        yield out


def stored(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [url for (url,) in conn.execute("SELECT url FROM items")]


def max_in_any_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + window:
            j += 1
        best = max(best, j - i)
    return best


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_a_slow_host_never_starves_a_fast_one(workers: Workers, redis_client: redis.Redis, tmp_path: Path) -> None:
    """Slow site at 2 req/s with its links queued first, fast site beside it, one worker with 8 slots:
    the fast site is fully stored long before the slow one is done, and the slow one keeps its rate
    (one shared queue gave the fast site 0 pages in 90 s: every slot slept on the slow site)."""
    with sites(("127.0.0.2", 25), ("127.0.0.3", 60)) as (slow, fast):
        workers.start(
            "node-a",
            "CONCURRENT_REQUESTS=8",
            'DOMAIN_RATE_LIMITS={"127.0.0.2": 2}',
        )
        workers.wait_ready("node-a")
        redis_client.lpush("news:start_urls", slow.url + "/")
        slow_queue = "{news}:q:127.0.0.2"  # the DOMAIN_RATE_LIMITS domain is the slot
        # its queue zset and its list (`<queue key>/`)
        wait_for(
            lambda: redis_client.zcard(slow_queue) + redis_client.llen(slow_queue + "/") >= 5,
            30,
            "the slow site's links to be queued",
        )
        redis_client.lpush("news:start_urls", fast.url + "/")
        fast_expected = fast.expected_urls()
        wait_for(lambda: fast_expected <= set(stored(tmp_path / "items.db")), 40, "the fast site to be fully stored")
        fast_done = time.monotonic()
        slow_pending = redis_client.zcard(slow_queue) + redis_client.llen(slow_queue + "/")
        codes = workers.wait_all(timeout=60)
        slow_log = [t for t, path in slow.request_log() if not path.startswith("/robots.txt")]
    assert codes == {"node-a": 0}
    assert slow_pending >= 5, "the fast site finished while the slow one still had work queued"
    assert max(slow_log) > fast_done - 1e-3 or slow_pending > 0
    urls = stored(tmp_path / "items.db")
    assert len(urls) == len(set(urls)) and set(urls) == fast_expected | slow.expected_urls()
    for window in (1.0, 2.0, 5.0):
        assert max_in_any_window(slow_log, window) <= math.floor(window * 2) + 2, f"slow site over 2/s in {window}s"


@pytest.mark.timeout(120)
def test_three_nodes_keep_one_rate_per_host_at_pop(workers: Workers, redis_client: redis.Redis) -> None:
    """Host mode: DOMAIN_RATE_LIMIT=5 across three nodes, checked on the site's arrival times."""
    with sites(("127.0.0.6", 30)) as (site,):
        for node in ("node-a", "node-b", "node-c"):
            workers.start(node, "DOMAIN_RATE_LIMIT=5")
        workers.wait_ready("node-a", "node-b", "node-c")
        redis_client.lpush("news:start_urls", site.url + "/")
        codes = workers.wait_all(timeout=90)
        log = [t for t, path in site.request_log() if not path.startswith("/robots.txt")]
    assert codes == {"node-a": 0, "node-b": 0, "node-c": 0}
    assert len(log) >= 30
    for window in (1.0, 3.0):
        assert max_in_any_window(log, window) <= math.floor(window * 5) + 2
    for node in ("node-a", "node-b", "node-c"):  # the pop waited, not the middleware
        assert "'politeness/delayed'" not in workers.log(node)


@pytest.mark.timeout(120)
def test_domain_max_pages_across_three_nodes(workers: Workers, redis_client: redis.Redis, tmp_path: Path) -> None:
    with sites(("127.0.0.4", 60), ("127.0.0.5", 30)) as (capped, free):
        for node in ("node-a", "node-b", "node-c"):
            workers.start(node, 'DOMAIN_MAX_PAGES={"127.0.0.4": 20}', "CONCURRENT_REQUESTS=4")
        workers.wait_ready("node-a", "node-b", "node-c")
        redis_client.lpush("news:start_urls", capped.url + "/", free.url + "/")
        codes = workers.wait_all(timeout=90)
        fetched = [path for _, path in capped.request_log() if not path.startswith("/robots.txt")]
    assert codes == {"node-a": 0, "node-b": 0, "node-c": 0}
    host = capped.url.split("//")[1]
    urls = stored(tmp_path / "items.db")
    capped_urls = [u for u in urls if u.startswith(capped.url)]
    failed = redis_client.llen("{news}:failed")
    assert int(redis_client.hget("{news}:host:" + host, "pages") or 0) == 20  # leased cluster-wide
    # leased pages that store nothing (robots-disallowed /private/*, 404s) still count against the budget
    assert len(capped_urls) <= len(fetched) <= 20 and len(capped_urls) >= 15 - failed
    assert (redis_client.zscore("{news}:hosts:over", host) or 0) > 0  # leftovers counted, visible
    assert redis_client.zcard("{news}:q:" + host) + redis_client.llen("{news}:q:" + host + "/") > 0  # zset, list
    assert {u for u in urls if u.startswith(free.url)} == free.expected_urls()  # other hosts unaffected


@pytest.mark.timeout(120)
def test_domain_max_in_flight_across_three_nodes(workers: Workers, redis_client: redis.Redis, tmp_path: Path) -> None:
    """DOMAIN_MAX_IN_FLIGHT=2 for one host, three nodes of 8 slots each, articles answered in 0.15 s:
    that site never answers more than 2 at once; the uncapped site beside it does (the test can fail)."""
    with sites(("127.0.0.7", 40), ("127.0.0.8", 40), delay=0.15) as (capped, free):
        for node in ("node-a", "node-b", "node-c"):
            workers.start(node, 'DOMAIN_MAX_IN_FLIGHT={"127.0.0.7": 2}', "CONCURRENT_REQUESTS=8")
        workers.wait_ready("node-a", "node-b", "node-c")
        redis_client.lpush("news:start_urls", capped.url + "/", free.url + "/")
        codes = workers.wait_all(timeout=90)
    assert codes == {"node-a": 0, "node-b": 0, "node-c": 0}
    urls = set(stored(tmp_path / "items.db"))
    assert capped.expected_urls() | free.expected_urls() == urls  # capped, not starved
    assert capped.max_active <= 2, f"{capped.max_active} requests at once on the capped host"
    assert free.max_active > 2, f"only {free.max_active} at once on the uncapped host: the test shows nothing"
    assert redis_client.hget("{news}:host:" + capped.url.split("//")[1], "cap") == b"2"


@pytest.mark.timeout(150)
def test_kill9_chaos_on_many_hosts_stores_every_page_once(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    addresses = [(f"127.0.0.{10 + i}", 30) for i in range(10)]
    settings = ("CONCURRENT_REQUESTS=8", "SCHEDULER_LEASE_SECONDS=4")
    with sites(*addresses) as all_sites:
        for node in ("node-a", "node-b", "node-c"):
            workers.start(node, *settings)
        workers.wait_ready("node-a", "node-b", "node-c")
        redis_client.lpush("news:start_urls", *(s.url + "/" for s in all_sites))
        db = tmp_path / "items.db"
        for round_ in range(2):
            wait_for(lambda n=round_: len(stored(db)) >= 60 * (n + 1), 40, "pages to be stored")
            workers.kill9("node-c")
            workers.start("node-c", *settings)
        codes = workers.wait_all(timeout=100)
        expected = set().union(*(s.expected_urls() for s in all_sites))
    assert codes["node-a"] == 0 and codes["node-b"] == 0
    urls = stored(db)
    assert len(urls) == len(set(urls))
    assert set(urls) == expected
    assert redis_client.zcard("{news}:processing") == 0 and redis_client.zcard("{news}:hosts") == 0
