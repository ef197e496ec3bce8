"""Node side: nothing a node reads from Redis can stop it.

Garbage (pickle, invalid UTF-8, binary, broken or non-object JSON, fields of the wrong JSON type,
1 MB members, NaN/inf) is quarantined with a reason or skipped; a key of the wrong Redis type is
one ERROR line naming the key and its fix, and the node waits until it is fixed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.untrusted import EpisodeLog, WrongTypeLog, preview
from distributed_crawler.dedup.bloom import BloomMetaError, BloomState
from distributed_crawler.dedup.dupefilter import (
    BitmapDedup,
    BloomConfig,
    DedupDataError,
    SetDedup,
    choose_dedup,
    reset_dedup,
)
from distributed_crawler.frontier.codec import PayloadError, RequestCodec
from distributed_crawler.frontier.deadletters import DeadLetters
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seeds import SeedError, parse_seed
from tests.conftest import Workers
from tests.site.server import NewsSite
from tests.test_crash_safety import rows, wait_until

KEYS = SpiderKeys.from_settings(Settings(), "news")
PICKLED = pickle.dumps({"url": "http://example.com/"})
MEGABYTE = b"x" * (1 << 20)


class NewsLike(Spider):
    name = "news"

    def parse(self, response):
        return None


def payload(**fields) -> str:
    base = {"v": 1, "class": "scrapy.http.request.Request", "url": "http://example.com/"}
    base.update(fields)
    return json.dumps(base)


# -- codec: any malformed payload is a PayloadError with a reason ----------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        PICKLED,
        b"\xff\xfe\x00binary",
        b'{"v": 1, "url": "http://e',
        b"[1, 2, 3]",
        b'"a string"',
        b"null",
        b"[" * 100_000,
        MEGABYTE,
        b"NaN",
        payload(url=5),
        payload(url=None),
        payload(meta=[1, 2]),
        payload(meta="m"),
        payload(headers="h"),
        payload(headers={"A": [1]}),
        payload(headers={"A": {"b": 1}}),
        payload(priority="high"),
        payload(priority=1.5),
        payload(priority=10**30),
        payload(priority=True),
        payload(callback=5),
        payload(callback="_private"),
        payload(callback="nope"),
        payload(errback=["x"]),
        payload(body=7),
        payload(body="!!not base64!!"),
        payload(cookies="c=1"),
        payload(flags="f"),
        payload(cb_kwargs=[1]),
        payload(encoding=5),
        payload(encoding="no-such-codec"),
        payload(method=5),
        payload(**{"class": ["x"]}),
        payload(**{"class": "os.system"}),
        payload(url="no scheme"),
        '{"v": 1, "class": "scrapy.http.request.Request", "url": "http://e/", "priority": Infinity}',
    ],
)
def test_codec_rejects_garbage_with_payload_error(raw: bytes | str) -> None:
    with pytest.raises(PayloadError):
        RequestCodec(NewsLike()).decode(raw)


def test_codec_drops_private_meta_from_redis() -> None:
    request = RequestCodec(NewsLike()).decode(payload(meta={"_dc_retry_delay": "abc", "_dc_lease": "x", "ok": 1}))
    assert request.meta == {"ok": 1}


# -- seeds ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (PICKLED, "not_utf8"),
        (b"\xff\xfe", "not_utf8"),
        (MEGABYTE, "too_large"),
        (b"{" + b"[" * 60_000, "bad_json"),
        (b'{"url": 5}', "bad_url"),
        (b'{"url": "http://e.com/", "meta": [1]}', "bad_meta"),
        (b'{"url": "http://e.com/", "headers": "h"}', "bad_headers"),
        (b'{"url": "http://e.com/", "headers": {"a": [1]}}', "bad_headers"),
        (b'{"url": "http://e.com/", "priority": "1"}', "bad_priority"),
        (b'{"url": "http://e.com/", "priority": 1.5}', "bad_priority"),
        (b'{"url": "http://e.com/", "priority": 99999999999}', "bad_priority"),
        (b'{"url": "http://e.com/", "callback": 3}', "bad_callback"),
        (b'{"url": "http://e.com/", "meta": {"_dc_lease": "x"}}', "bad_meta"),
        (b"[1]", "bad_scheme"),
        (b"\x00\x01\x02", "bad_scheme"),
        (b"http://", "not_a_url"),
    ],
)
def test_seed_garbage_is_a_seed_error(raw: bytes, kind: str) -> None:
    with pytest.raises(SeedError) as info:
        parse_seed(raw, 65536)
    assert info.value.kind == kind


# -- previews ---------------------------------------------------------
def test_preview_caps_and_replaces() -> None:
    assert len(preview(MEGABYTE)) == 300 and preview(b"\xff") == "\ufffd"


def test_dead_letters_cap_the_raw_payload(redis_client: redis.Redis, redis_url: str) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.zadd(KEYS.processing, {b"1:0:" + MEGABYTE: 1, b"1:0:" + PICKLED: 1})
        await DeadLetters(client, KEYS.failed, "n", 10).undecodable(
            [(b"1:0:" + MEGABYTE, "r" * 5000), (b"1:0:" + PICKLED, "pickle")], KEYS.processing
        )
        await client.aclose()

    asyncio.run(run())
    entries = [json.loads(e) for e in redis_client.lrange(KEYS.failed, 0, -1)]
    assert len(entries) == 2 and all(len(e["payload"]) <= 300 and len(e["reason"]) < 400 for e in entries)
    assert redis_client.zcard(KEYS.processing) == 0


# -- Bloom meta hash --------------------------------------------------------------------------------
GOOD_META = {
    "layers": "1",
    "L0:cap": "1000",
    "L0:p": "0.001",
    "L0:m": "16384",
    "L0:k": "10",
    "L0:pbits": "16384",
    "L0:pieces": "1",
    "L0:n": "3",
    "capacity": "1000",
    "error_rate": "0.001",
}


@pytest.mark.parametrize(
    "change",
    [
        {"layers": "abc"},
        {"layers": "nan"},
        {"layers": "1e9"},
        {"layers": "-1"},
        {"layers": "2"},
        {"L0:m": "x"},
        {"L0:k": "0"},
        {"L0:p": "nan"},
        {"L0:p": "inf"},
        {"L0:pieces": "-4"},
        {"L0:cap": None},
        {"L0:k": b"\xff"},
    ],
)
def test_bloom_meta_garbage_is_a_bloom_meta_error(change: dict) -> None:
    meta = {**GOOD_META, **change}
    meta = {k: v for k, v in meta.items() if v is not None}
    with pytest.raises(BloomMetaError):
        BloomState.from_meta(meta)


def test_bloom_statistics_garbage_is_zero() -> None:
    state = BloomState.from_meta({**GOOD_META, "L0:n": "nan", "capacity": "inf", "error_rate": "x"})
    assert state.counts == (0,) and state.capacity == 0 and state.overall_error_rate == 0.0


def test_dedup_data_errors_at_open_and_mid_crawl(redis_client: redis.Redis, redis_url: str) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.set(KEYS.dupefilter, "x")
        with pytest.raises(DedupDataError, match=r"redis-cli type|dcrawl dedup reset news"):
            await choose_dedup(client, KEYS.dupefilter, BloomConfig(backend="bitmap"))
        with pytest.raises(DedupDataError, match="holds a string"):
            await SetDedup(KEYS.dupefilter).prepare(client)
        await client.delete(KEYS.dupefilter)
        dedup = BitmapDedup(KEYS.dupefilter, BloomConfig(backend="bitmap", capacity=1000))
        await dedup.prepare(client)
        enqueuer = Enqueuer(frontier_for_mode(client, KEYS, "priority"), dedup)
        assert await enqueuer.run("add", [("ab" * 20, False, "")]) == [1]
        await client.hset(KEYS.dupefilter, "L0:m", "garbage")  # corrupted mid-crawl
        with pytest.raises(DedupDataError, match="corrupt"):
            await enqueuer.run("add", [("cd" * 20, False, "")])
        await client.hset(KEYS.dupefilter, "layers", "zz")
        with pytest.raises(DedupDataError, match="corrupt"):
            await dedup.refresh(client)
        assert await reset_dedup(client, KEYS.dupefilter) >= 1  # a corrupt filter can still be reset
        await client.aclose()

    asyncio.run(run())
    assert not redis_client.keys(KEYS.dupefilter + "*")


# -- once-per-episode logs --------------------------------------------------------------------------
def test_wrong_type_log_names_the_key_once_and_logs_the_fix(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        log = WrongTypeLog("scheduling")
        expected = {KEYS.requests: ("zset",), KEYS.failed: ("list",)}
        await client.set(KEYS.requests, "x")
        for _ in range(3):
            await log.check(client, expected)
        await log.resolved(client, expected)  # still wrong: nothing logged
        await client.delete(KEYS.requests)
        await log.resolved(client, expected)
        await client.aclose()

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and KEYS.requests in errors[0] and f"redis-cli del '{KEYS.requests}'" in errors[0]
    assert sum("is fixed after" in r.getMessage() for r in caplog.records) == 1


def test_wrong_type_log_two_tasks_resolving_at_once(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The scheduler's loops share one log: two of them seeing the fix at once log it once, never crash."""

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        log = WrongTypeLog("scheduling")
        expected = {KEYS.requests: ("zset",)}
        await client.set(KEYS.requests, "x")
        await log.check(client, expected)
        await client.delete(KEYS.requests)
        await asyncio.gather(*(log.resolved(client, expected) for _ in range(4)))
        assert not log.reported
        await client.aclose()

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert sum("is fixed after" in r.getMessage() for r in caplog.records) == 1


def test_episode_log_once_until_ok(caplog: pytest.LogCaptureFixture) -> None:
    log = EpisodeLog(logging.getLogger("t"))
    with caplog.at_level(logging.WARNING):
        assert log.failed("pop", "boom %s", 1) and not log.failed("pop", "boom %s", 2)
        log.ok("pop")
        assert log.failed("pop", "boom %s", 3)
    assert [r.getMessage() for r in caplog.records] == ["boom 1", "pop works again after 0.0s", "boom 3"]


# -- politeness and proxies -------------------------------------------------------------------------
def test_rate_key_garbage_never_breaks_a_request(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    from distributed_crawler.downloadermiddlewares.politeness import DomainRateLimitMiddleware

    settings = {
        "REDIS_URL": redis_url,
        "DOMAIN_RATE_LIMIT": 100,
        "DOMAIN_MAX_IN_FLIGHT": 0,
        "SCHEDULER_QUEUE_CLASS": "priority",
    }
    crawler = get_crawler(settings_dict=settings)  # the middleware's rates: single-queue modes
    mw = DomainRateLimitMiddleware.from_crawler(crawler)
    key = mw.config.key("example.com", None)

    crawler.crawling = True  # as in a running crawl (a stopping node lets waiting requests go)

    async def run() -> list[float]:
        mw.spider_opened(None)
        waits = []
        redis_client.hset(key, "a", "b")  # wrong type for 0.5 s: the request waits, then goes
        asyncio.get_running_loop().call_later(0.5, redis_client.delete, key)
        began = time.monotonic()
        assert await mw.process_request(Request("http://example.com/")) is None
        waits.append(time.monotonic() - began)
        for garbage in ("abc", "nan", "inf", "-inf", "\xff"):
            redis_client.set(key, garbage)
            await mw.process_request(Request("http://example.com/"))
        await mw.spider_closed(None)
        return waits

    with caplog.at_level(logging.WARNING):
        waits = asyncio.run(run())
    assert 0.4 < waits[0] < 5
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and key in r.getMessage()]
    assert len(errors) == 1 and "holds a hash" in errors[0]


def test_proxy_pool_garbage_members_and_wrong_type(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.test_proxy_pool import middleware_run

    good = "http://127.0.0.1:3128"
    redis_client.zadd("dc:proxies", {b"\x80\x04garbage": 50, "not a url": 50, "ftp://x:1": 50, good: 1})

    async def picks(mw):
        mw.crawler.crawling = True
        return [(await mw.process_request(Request(f"http://example.com/{i}")),) for i in range(20)]

    with caplog.at_level(logging.WARNING):
        middleware_run(redis_url, picks, PROXY_EMPTY_POLICY="direct")
    assert sum("not a proxy URL" in r.getMessage() for r in caplog.records) == 1

    redis_client.delete("dc:proxies")
    redis_client.set("dc:proxies", "x")
    caplog.clear()

    async def direct(mw):
        mw.crawler.crawling = True
        requests = [Request(f"http://example.com/{i}") for i in range(5)]
        for request in requests:
            assert await mw.process_request(request) is None
        return [r.meta.get("proxy") for r in requests]

    with caplog.at_level(logging.WARNING):
        proxies, stats = middleware_run(redis_url, direct, PROXY_EMPTY_POLICY="direct", PROXY_ENABLED=True)
    assert proxies == [None] * 5 and stats.get("proxy/direct") == 5
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "dc:proxies holds a string" in errors[0]


# -- a real worker --------------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_worker_survives_garbage_and_a_wrong_type_key_mid_crawl(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    garbage_lease = b"\x80\x04" + PICKLED  # expired, without an envelope: reclaim must not die on it
    redis_client.zadd(KEYS.processing, {garbage_lease: 1})
    # host mode (the default): garbage in one host's queue, the host due in the ready zset
    redis_client.zadd(
        KEYS.host_queue("e.com"),
        {b"not ours at all": -1, b"0:0:" + payload(url=5).encode(): -2, b"0:0:" + MEGABYTE: -3},
    )
    redis_client.zadd(KEYS.ready, {"e.com": 0})
    with NewsSite(articles=30, per_page=10, delay=0.3) as site:
        redis_client.lpush("news:start_urls", site.url + "/", PICKLED, b'{"url": "http://e.com/", "meta": [1]}')
        workers.start("w", "SCHEDULER_LEASE_SECONDS=3", "CONCURRENT_REQUESTS=2", "MAX_IDLE_TIME_BEFORE_CLOSE=2")
        db = tmp_path / "items.db"
        wait_until(lambda: len(rows(db)) >= 3, 60, "the first pages stored")
        # someone's `redis-cli set` on a key the feeder reads; the retries waiting in it are kept
        # aside and put back with the fix (a SET alone deletes them: the test's loss, not the crawler's)
        aside = KEYS.delayed + ":aside"
        clobber = redis_client.pipeline(transaction=True)
        clobber.zunionstore(aside, [KEYS.delayed]).set(KEYS.delayed, "x").execute()
        wait_until(lambda: f"Redis key {KEYS.delayed} holds a string" in workers.log("w"), 20, "the ERROR line")
        time.sleep(2)
        assert workers.procs["w"].poll() is None, workers.log("w")[-3000:]
        fix = redis_client.pipeline(transaction=True)
        fix.delete(KEYS.delayed).zunionstore(KEYS.delayed, [aside]).delete(aside).execute()
        codes = workers.wait_all(timeout=60)
        stored = set(rows(db))
        expected = site.expected_urls()
    log = workers.log("w")
    assert codes == {"w": 0}, log[-3000:]
    assert stored == expected
    assert log.count(f"Redis key {KEYS.delayed} holds a string") == 1 and f"{KEYS.delayed} is fixed" in log
    assert "scheduler_error" not in log and "Scheduler task" not in log
    failed = [json.loads(e) for e in redis_client.lrange(KEYS.failed, 0, -1)]
    assert len(failed) == 6, failed
    assert all(len(e.get("payload", "")) <= 300 for e in failed)
    assert redis_client.zcard(KEYS.processing) == 0


def test_preflight_lets_a_node_start_on_a_wrong_type_dupefilter(redis_url: str, redis_client, capsys) -> None:
    """Bad data is waited out by the running node: the preflight warns instead of exiting 2
    (under supervisor an exit would be a crash loop)."""
    from scrapy.settings import Settings

    from distributed_crawler.commands.crawl import check_dupefilter
    from distributed_crawler.connection.clients import RedisConfig

    redis_client.set("{news}:dupefilter", "not a filter")
    settings = Settings(
        {"REDIS_URL": redis_url, "DUPEFILTER_CLASS": "distributed_crawler.dedup.dupefilter.BloomDupeFilter"}
    )
    check_dupefilter(settings, RedisConfig.from_settings(settings), "news")
    err = capsys.readouterr().err
    assert err.startswith("WARNING: ") and "{news}:dupefilter" in err and "dcrawl dedup reset" in err
