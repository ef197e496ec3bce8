"""Politeness inputs, cluster-wide on Redis server time: host blocks on 429/503/Retry-After,
robots.txt once per cluster (never a proxy's ban answer), Crawl-delay across nodes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, TextResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.downloadermiddlewares.retry import DistributedRetryMiddleware, RetryLater, slot_of_request
from distributed_crawler.downloadermiddlewares.robotstxt import (
    DISALLOW_ALL,
    RobotsTxtMiddleware,
    entry_of,
    rules_of,
)
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.meta import HOST_BACKOFF_META, LEASE_META, PROXY_BAN_META, RETRY_DELAY_META
from tests.conftest import Workers
from tests.proxies.server import TestProxy
from tests.site.server import ROBOTS_TXT, NewsSite

KEYS = SpiderKeys.from_settings(Settings(), "news")


class _Spider(Spider):
    name = "news"

    def parse(self, response: Any) -> None:
        return None


def _crawler(redis_url: str, **settings: Any) -> Any:
    crawler = get_crawler(
        _Spider,
        settings_dict={
            "REDIS_URL": redis_url,
            "NODE_ID": "n1",
            "ROBOTSTXT_OBEY": True,
            "SCHEDULER": "distributed_crawler.scheduler.RedisScheduler",  # as on a node: host blocks
            **settings,
        },
    )
    crawler.spider = _Spider.from_crawler(crawler)
    return crawler


def _now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


# -- RFC 9309 and proxy bans: what a robots.txt answer means ------------------------------------
def _answer(status: int, body: bytes = b"", ban: str | None = None) -> TextResponse:
    request = Request("http://site.test/robots.txt", meta={PROXY_BAN_META: ban} if ban else {})
    return TextResponse(request.url, status=status, body=body, request=request, encoding="utf-8")


def test_what_a_robots_answer_means() -> None:
    assert rules_of(entry_of(_answer(200, ROBOTS_TXT.encode()))) == ROBOTS_TXT.encode()
    assert rules_of(entry_of(_answer(404))) == b""  # 4xx from the site: allow all
    assert rules_of(entry_of(_answer(403))) == b""
    for status in (500, 503, 429):  # unavailable: disallow all for now
        assert rules_of(entry_of(_answer(status))) is DISALLOW_ALL
    assert rules_of(entry_of(None, "ConnectionRefusedError")) is DISALLOW_ALL
    # a proxy's ban answer is never the site's robots.txt, whatever its status
    banned = entry_of(_answer(403, b"<html>Forbidden</html>", ban="status 403"))
    assert rules_of(banned) is DISALLOW_ALL and banned["error"] == "proxy ban: status 403"
    for garbage in ({}, {"status": "200", "body": "x"}, {"status": True}, {"status": 200, "body": 5}):
        assert rules_of(garbage) in (DISALLOW_ALL, b"")


def _robots_node(redis_url: str, answers: list[TextResponse], downloads: list[str]) -> Any:
    crawler = _crawler(redis_url, ROBOTS_ERROR_CACHE_SECONDS=30, ROBOTS_WAIT_SECONDS=0.5)

    async def download_async(request: Request) -> TextResponse:
        downloads.append(request.url)
        await asyncio.sleep(0.05)
        return answers.pop(0)

    crawler.engine = SimpleNamespace(download_async=download_async)
    return crawler, RobotsTxtMiddleware.from_crawler(crawler)


def _leased(path: str) -> Request:
    return Request(f"http://site.test{path}", meta={LEASE_META: b"lease"})


async def _verdict(mw: RobotsTxtMiddleware, request: Request) -> str:
    try:
        again = await mw.process_request(request)
    except IgnoreRequest:
        return "forbidden"
    except RetryLater as exc:  # robots.txt unavailable: a counted retry through delayed
        assert str(exc).startswith("robots.txt unavailable") and (exc.delay or 0) > 0
        return "retry"
    if isinstance(again, Request):
        # host mode: the host is blocked until robots.txt is cached, so it waits in its host's queue
        expected = 0.0 if mw.hosts is not None else mw.wait_seconds
        assert again.meta[LEASE_META] == b"lease" and again.meta[RETRY_DELAY_META] == expected
        return "later"
    return "allowed"


def test_robots_once_per_cluster_and_a_ban_answer_never_allows(redis_url: str, redis_client: redis.Redis) -> None:
    downloads: list[str] = []
    banned = _answer(403, b"<html>Forbidden</html>", ban="status 403")
    (c1, node1) = _robots_node(redis_url, [banned], downloads)
    (c2, node2) = _robots_node(redis_url, [], downloads)

    async def scenario() -> list[str]:
        node1.spider_opened(c1.spider)
        node2.spider_opened(c2.spider)
        try:
            seen = [await _verdict(node1, _leased("/private/admin"))]  # node 1 takes the lock, fetches
            host = KEYS.host("site.test")
            assert redis_client.hget(host, "why") == b"robots.txt pending"
            assert float(redis_client.hget(host, "until") or 0) > _now(redis_client)  # blocked meanwhile
            seen.append(await _verdict(node2, _leased("/private/admin")))  # node 2: fetched elsewhere
            await asyncio.sleep(0.2)  # node 1's fetch: the ban answer
            seen.append(await _verdict(node1, _leased("/private/admin")))
            seen.append(await _verdict(node2, _leased("/public")))  # disallowed for now: waits too
            entry = json.loads(redis_client.get("{news}:robots.txt:site.test") or b"{}")
            assert entry["status"] is None and entry["error"].startswith("proxy ban")
            assert 0 < redis_client.ttl("{news}:robots.txt:site.test") <= 30
            # the entry expires (simulated): one node fetches the real one
            redis_client.delete("{news}:robots.txt:site.test")
            node1._cached.clear()
            node2._cached.clear()
            node1_answers = [_answer(200, ROBOTS_TXT.encode())]
            node1.crawler.engine.download_async = _serve(node1_answers, downloads)
            seen.append(await _verdict(node1, _leased("/private/admin")))
            await asyncio.sleep(0.2)
            assert float(redis_client.hget(host, "until") or 1) == 0  # cached: node 1 lifted the block
            seen += [await _verdict(node2, _leased(p)) for p in ("/private/admin", "/public")]
            seen += [await _verdict(node1, _leased(p)) for p in ("/private/admin", "/public")]
            return seen
        finally:
            await node1.spider_closed(c1.spider)
            await node2.spider_closed(c2.spider)

    seen = asyncio.run(scenario())
    assert seen == ["later", "later", "retry", "retry", "later", "forbidden", "allowed", "forbidden", "allowed"]
    assert downloads == ["http://site.test/robots.txt"] * 2  # once per cluster, each time
    assert json.loads(redis_client.get("{news}:robots.txt:site.test") or b"{}")["status"] == 200


def _serve(answers: list[TextResponse], downloads: list[str]) -> Any:
    async def download_async(request: Request) -> TextResponse:
        downloads.append(request.url)
        return answers.pop(0)

    return download_async


# -- host blocking in the retry middleware ----------------------------------------------------------
def test_429_with_retry_after_blocks_the_host_and_a_success_resets_backoff(
    redis_url: str, redis_client: redis.Redis
) -> None:
    crawler = _crawler(redis_url, SCHEDULER_QUEUE_CLASS="host", RETRY_BACKOFF_MAX=30)
    mw = DistributedRetryMiddleware.from_crawler(crawler)
    host = KEYS.host("site.test")
    redis_client.zadd(KEYS.ready, {"site.test": 0})

    async def scenario() -> tuple[Any, Any, Any]:
        mw.spider_opened(crawler.spider)
        try:
            first = _leased("/a")
            response = HtmlResponse(first.url, status=429, headers={"Retry-After": "10"}, request=first)
            retry = await mw.process_response(first, response)
            held = mw.process_request(_leased("/b"))  # a request of that host this node still holds
            other = mw.process_request(Request("http://other.test/", meta={LEASE_META: b"x"}))
            ok = _leased("/c")
            ok.meta[HOST_BACKOFF_META] = 3
            redis_client.hset(host, "bo", 3)
            await mw.process_response(ok, HtmlResponse(ok.url, status=200, request=ok))
            return retry, held, other
        finally:
            await mw.spider_closed(crawler.spider)

    start = _now(redis_client)
    retry, held, other = asyncio.run(scenario())
    assert isinstance(retry, Request) and retry.meta[RETRY_DELAY_META] == pytest.approx(10, abs=0.5)
    assert float(redis_client.hget(host, "until") or 0) == pytest.approx(start + 10, abs=1)
    assert redis_client.zscore(KEYS.ready, "site.test") == pytest.approx(start + 10, abs=1)
    assert (redis_client.hget(host, "why") or b"").startswith(b"429")
    assert isinstance(held, Request) and 8 < held.meta[RETRY_DELAY_META] <= 10
    assert other is None
    assert redis_client.hget(host, "bo") == b"0"  # the success reset it
    # robots.txt unavailable (RetryLater from robotstxt.py): a counted retry through delayed
    later = asyncio.run(_raise_later(mw, crawler))
    assert isinstance(later, Request) and later.meta["retry_times"] == 1 and later.meta[RETRY_DELAY_META] >= 5
    stats = crawler.stats.get_stats()
    assert stats["retry/host_blocked"] == 1 and stats["retry/host_deferred"] == 1
    assert stats["retry/host_backoff_reset"] == 1


def test_without_host_mode_nothing_is_blocked(redis_url: str, redis_client: redis.Redis) -> None:
    crawler = _crawler(redis_url, SCHEDULER_QUEUE_CLASS="priority")
    mw = DistributedRetryMiddleware.from_crawler(crawler)

    async def scenario() -> Any:
        mw.spider_opened(crawler.spider)
        try:
            first = _leased("/a")
            return await mw.process_response(first, HtmlResponse(first.url, status=503, request=first))
        finally:
            await mw.spider_closed(crawler.spider)

    assert isinstance(asyncio.run(scenario()), Request)
    assert not redis_client.keys("{news}:host:*")


def test_slot_of_a_request() -> None:
    assert slot_of_request(Request("http://WWW.Site.test/a")) == "www.site.test"
    assert slot_of_request(Request("http://site.test:8080/a")) == "site.test:8080"
    assert slot_of_request(Request("https://site.test:443/a")) == "site.test"
    assert slot_of_request(Request("http://x.site.test/", meta={"_dc_slot": "site.test"})) == "site.test"


# -- end to end: real workers, the news site ----------------------------------------------------------
def _stored(db: Path) -> set[str]:
    if not db.exists():
        return set()
    with sqlite3.connect(db) as conn:
        return {url for (url,) in conn.execute("SELECT url FROM items")}


def _wait(predicate: Any, what: str, timeout: float = 60) -> Any:
    """The predicate's first truthy value, polled every 50 ms (bounded)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


TOLERANCE = 0.2  # seconds: one node's latency between its pop and the request reaching the site
FAST = ("RETRY_BACKOFF_BASE=0.1", "RETRY_BACKOFF_MAX=1", "CONCURRENT_REQUESTS=4", "ROBOTSTXT_OBEY=True")


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_banning_proxy_never_makes_a_disallowed_page_fetchable(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with NewsSite(articles=10) as site, TestProxy("ban") as ban, TestProxy("forward") as good:
        settings = (
            *FAST,
            f"PROXY_LIST={ban.url},{good.url}",
            "PROXY_REVIVE_SECONDS=0",
            "RETRY_TIMES=6",
            "ROBOTS_ERROR_CACHE_SECONDS=1",
            "ROBOTS_WAIT_SECONDS=0.3",
        )
        for node in ("node-a", "node-b"):
            workers.start(node, *settings)
        workers.wait_ready("node-a", "node-b")
        redis_client.lpush("news:start_urls", site.url + "/", site.url + "/private/admin")
        codes = workers.wait_all(timeout=150)
        assert all(code == 0 for code in codes.values()), codes
        assert site.hits("/private/") == 0
        stored = _stored(tmp_path / "items.db")
        assert not any("/private/" in url for url in stored)
        assert stored == site.expected_urls()
        logs = workers.log("node-a") + workers.log("node-b")
        assert "Traceback" not in logs
        netloc = site.url.split("//", 1)[1]
        entry = json.loads(redis_client.get(f"{{news}}:robots.txt:{netloc}") or b"{}")
        assert entry.get("status") == 200 and "Disallow: /private/" in entry["body"], entry


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_429_with_retry_after_blocks_the_host_for_every_node(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with NewsSite(articles=6) as site:
        for node in ("node-a", "node-b"):
            workers.start(node, *FAST, "RETRY_TIMES=1", "RETRY_BACKOFF_MAX=30", "MAX_IDLE_TIME_BEFORE_CLOSE=4")
        workers.wait_ready("node-a", "node-b")
        redis_client.lpush("news:start_urls", site.url + "/busy?status=429&after=4")
        netloc = site.url.split("//", 1)[1]

        def block_of_the_429() -> tuple[float, float] | None:
            """(until, answered) once the 429's block is written (the host may already carry an
            earlier, shorter block: the one that waits for robots.txt)."""
            answers = [t for t, p in site.wall_log() if p.startswith("/busy")]
            until = float(redis_client.hget(KEYS.host(netloc), "until") or 0)
            return (until, max(answers)) if answers and until > max(answers) + 1 else None

        until, answered = _wait(block_of_the_429, "the 429")
        assert until - answered == pytest.approx(4, abs=0.5)  # Retry-After: 4, on Redis time
        # Work for that host pushed now, to any node: none is fetched before the block ends.
        redis_client.lpush("news:start_urls", *(f"{site.url}/article/{i}" for i in range(1, 7)), site.url + "/")
        codes = workers.wait_all(timeout=90)
        assert all(code == 0 for code in codes.values()), codes
        after = [(t, p) for t, p in site.wall_log() if t > answered and p != "/robots.txt"]
        assert after, "nothing fetched after the 429"
        assert min(t for t, _ in after) >= until - 0.05, (until, after[:3])
        assert f"{site.url}/article/1" in _stored(tmp_path / "items.db")
        logs = workers.log("node-a") + workers.log("node-b")
        assert "blocked for" in logs and "Traceback" not in logs


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_crawl_delay_is_honoured_across_three_nodes(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    delay = 0.5
    with NewsSite(articles=12, per_page=20, crawl_delay=delay) as site:
        nodes = ("node-a", "node-b", "node-c")
        for node in nodes:
            workers.start(node, *FAST, "CONCURRENT_REQUESTS=8")
        workers.wait_ready(*nodes)
        redis_client.lpush("news:start_urls", site.url + "/")
        codes = workers.wait_all(timeout=150)
        assert all(code == 0 for code in codes.values()), codes
        assert _stored(tmp_path / "items.db") == site.expected_urls()
        assert site.hits("/robots.txt") == 1  # once for the whole cluster
        netloc = site.url.split("//", 1)[1]
        assert float(redis_client.hget(KEYS.host(netloc), "cd") or 0) == pytest.approx(delay)
        times = sorted(t for t, p in site.wall_log() if p != "/robots.txt")
        assert len(times) >= 16
        # Spaced at pop time on Redis time; what the site sees adds each node's pop-to-send latency
        # (tens of ms on a busy 2-core box), which never accumulates: any k consecutive gaps span
        # at least k crawl-delays minus one latency.
        short = [
            (j - i, round(times[j] - times[i], 3))
            for i in range(len(times))
            for j in range(i + 1, len(times))
            if times[j] - times[i] < (j - i) * delay - TOLERANCE
        ]
        assert not short, short[:5]


async def _raise_later(mw: DistributedRetryMiddleware, crawler: Any) -> Any:
    mw.spider_opened(crawler.spider)
    try:
        return await mw.process_exception(_leased("/d"), RetryLater("robots.txt unavailable: status 503", 5.0))
    finally:
        await mw.spider_closed(crawler.spider)


@pytest.mark.parametrize("shards", [1, 6])
def test_the_robots_cache_key_lives_on_the_hosts_shard(redis_url: str, shards: int) -> None:
    crawler = _crawler(redis_url, FRONTIER_SHARDS=shards, SCHEDULER_QUEUE_CLASS="host")
    mw = RobotsTxtMiddleware.from_crawler(crawler)

    async def keys() -> list[tuple[str, str]]:
        mw.spider_opened(crawler.spider)
        try:
            assert mw.frontier is not None
            netlocs = [f"site{i}.test" for i in range(12)] + ["site0.test:8080"]
            return [(mw.cache_key(n), mw.frontier.host_queue_key(n)) for n in netlocs]
        finally:
            await mw.spider_closed(crawler.spider)

    pairs = asyncio.run(keys())
    if shards == 1:  # today's key, byte for byte
        assert pairs[0][0] == "{news}:robots.txt:site0.test" and pairs[-1][0] == "{news}:robots.txt:site0.test:8080"
    tags = {robots.split("}")[0] for robots, _ in pairs}
    assert tags == {"{news"} if shards == 1 else len(tags) > 1  # spread over the shards
    for robots, queue in pairs:  # with the host's queue: same tag, so same Cluster slot
        assert robots.split("}")[0] == queue.split("}")[0]
