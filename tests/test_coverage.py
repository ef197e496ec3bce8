"""Coverage per source: listed sitemap/feed URLs against stored, why each missing one is missing,
the window, the cap, and the `coverage_low` alert once per transition (real redis-server: the
scripts' scores and ZCOUNT ranges)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from scrapy import Request

from distributed_crawler.core.checks import ForbiddenByRobots
from distributed_crawler.events.coverage import (
    FAILED,
    LISTED,
    MAX_PENDING,
    NEAR_DUPLICATE,
    NOT_ARTICLE,
    NOT_FETCHED,
    REFUSED,
    SCORE_BASE,
    SKIPPED,
    STORED,
    Coverage,
    CoverageLog,
    listed_url,
    read_coverage,
)
from distributed_crawler.events.coverage_alert import COVERAGE_LOW, check_coverage
from distributed_crawler.events.sources import SourcesConfig
from distributed_crawler.meta import COVERAGE_URL_META
from tests.test_events import make_feed, run

pytestmark = pytest.mark.timeout(60)
SITE = "https://news.example.com"


def counts(**by_state: int) -> tuple[int, ...]:
    names = ("not_fetched", "failed", "refused", "skipped", "not_article", "near_duplicate", "stored")
    return tuple(by_state.get(n, 0) for n in names)


# -- arithmetic -----------------------------------------------------------------------------------
def test_listed_stored_missing_and_the_ratio() -> None:
    cov = Coverage("s", counts(stored=7, failed=1, not_article=1, not_fetched=1))
    assert (cov.listed, cov.stored, cov.missing, cov.ratio) == (10, 7, 3, 0.7)
    assert cov.by_reason() == {
        "not_fetched": 1,
        "failed": 1,
        "refused": 0,
        "skipped": 0,
        "not_article": 1,
        "near_duplicate": 0,
    }
    out = cov.as_dict()
    assert (out["listed"], out["stored"], out["missing"], out["coverage"]) == (10, 7, 3, 0.7)
    assert Coverage("s").ratio is None and Coverage("s").as_dict()["coverage"] is None


def test_the_alert_leaves_out_urls_within_their_grace_and_needs_enough_of_them() -> None:
    # 10 listed, 2 stored, 8 not fetched of which 7 listed a moment ago: 2 of 3 judged stored
    cov = Coverage("s", counts(stored=2, not_fetched=8), fresh=7)
    assert cov.judged == 3 and cov.judged_ratio() == pytest.approx(2 / 3)
    assert cov.is_low(0.9, min_listed=3) is True
    assert cov.is_low(0.9, min_listed=4) is None  # too few judged: no verdict
    assert cov.judged_by_reason()["not_fetched"] == 1
    assert Coverage("s", counts(stored=19, failed=1)).is_low(0.9, 10) is False  # 95 %
    assert Coverage("s", counts(stored=17, refused=3)).is_low(0.9, 10) is True  # 85 %


# -- the node's log --------------------------------------------------------------------------------
def test_the_log_keeps_canonical_urls_by_source_and_is_bounded() -> None:
    log = CoverageLog(SourcesConfig(), "news", source_of=lambda url: url.split("/")[2])
    assert log.listed("HTTPS://News.Example.com/a?b=2&a=1#top") == "https://news.example.com/a?a=1&b=2"
    log.outcome(f"{SITE}/b", {COVERAGE_URL_META: f"{SITE}/a?a=1&b=2"}, STORED)  # redirected from the listed URL
    log.outcome(f"{SITE}/c", {}, NOT_FETCHED)  # not an outcome: ignored
    [(keys, args)] = log.take()
    assert keys == ["{news}:coverage:news.example.com", "{news}:sources", "{news}:source:news.example.com"]
    assert args[:3] == ["news.example.com", 86400.0, 1000]
    pairs = list(zip(args[3::2], args[4::2]))
    assert pairs[0] == ("https://news.example.com/a?a=1&b=2", "L")
    assert sorted(pairs[1:]) == [(f"{SITE}/a?a=1&b=2", str(STORED)), (f"{SITE}/b", str(STORED))]
    assert log.take() == []
    for i in range(1005):
        log.listed(f"{SITE}/{i}")
    assert log.size == 1000 and log.dropped == 5  # SOURCE_COVERAGE_MAX_URLS per source and write
    log.take()
    for i in range(MAX_PENDING + 5):
        log.listed(f"https://s{i}.example/")
    assert log.size == MAX_PENDING and log.dropped == 10


def test_listed_url_meta_from_redis_is_untrusted() -> None:
    assert listed_url({COVERAGE_URL_META: f"{SITE}/a"}) == f"{SITE}/a"
    for garbage in (["x"], 5, "", "javascript:alert(1)", "https://x/" + "a" * 5000):
        assert listed_url({COVERAGE_URL_META: garbage}) is None


# -- the script and the read -----------------------------------------------------------------------
def write(client: redis.Redis, config: SourcesConfig, log: CoverageLog) -> None:
    script = client.register_script(open_script())
    for keys, args in log.take():
        script(keys=keys, args=args)


def open_script() -> str:
    from distributed_crawler.connection.lua import lua_source

    return lua_source("coverage_record")


def read(client: redis.Redis, config: SourcesConfig, missing: int = 0) -> Coverage:
    now = float(client.time()[0])
    return asyncio.run(read_coverage(client, config, "news", ["example.com"], now, missing))["example.com"]


def test_states_only_rise_and_an_outcome_before_the_listing_counts(redis_client: redis.Redis) -> None:
    config = SourcesConfig(coverage_grace=0)
    log = CoverageLog(config, "news", source_of=lambda url: "example.com")
    log.outcome(f"{SITE}/early", {}, STORED)  # fetched through a link first, listed later
    log.outcome(f"{SITE}/hub", {}, NOT_ARTICLE)  # never listed: not counted
    for path in ("early", "ok", "500", "403", "video", "copy", "fr", "later"):
        log.listed(f"{SITE}/{path}")
    log.outcome(f"{SITE}/ok", {}, FAILED)  # a first try failed ...
    log.outcome(f"{SITE}/ok", {}, STORED)  # ... its retry stored it
    log.outcome(f"{SITE}/ok", {}, FAILED)  # a revisit failing later does not unstore it
    log.outcome(f"{SITE}/500", {}, FAILED)
    log.outcome(f"{SITE}/403", {}, REFUSED)
    log.outcome(f"{SITE}/video", {}, NOT_ARTICLE)
    log.outcome(f"{SITE}/copy", {}, NEAR_DUPLICATE)
    log.outcome(f"{SITE}/fr", {}, SKIPPED)
    write(redis_client, config, log)
    log.listed(f"{SITE}/early")  # listed again: still one URL, stored
    write(redis_client, config, log)
    cov = read(redis_client, config, missing=10)
    assert (cov.listed, cov.stored, cov.missing) == (8, 2, 6)
    assert sorted((u.rsplit("/", 1)[1], r) for u, r, _ in cov.missing_urls) == [
        ("403", "refused"),
        ("500", "failed"),
        ("copy", "near_duplicate"),
        ("fr", "skipped"),
        ("later", "not_fetched"),
        ("video", "not_article"),
    ]
    assert redis_client.zscore("{news}:sources", "example.com") is not None  # shown by `dcrawl sources`


def test_the_window_forgets_old_listings_and_the_cap_drops_the_oldest(redis_client: redis.Redis) -> None:
    config = SourcesConfig(coverage_max_urls=3, coverage_grace=0)
    key = config.coverage_key_of("news", "example.com")
    now = int(redis_client.time()[0])
    # an old listing and an old unlisted outcome, written as the script writes them
    redis_client.zadd(key, {f"{SITE}/old": LISTED * SCORE_BASE + now - 2 * 86400})
    redis_client.zadd(key, {f"{SITE}/hub": NOT_ARTICLE * SCORE_BASE + now - 60})
    log = CoverageLog(config, "news", source_of=lambda url: "example.com")
    for i in range(3):
        log.listed(f"{SITE}/{i}")
    write(redis_client, config, log)
    members = {m.decode() for m in redis_client.zrange(key, 0, -1)}
    assert members == {f"{SITE}/{i}" for i in range(3)}  # the old listing expired, the unlisted hub went first
    assert not redis_client.hget(config.key_of("news", "example.com"), "cov_evicted")
    log.listed(f"{SITE}/3")
    write(redis_client, config, log)
    assert redis_client.zcard(key) == 3
    assert redis_client.hget(config.key_of("news", "example.com"), "cov_evicted") == b"1"
    assert read(redis_client, config).evicted == 1


@pytest.mark.parametrize(
    ("cap", "kept"),
    [
        (4, {"f", "g", "h", "new"}),  # every unlisted outcome, then the two oldest listings
        (7, {"c", "d", "e", "f", "g", "h", "new"}),  # b, then a (an equal time: the lower state first)
    ],
)
def test_the_cap_evicts_in_a_few_commands_however_many_go(redis_client: redis.Redis, cap: int, kept: set[str]) -> None:
    config = SourcesConfig(coverage_max_urls=cap)
    key = config.coverage_key_of("news", "example.com")
    now = int(redis_client.time()[0])
    entries = {
        "a": (NOT_ARTICLE, -50),
        "b": (FAILED, -60),
        "c": (NEAR_DUPLICATE, -50),
        "d": (LISTED, -100),
        "e": (LISTED + STORED, -200),
        "f": (LISTED + FAILED, -100),
        "g": (LISTED, -10),
        "h": (LISTED + REFUSED, -5),
    }
    redis_client.zadd(key, {f"{SITE}/{k}": code * SCORE_BASE + now + age for k, (code, age) in entries.items()})
    log = CoverageLog(config, "news", source_of=lambda url: "example.com")
    log.listed(f"{SITE}/new")
    redis_client.config_resetstat()
    write(redis_client, config, log)
    stats = redis_client.info("commandstats")
    members = {m.decode().rsplit("/", 1)[1] for m in redis_client.zrange(key, 0, -1)}
    assert members == kept
    evicted = redis_client.hget(config.key_of("news", "example.com"), "cov_evicted")
    assert evicted == (b"2" if cap == 4 else None)
    # one read per state's range (6 unlisted, 7 listed) and one ZREM per kind, not 6-7 reads per URL
    assert stats["cmdstat_zrangebyscore"]["calls"] <= (13 if cap == 4 else 6)
    assert stats["cmdstat_zrem"]["calls"] <= 2


def test_garbage_in_the_keys_is_replaced(redis_client: redis.Redis) -> None:
    config = SourcesConfig()
    key = config.coverage_key_of("news", "example.com")
    redis_client.set(key, "garbage")
    redis_client.set(config.key_of("news", "example.com"), "garbage")
    log = CoverageLog(config, "news", source_of=lambda url: "example.com")
    log.listed(f"{SITE}/a")
    write(redis_client, config, log)
    redis_client.zadd(key, {f"{SITE}/b": 99 * SCORE_BASE})  # a score out of every range: ignored
    assert read(redis_client, config).listed == 1


# -- the alert -------------------------------------------------------------------------------------
class Alerts:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def alert(self, kind: str, node: str, message: str, now: float, **details: Any) -> dict[str, Any]:
        self.sent.append((kind, {"message": message, **details}))
        return details


def test_coverage_low_alerts_once_on_entering_and_once_on_recovering(redis_url: str) -> None:
    config = SourcesConfig(coverage_min_listed=5, coverage_grace=0)  # lifted from 10: a few URLs make the case
    alerts = Alerts()

    async def scenario() -> list[list[tuple[str, bool]]]:
        client = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: client)
        feed.coverage = CoverageLog(config, "news", source_of=lambda url: url.split("/")[2])
        seen = []
        for i in range(10):
            feed.coverage.listed(f"https://bad.example/{i}")
            feed.coverage.listed(f"https://good.example/{i}")
            feed.coverage.outcome(f"https://good.example/{i}", {}, STORED)
            feed.coverage.outcome(f"https://bad.example/{i}", {}, STORED if i < 6 else FAILED)
        assert await feed.flush_coverage() == 2  # one script call per source, one round trip
        now = float((await client.time())[0])
        seen.append(await check_coverage(client, config, "news", alerts, now))
        seen.append(await check_coverage(client, config, "news", alerts, now))  # still low: no new alert
        for i in range(6, 10):
            feed.coverage.outcome(f"https://bad.example/{i}", {}, STORED)  # retried, stored
        await feed.flush_coverage()
        seen.append(await check_coverage(client, config, "news", alerts, now))
        await client.aclose()
        return seen

    assert run(scenario()) == [[("bad.example", True)], [], [("bad.example", False)]]
    assert [(k, d["source"], d["state"]) for k, d in alerts.sent] == [
        (COVERAGE_LOW, "bad.example", "low"),
        (COVERAGE_LOW, "bad.example", "recovered"),
    ]
    first = alerts.sent[0][1]
    assert (first["listed"], first["stored"], first["missing"]["failed"]) == (10, 6, 4)
    assert "failed 4" in first["message"] and "--coverage" in first["message"]


def test_robots_refusal_and_failed_downloads_reach_coverage() -> None:
    from twisted.internet.error import ConnectionRefusedError

    from distributed_crawler.events.middleware import RemovedPageMiddleware

    class Feed:
        coverage = CoverageLog(SourcesConfig(), "news", source_of=lambda url: "s.test")

        async def record_failure(self, url: str, kind: str) -> None:
            pass

    feed = Feed()
    middleware = RemovedPageMiddleware(feed, crawler=None)  # type: ignore[arg-type]
    asyncio.run(middleware.process_exception(Request("http://s.test/private"), ForbiddenByRobots("robots.txt")))
    asyncio.run(middleware.process_exception(Request("http://s.test/a"), ConnectionRefusedError()))
    [(_, args)] = feed.coverage.take()
    assert args[3:] == ["http://s.test/private", str(REFUSED), "http://s.test/a", str(FAILED)]
