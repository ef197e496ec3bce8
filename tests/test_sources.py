"""Source health: fixed buckets per source, the silent rule, one alert per transition."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from distributed_crawler.events import extension
from distributed_crawler.events.extension import SOURCE_SILENT, check_silence
from distributed_crawler.events.sources import (
    LAG_EDGES,
    SourcesConfig,
    lag_bucket,
    lag_seconds,
    parse_source,
    read_sources,
    sort_sources,
    sparkline,
)
from tests.test_events import article, make_feed, run, store

pytestmark = pytest.mark.timeout(60)
DAY = 86400
NOW = 1_800_000_000.0  # a Unix time (2027)


def history(last_ago: float, gaps: dict[int, int], **extra: Any) -> dict[bytes, bytes]:
    fields = {b"last": str(NOW - last_ago).encode(), b"n": b"40"}
    fields.update({f"g:{b}".encode(): str(n).encode() for b, n in gaps.items()})
    fields.update({k.encode(): str(v).encode() for k, v in extra.items()})
    return fields


def test_silent_rule_on_crafted_histories() -> None:
    hourly = {11: 30}  # gaps of 2048..4096 s: median ~48 min
    # 3 x median gap (~2.4 h) is below the 6 h floor: silent only after 6 h
    assert not parse_source("a", history(5 * 3600, hourly), NOW, 28).is_silent(NOW, 6)
    assert parse_source("a", history(7 * 3600, hourly), NOW, 28).is_silent(NOW, 6)
    daily = {16: 30}  # gaps of 18..36 h: median ~25.5 h, silent after ~76 h
    assert not parse_source("b", history(60 * 3600, daily), NOW, 28).is_silent(NOW, 6)
    assert parse_source("b", history(80 * 3600, daily), NOW, 28).is_silent(NOW, 6)
    # one article only: no gap known, the floor decides
    assert parse_source("c", history(7 * 3600, {}), NOW, 28).is_silent(NOW, 6)
    # never an article: never silent
    assert not parse_source("d", {}, NOW, 28).is_silent(NOW, 6)


def test_garbage_fields_are_skipped() -> None:
    health = parse_source("x", {b"a:zz": b"1", b"l:3": b"-4", b"last": b"nan", b"g:99": b"1", b"n": b"x"}, NOW, 28)
    assert health.last is None and health.articles == 0 and health.median_gap is None


def test_days_lag_and_sparkline() -> None:
    today = int(NOW // DAY)
    fields = {f"a:{today}".encode(): b"4", f"a:{today - 2}".encode(): b"2", f"a:{today - 40}".encode(): b"9"}
    fields |= {b"l:0": b"9", b"l:5": b"1"}
    health = parse_source("s", fields, NOW, 28)
    assert health.per_day[-1] == 4 and health.per_day[-3] == 2 and sum(health.per_day) == 6
    assert health.lag_p50 == LAG_EDGES[0] and health.lag_p95 == LAG_EDGES[5]
    assert len(sparkline(health.per_day)) == 28
    assert lag_bucket(10) == 0 and lag_bucket(10**9) == len(LAG_EDGES)
    assert lag_seconds("2026-01-01T10:00:00Z", "2026-01-01T10:05:00+00:00") == 300
    assert lag_seconds("2026-01-01", "2026-01-01T10:05:00+00:00") is None  # a date has no time


def test_sort_orders() -> None:
    rows = [
        {"source": "a", "silent": False, "since_last_seconds": 10, "silent_after_seconds": 100, "articles_28d": 5,
         "lag_p95_seconds": 60, "lag_over_max": False},
        {"source": "b", "silent": True, "since_last_seconds": 900, "silent_after_seconds": 100, "articles_28d": 1,
         "lag_p95_seconds": None, "lag_over_max": False},
    ]  # fmt: skip
    assert [r["source"] for r in sort_sources(rows, "health")] == ["b", "a"]
    assert [r["source"] for r in sort_sources(rows, "articles")] == ["a", "b"]
    assert [r["source"] for r in sort_sources(rows, "lag")] == ["a", "b"]


class Alerts:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def alert(self, kind: str, node: str, message: str, now: float, **details: Any) -> dict[str, Any]:
        self.sent.append((kind, details))
        return details


def test_stored_articles_feed_the_source_and_silence_alerts_once(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    config = SourcesConfig(silent_min_hours=1.0)
    alerts = Alerts()

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        published = "2020-01-01T00:00:00+00:00"
        await store(tmp_path, make_feed(lambda: client), [article(i, published_at=published) for i in range(3)])
        now = float((await client.time())[0])
        [health] = await read_sources(client, config, "news", now)
        assert health.source == "example.com" and health.articles == 3 and health.per_day[-1] == 3
        assert health.lag_p95 == float("inf")  # published years ago: the open bucket
        assert await check_silence(client, config, "news", alerts, now) == []
        later = now + 2 * 3600
        assert await check_silence(client, config, "news", alerts, later) == [("example.com", True)]
        assert await check_silence(client, config, "news", alerts, later + 60) == []  # once
        await store(tmp_path, make_feed(lambda: client), [article(9)])
        now = float((await client.time())[0])
        assert await check_silence(client, config, "news", alerts, now) == [("example.com", False)]
        await client.aclose()

    run(scenario())
    assert [(k, d["state"]) for k, d in alerts.sent] == [(SOURCE_SILENT, "silent"), (SOURCE_SILENT, "recovered")]


def test_sources_are_capped(redis_url: str, redis_client: redis.Redis) -> None:
    config = SourcesConfig(max_sources=2)
    for i in range(5):
        redis_client.zadd(config.index_key("news"), {f"s{i}.example": i})
        redis_client.hset(config.key_of("news", f"s{i}.example"), "n", 1)
        redis_client.zadd(config.coverage_key_of("news", f"s{i}.example"), {"https://s.example/": 1})

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        await check_silence(client, config, "news", Alerts(), NOW)
        await client.aclose()

    asyncio.run(scenario())
    assert redis_client.zrange(config.index_key("news"), 0, -1) == [b"s3.example", b"s4.example"]
    assert not redis_client.exists(config.key_of("news", "s0.example"))
    assert not redis_client.exists(config.coverage_key_of("news", "s0.example"))  # its coverage went too
    assert redis_client.exists(config.coverage_key_of("news", "s4.example"))


def test_only_articles_count_for_their_source(tmp_path: Path, redis_url: str) -> None:
    async def scenario() -> list[Any]:
        client = aioredis.Redis.from_url(redis_url)
        items = [article(1, page_type="article"), article(2, page_type="list"), article(3)]
        await store(tmp_path, make_feed(lambda: client), items)
        now = float((await client.time())[0])
        read = await read_sources(client, SourcesConfig(), "news", now)
        await client.aclose()
        return read

    [health] = run(scenario())
    assert health.articles == 2  # the list page has its event, but is not news of the source


def test_a_source_whose_dates_vanish_alerts_drift_once_and_recovery_once(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    from distributed_crawler.events.drift import EXTRACTION_DRIFT, check_drift

    config = SourcesConfig(drift_min_articles=5)  # lifted from 20: a few articles make the test
    alerts = Alerts()
    text = "word " * 120  # 600 characters: of normal length (SOURCE_DRIFT_TEXT_CHARS 500)
    good = {"published_at": "2026-12-01T10:00:00+00:00", "authors": ["Ann"]}

    def other(i: int) -> dict[str, Any]:
        return {"url": f"https://other.org/a/{i}", "title": "t", "text": text, "status": 200, **good}

    async def scenario() -> list[list[tuple[str, str, str]]]:
        client = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: client)
        seen = []
        await store(tmp_path, feed, [article(i, text, **good) for i in range(20)] + [other(i) for i in range(20)])
        seen.append(await check_drift(client, config, "news", alerts, NOW))
        await store(tmp_path, feed, [article(i, text, authors=["Ann"]) for i in range(20, 26)])  # no date now
        await store(tmp_path, feed, [other(i) for i in range(20, 26)])
        seen.append(await check_drift(client, config, "news", alerts, NOW))
        seen.append(await check_drift(client, config, "news", alerts, NOW))  # still drifting: no new alert
        [health] = [h for h in await read_sources(client, config, "news", NOW) if h.source == "example.com"]
        assert health.drift_flag == ("date",) and health.quality["authors"] == (1.0, 1.0)
        await store(tmp_path, feed, [article(i, text, **good) for i in range(26, 40)])  # fixed
        seen.append(await check_drift(client, config, "news", alerts, NOW))
        await client.aclose()
        return seen

    assert run(scenario()) == [[], [("example.com", "date", "drift")], [], [("example.com", "date", "recovered")]]
    assert [(k, d["source"], d["field"], d["state"]) for k, d in alerts.sent] == [
        (EXTRACTION_DRIFT, "example.com", "date", "drift"),
        (EXTRACTION_DRIFT, "example.com", "date", "recovered"),
    ]


def test_drift_needs_enough_articles_and_a_usual_field() -> None:
    def health(n: int, recent: float, baseline: float) -> Any:
        fields = history(0, {}, **{"q:n": n, "q:date:fast": recent, "q:date:slow": baseline})
        return parse_source("s", fields, NOW, 28)

    assert health(30, 0.1, 0.9).drifting(20, 0.5) == ("date",)
    assert health(10, 0.1, 0.9).drifting(20, 0.5) == ()  # too few articles judged
    assert health(30, 0.0, 0.3).drifting(20, 0.5) == ()  # the source rarely dates its articles
    assert health(30, 0.5, 0.9).drifting(20, 0.5) == ()  # a dip, not a drop
    assert parse_source("s", history(0, {}, **{"q:date:fast": "x", "q:date:slow": 2}), NOW, 28).quality == {}


def test_a_request_the_node_refused_is_not_an_error_of_its_source() -> None:
    """robots.txt's IgnoreRequest reached the source-error count (59,944 errors at 10,000
    hosts while the site served none); a real download failure still counts."""
    import asyncio

    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest
    from twisted.internet.error import ConnectionRefusedError

    from distributed_crawler.events.coverage import CoverageLog
    from distributed_crawler.events.middleware import RemovedPageMiddleware

    class Feed:
        def __init__(self) -> None:
            self.failures: list[tuple[str, str]] = []
            self.coverage = CoverageLog(SourcesConfig(), "news")

        async def record_failure(self, url: str, kind: str) -> None:
            self.failures.append((url, kind))

    feed = Feed()
    middleware = RemovedPageMiddleware(feed, crawler=None)  # type: ignore[arg-type]
    asyncio.run(
        middleware.process_exception(Request("http://s.test/private"), IgnoreRequest("Forbidden by robots.txt"))
    )
    assert feed.failures == []
    asyncio.run(middleware.process_exception(Request("http://s.test/a"), ConnectionRefusedError()))
    assert feed.failures == [("http://s.test/a", "error")]


def test_a_check_covers_one_slice_of_the_sources_a_chunk_at_a_time(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checking node holds one chunk of sources at a time, and one check's Redis work is one
    slice, however many sources are kept (a wide crawl keeps one per host); every source is still
    checked, in turn."""
    # lowered from 10,000 and 1,000: 2,500 sources make three slices (1,000, 1,000, 500)
    monkeypatch.setattr(extension, "CHECK_SLICE", 1000)
    monkeypatch.setattr(extension, "CHECK_CHUNK", 300)
    config = SourcesConfig(silent_min_hours=1.0, check_seconds=60.0)
    pipe = redis_client.pipeline(transaction=False)
    for i in range(2500):
        pipe.zadd(config.index_key("news"), {f"h{i}.example": i})
        pipe.hset(config.key_of("news", f"h{i}.example"), mapping={"last": NOW - 7200, "n": 1})
    pipe.execute()
    reads: list[int] = []
    read = extension.read_named_sources

    async def counted(client: Any, config: SourcesConfig, spider: str, sources: list[str], now: float) -> Any:
        reads.append(len(sources))
        return await read(client, config, spider, sources, now)

    monkeypatch.setattr(extension, "read_named_sources", counted)
    alerts = Alerts()

    async def scenario() -> list[int]:
        client = aioredis.Redis.from_url(redis_url)
        alerted = []
        for k in range(3):  # three intervals in a row
            silent, _, _ = await extension.check_sources(client, config, "news", alerts, NOW + 60 * k)
            alerted.append(len(silent))
        await client.aclose()
        return alerted

    assert sorted(asyncio.run(scenario())) == [500, 1000, 1000]
    assert max(reads) == 300 and sum(reads) == 2500
    assert len({details["source"] for _, details in alerts.sent}) == 2500  # each once
