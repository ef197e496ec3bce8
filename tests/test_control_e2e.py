"""Live control of a running crawl, end to end: two real workers on loopback sites, `dcrawl` as an
operator runs it, and every claim measured at the sites (their request logs)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, dcrawl
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ok(redis_url: str, *args: str) -> str:
    proc = dcrawl(redis_url, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _between(site: NewsSite, start: float, end: float) -> list[float]:
    return [t for t, _ in site.request_log() if start <= t < end]


@pytest.mark.timeout(150)
def test_delay_block_purge_pause_and_resume_on_a_running_crawl(
    workers: Workers, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    with NewsSite(articles=60, per_page=10) as site, NewsSite(articles=60, per_page=10) as other:
        host = site.url.split("://")[1]
        other_host = other.url.split("://")[1]
        # a host no request has named yet: accepted, with a note; it is crawled slowly from the start
        assert "note:" in _ok(redis_url, "host", "news", other_host, "set", "--delay", "0.5")
        for node in ("w1", "w2"):
            workers.start(node, "DOMAIN_RATE_LIMIT=5", "DOMAIN_MAX_IN_FLIGHT=2", "HEARTBEAT_INTERVAL=1")
        workers.wait_ready("w1", "w2")
        redis_client.lpush("news:start_urls", site.url + "/", other.url + "/")
        _wait(lambda: len(site.request_log()) >= 8 and len(other.request_log()) >= 4, 40, "the crawl to start")

        # purge the other site: its pending requests go, counted; at most its leased ones still come
        out = _ok(redis_url, "host", "news", other_host, "purge", "--dead-letter")
        purged_at = time.monotonic()
        assert int(out.split()[1]) > 0, out

        # set --delay: the measured interval follows within 2 s
        _ok(redis_url, "host", "news", host, "set", "--delay", "1")
        t = time.monotonic()
        time.sleep(5)
        arrivals = _between(site, t + 2, t + 5)
        assert len(arrivals) >= 2
        assert min(b - a for a, b in zip(arrivals, arrivals[1:])) >= 1 - 0.010
        _ok(redis_url, "host", "news", host, "set", "--delay", "0.1")

        # block --for 5s: nothing comes (after the requests in flight and those a node took before its
        # copy of the overrides, read once a second, showed the block), then the crawl goes on
        _ok(redis_url, "host", "news", host, "block", "--for", "5s", "--reason", "test")
        t, wall = time.monotonic(), time.time()
        until = json.loads(redis_client.hget("{news}:overrides", host))["until"]  # the CLI's time.time() + 5
        time.sleep(7)
        late = [(round(at - wall, 2), path) for at, path in site.wall_log() if wall + 2 <= at < until - 0.05]
        assert late == [], late
        _wait(lambda: _between(site, t + 5, t + 60), 5, "fetches after the block")

        # pause: all fetching stops within 2 s, and a worker restarted meanwhile leases nothing either;
        # resume: the crawl finishes, every page stored once
        _ok(redis_url, "pause", "news")
        t = time.monotonic()
        time.sleep(2)
        os.killpg(workers.procs["w2"].pid, signal.SIGTERM)  # a graceful stop gives its leases back
        assert workers.procs["w2"].wait(30) == 0
        workers.start("w2", "DOMAIN_RATE_LIMIT=5", "DOMAIN_MAX_IN_FLIGHT=2", "HEARTBEAT_INTERVAL=1")
        workers.wait_ready("w2")
        time.sleep(2)
        assert _between(site, t + 2, time.monotonic()) == []
        assert "paused since" in _ok(redis_url, "status", "news")
        _ok(redis_url, "resume", "news")
        codes = workers.wait_all(timeout=90)
        other_after = _between(other, purged_at + 1, purged_at + 600)
    assert codes == {"w1": 0, "w2": 0}
    assert len(other_after) <= 2  # leased before the purge at most (one per node at 0.5 s)
    with sqlite3.connect(tmp_path / "items.db") as conn:
        rows = [url for (url,) in conn.execute("SELECT url FROM items")]
    mine = [u for u in rows if u.startswith(site.url)]
    assert len(mine) == len(set(mine)) and set(mine) == site.expected_urls()
    assert redis_client.xlen("{news}:audit") == 7  # set, purge, set, set, block, pause, resume
