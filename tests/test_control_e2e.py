"""Live control of a running crawl, end to end: two real workers on loopback sites, `dcrawl` as an
operator runs it, and every claim measured at the sites (their request logs)."""

from __future__ import annotations

import json
import os
import re
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


def _leased_paths(client: redis.Redis, host: str) -> set[str]:
    """Paths of the site's requests leased right now ({news}:processing): leased before a change
    reached every node, so they may still arrive after it, however late a loaded machine runs them.
    A request leased later is not among them, and none of this set is leased again after an ack."""
    url = re.compile(rb"https?://" + re.escape(host.encode()) + rb"(/[^\"'\s\\]*)")
    found = (url.search(member) for member in client.zrange("{news}:processing", 0, -1))
    return {m.group(1).decode() for m in found if m}


def _arrivals_since(site: NewsSite, start: float, leased_before: set[str]) -> list[float]:
    """Arrival times (monotonic) from `start` on, of requests leased after `leased_before` was read."""
    return [t for t, path in site.request_log() if t >= start and path not in leased_before]


def _wait_log(workers: Workers, node: str, line: str, times: int, timeout: float) -> None:
    _wait(lambda: workers.log(node).count(line) >= times, timeout, f"{node} to log {line!r} ({times}x)")


@pytest.mark.timeout(600)  # every wait below is bounded; a loaded machine gets the time it needs
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
        _wait(lambda: len(site.request_log()) >= 8 and len(other.request_log()) >= 4, 90, "the crawl to start")

        # purge the other site: its pending requests go, counted; at most its leased ones still come
        out = _ok(redis_url, "host", "news", other_host, "purge", "--dead-letter")
        purged_at = time.monotonic()
        assert int(out.split()[1]) > 0, out

        # set --delay: every request leased after it comes at the new interval (those already
        # leased may still come at the old one: measured without them, however late they run)
        _ok(redis_url, "host", "news", host, "set", "--delay", "1")
        leased, t = _leased_paths(redis_client, host), time.monotonic()
        _wait(lambda: len(_arrivals_since(site, t, leased)) >= 3, 90, "three fetches leased after set --delay 1")
        arrivals = _arrivals_since(site, t, leased)
        assert min(b - a for a, b in zip(arrivals, arrivals[1:])) >= 1 - 0.010

        # block --for 5s (the site still at 1 s, so pages are left for after it): nothing leased after
        # it comes before it ends (what was leased already, in flight or held by a node, is handed
        # back or finishes, however late), then the crawl goes on
        _ok(redis_url, "host", "news", host, "block", "--for", "5s", "--reason", "test")
        leased, t, wall = _leased_paths(redis_client, host), time.monotonic(), time.time()
        until = json.loads(redis_client.hget("{news}:overrides", host))["until"]  # the CLI's time.time() + 5
        _wait(lambda: time.time() >= until + 0.5, 30, "the block to end")
        late = [(round(at - wall, 2), path) for at, path in site.wall_log() if wall <= at < until - 0.05]
        assert [(at, path) for at, path in late if path not in leased] == [], late
        _wait(lambda: _between(site, t + 5, t + 600), 90, "fetches after the block")

        # pause: once each node has read it nothing more is leased (what was leased finishes or goes
        # back), and a worker restarted meanwhile leases nothing either; resume: the crawl finishes,
        # every page stored once
        paused = "Crawl paused since"
        _ok(redis_url, "pause", "news")
        for node in ("w1", "w2"):  # each node's copy of the pause: it leases nothing from then on
            _wait_log(workers, node, paused, 1, 60)
        leased, t = _leased_paths(redis_client, host), time.monotonic()
        os.killpg(workers.procs["w2"].pid, signal.SIGTERM)  # a graceful stop gives its leases back
        assert workers.procs["w2"].wait(90) == 0
        workers.start("w2", "DOMAIN_RATE_LIMIT=5", "DOMAIN_MAX_IN_FLIGHT=2", "HEARTBEAT_INTERVAL=1")
        workers.wait_ready("w2", timeout=90)
        _wait_log(workers, "w2", paused, 2, 60)  # the restarted node read the pause too
        time.sleep(2)  # and had time to lease, were it not paused
        assert _arrivals_since(site, t, leased) == []
        assert "paused since" in _ok(redis_url, "status", "news")
        _ok(redis_url, "host", "news", host, "set", "--delay", "0.1")  # the rest goes fast once resumed
        _ok(redis_url, "resume", "news")
        codes = workers.wait_all(timeout=240)
        other_after = _between(other, purged_at + 1, purged_at + 3600)
    assert codes == {"w1": 0, "w2": 0}
    assert len(other_after) <= 2  # leased before the purge at most (one per node at 0.5 s)
    with sqlite3.connect(tmp_path / "items.db") as conn:
        rows = [url for (url,) in conn.execute("SELECT url FROM items")]
    mine = [u for u in rows if u.startswith(site.url)]
    assert len(mine) == len(set(mine)) and set(mine) == site.expected_urls()
    assert redis_client.xlen("{news}:audit") == 7  # set, purge, set, block, pause, set, resume
