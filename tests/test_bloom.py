"""The Bloom dupefilter: sizing, both backends, growth, concurrency, persistence, reset, rebuild."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
from pathlib import Path

import fakeredis
import pytest
import redis
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from demo.spiders.news import NewsSpider
from distributed_crawler.cli.main import main as dcrawl
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.bloom import Layer, layer_plan, size_class
from distributed_crawler.dedup.dupefilter import (
    BitmapDedup,
    BloomConfig,
    BloomDupeFilter,
    DedupError,
    RedisBloomDedup,
    choose_dedup,
    describe_dedup,
)
from distributed_crawler.frontier.enqueue import Enqueuer, refused_entry
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.conftest import Workers, crawl_preflight, one_error_line
from tests.site.server import NewsSite

KEYS = SpiderKeys.from_settings(Settings(), "news")


def fps(start: int, n: int, salt: str = "seen") -> list[str]:
    return [hashlib.sha1(f"{salt}-{i}".encode()).hexdigest() for i in range(start, start + n)]


@pytest.mark.parametrize(
    ("nbytes", "cls"),
    [(100, 112), (1835000 + 10, 2097152), (1834998 + 10, 1835008), (4194304, 4194304), (65537, 81920)],
)
def test_jemalloc_size_classes(nbytes: int, cls: int) -> None:
    assert size_class(nbytes) == cls


def test_layer_sizing_is_exact_not_power_of_two() -> None:
    layer = layer_plan(1_000_000, 0.001, 0)  # first layer: p * 0.9
    assert layer.hashes == 10
    assert 1.80 <= layer.bits / 8 / 1_000_000 <= 1.85  # 14.6 bits/URL, allocator class included
    big = Layer.plan(50_000_000, 0.0009)
    assert big.pieces > 1 and all(n + 10 <= 4 * 1024 * 1024 for n in big.piece_lengths())
    assert layer.pieces >= 16  # small pieces: the last one's rounding is all the waste
    assert sum(big.piece_lengths()) * 8 == big.bits
    assert layer_plan(1000, 0.001, 1).capacity == 2000 and layer_plan(1000, 0.001, 1).error_rate == pytest.approx(
        0.00009
    )


@pytest.fixture(params=["bitmap", "redisbloom"])
def backend(request: pytest.FixtureRequest, redis_client: redis.Redis) -> tuple[str, redis.Redis]:
    """The bitmap filter on real Redis 7; RedisBloom on fakeredis (real Redis 7 has no module)."""
    if request.param == "bitmap":
        return "bitmap", redis_client
    client = fakeredis.FakeRedis()
    client.flushall()
    return "redisbloom", client


def open_enqueuer(client: redis.Redis, mode: str, capacity: int, error_rate: float = 0.001) -> Enqueuer:
    dedup = run_sync(choose_dedup(client, KEYS.dupefilter, BloomConfig(mode, capacity, error_rate)))
    run_sync(dedup.prepare(client))
    assert dedup.mode == mode
    return Enqueuer(frontier_for_mode(client, KEYS, "fifo"), dedup)


def add(enqueuer: Enqueuer, fingerprints: list[str], action: str = "add") -> list[int]:
    out = []
    for i in range(0, len(fingerprints), 1000):
        out += run_sync(enqueuer.run(action, [(fp, False, "") for fp in fingerprints[i : i + 1000]]))
    return out


def test_check_and_add(backend: tuple[str, redis.Redis]) -> None:
    mode, client = backend
    enqueuer = open_enqueuer(client, mode, 1000)
    assert add(enqueuer, fps(0, 3)) == [1, 1, 1]
    assert add(enqueuer, fps(0, 3) + fps(3, 1)) == [0, 0, 0, 1]
    assert add(enqueuer, fps(4, 2), action="check") == [1, 1]  # check does not add
    assert add(enqueuer, fps(4, 2)) == [1, 1]
    assert run_sync(describe_dedup(client, KEYS.dupefilter))["count"] == 6


def test_refused_links_grow_the_filter_and_are_dead_lettered_once(backend: tuple[str, redis.Redis]) -> None:
    """A batch of refused links past the layer's capacity: the script stops at the full layer, the
    filter grows and the rest is sent again; each link's dead letter written exactly once."""
    mode, client = backend
    enqueuer = open_enqueuer(client, mode, 1000)
    links = fps(0, 1500)
    entries = [refused_entry(fp, json.dumps({"url": f"http://x.test/{fp}"}), 100_000) for fp in links]
    written = sum(run_sync(enqueuer.run("push", entries)))
    assert written >= 1490  # a Bloom filter's false positive: a link taken as seen, no letter
    assert run_sync(enqueuer.run("push", entries[:10])) == [0] * 10  # seen: no second letter
    assert client.llen(KEYS.failed) == written
    assert add(enqueuer, links, action="check") == [0] * 1500
    assert client.zcard(KEYS.requests) + client.llen(KEYS.requests) == 0  # nothing queued


@pytest.mark.slow
def test_growth_keeps_the_error_rate(backend: tuple[str, redis.Redis]) -> None:
    mode, client = backend
    capacity, p = 5000, 0.001
    enqueuer = open_enqueuer(client, mode, capacity, p)
    added = sum(add(enqueuer, fps(0, 3 * capacity)))
    if mode == "bitmap":  # ours; fakeredis's RedisBloom stand-in is only held to the final rate below
        assert added >= 3 * capacity * (1 - 1.2 * p)  # a false "seen" on the way is a false positive
    stats = run_sync(describe_dedup(client, KEYS.dupefilter))
    assert stats["layers"] >= 2 and stats["count"] == added
    assert add(enqueuer, fps(0, 3 * capacity), action="check") == [0] * (3 * capacity)  # none forgotten
    if mode == "redisbloom":
        # fakeredis stands in for RedisBloom with pyprobables' ExpandingBloomFilter, which adds
        # sub-filters without tightening them (RedisBloom halves each one): its rate would measure
        # the stand-in, not us. Real RedisBloom is not on this machine (Redis 7.0, no modules).
        return
    unseen = 100_000
    false_positives = unseen - sum(add(enqueuer, fps(0, unseen, salt="unseen"), action="check"))
    assert false_positives / unseen <= 1.2 * p, f"{false_positives} false positives in {unseen}"


@pytest.mark.slow
def test_bitmap_memory_is_the_formula(redis_client: redis.Redis) -> None:
    n = 200_000
    enqueuer = open_enqueuer(redis_client, "bitmap", n)
    add(enqueuer, fps(0, n))
    stats = run_sync(describe_dedup(redis_client, KEYS.dupefilter))
    assert stats["layers"] == 1
    assert stats["bytes"] / n <= 1.9  # theory at p=0.001: 1.80 bytes/URL (our first layer: 0.9 p)


def _add_all(url: str, capacity: int, out: multiprocessing.Queue) -> None:
    client = redis.Redis.from_url(url)
    enqueuer = open_enqueuer(client, "bitmap", capacity, error_rate=1e-7)  # no false positive in 10k
    out.put(add(enqueuer, fps(0, 10_000)))


@pytest.mark.e2e
def test_two_processes_adding_the_same_fingerprints_win_each_once(redis_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_add_all, args=(redis_url, 3000, out)) for _ in range(2)]  # grows meanwhile
    for p in procs:
        p.start()
    a, b = (out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert [x + y for x, y in zip(a, b)] == [1] * 10_000  # each fingerprint new exactly once in total
    assert run_sync(describe_dedup(redis.Redis.from_url(redis_url), KEYS.dupefilter))["layers"] == 3


def test_request_seen_interface_works_on_its_own(redis_url: str) -> None:
    crawler = get_crawler(
        NewsSpider,
        settings_dict={
            "REDIS_URL": redis_url,
            "REQUEST_FINGERPRINTER_CLASS": "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter",
        },
    )
    crawler.spider = NewsSpider()
    df = BloomDupeFilter.from_crawler(crawler)
    try:
        assert df.request_seen(Request("http://e.com/a?utm_source=x")) is False
        assert df.request_seen(Request("http://E.com:80/a#frag")) is True
    finally:
        df.close("finished")


def test_forcing_an_absent_backend_fails_clearly(redis_client: redis.Redis) -> None:
    with pytest.raises(DedupError, match=r"BLOOM_BACKEND \(redisbloom\) but this Redis has no BF"):
        run_sync(choose_dedup(redis_client, KEYS.dupefilter, BloomConfig("redisbloom")))
    assert isinstance(run_sync(choose_dedup(redis_client, KEYS.dupefilter, BloomConfig("auto"))), BitmapDedup)
    assert isinstance(run_sync(choose_dedup(fakeredis.FakeRedis(), "k", BloomConfig("auto"))), RedisBloomDedup)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"BLOOM_ERROR_RATE": 1.5}, r"BLOOM_ERROR_RATE \(1.5\) must be between 0 and 1"),
        ({"BLOOM_CAPACITY": 0}, r"BLOOM_CAPACITY \(0\) must be >= 1"),
        ({"BLOOM_BACKEND": "magic"}, r"BLOOM_BACKEND \(magic\) must be one of"),
    ],
)
def test_bad_settings_name_the_value(setting: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BloomConfig.from_settings(Settings(setting))


@pytest.mark.e2e
def test_crawl_with_forced_redisbloom_on_plain_redis_is_one_line(redis_url: str) -> None:
    error = one_error_line(crawl_preflight({"REDIS_URL": redis_url}, "-s", "BLOOM_BACKEND=redisbloom"))
    assert "BLOOM_BACKEND (redisbloom)" in error


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_persist_reset_and_rebuild(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    db = tmp_path / "items.db"
    with NewsSite(articles=40, per_page=20) as site:
        redis_client.lpush("news:start_urls", site.url + "/")
        workers.start("first")
        assert workers.wait_all(60) == {"first": 0}
        # The filter persisted (SCHEDULER_PERSIST): a second crawl of the same seed finds nothing new.
        redis_client.lpush("news:start_urls", site.url + "/")
        workers.start("second")
        assert workers.wait_all(60) == {"first": 0, "second": 0}
        fetched = [path.split("?")[0] for path in site.requested_paths()]
        assert fetched.count("/article/1") == 1 and fetched.count("/about") == 1  # once in two crawls
        assert fetched.count("/") == 2  # the seed itself (dont_filter, as in scrapy-redis)
        expected = site.expected_urls()
    with sqlite3.connect(db) as conn:
        assert {r[0] for r in conn.execute("SELECT url FROM items")} == expected

    assert dcrawl(["dedup", "stats", "news", "--redis-url", redis_url, "--json"]) == 0
    assert '"backend": "bitmap"' in capsys.readouterr().out
    assert dcrawl(["dedup", "check", "news", site.url + "/about?utm_source=x", "--redis-url", redis_url]) == 0
    assert capsys.readouterr().out.strip() == "seen"
    assert dcrawl(["dedup", "reset", "news", "--yes", "--redis-url", redis_url]) == 0
    assert run_sync(describe_dedup(redis_client, KEYS.dupefilter))["count"] == 0
    assert not redis_client.keys("{news}:dupefilter*")
    assert dcrawl(["dedup", "rebuild", "news", "--from", f"sqlite:///{db}", "--redis-url", redis_url]) == 0
    assert f"{len(expected)} URLs" in capsys.readouterr().out
    assert dcrawl(["dedup", "check", "news", site.url + "/article/7", "--redis-url", redis_url]) == 0
    assert capsys.readouterr().out.strip() == "seen"
