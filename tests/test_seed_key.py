"""The seed key decided once (frontier/seedkey.py): its type for every combination of
REDIS_START_URLS_AS_SET / _AS_ZSET in `dcrawl seed`, the spider, `dcrawl status` and the importer,
and seeds held in the taken key until acked, put back after their lease (real redis-server)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis
from redis.crc import key_slot
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from distributed_crawler.cli import project
from distributed_crawler.cli.main import main
from distributed_crawler.frontier.seedkey import SeedKey, taken_key
from distributed_crawler.monitoring.status import status_now
from distributed_crawler.redis_spider import RedisSpider
from tests.conftest import crawl_preflight, one_error_line

COMBOS = {"neither": (False, False), "set": (True, False), "zset": (False, True), "both": (True, True)}
KIND = {"neither": "list", "set": "set", "zset": "zset"}


class SeedSpider(RedisSpider):
    name = "news"


def _values(combo: str, redis_url: str, **more: Any) -> dict[str, Any]:
    as_set, as_zset = COMBOS[combo]
    return {"REDIS_URL": redis_url, "REDIS_START_URLS_AS_SET": as_set, "REDIS_START_URLS_AS_ZSET": as_zset, **more}


def _settings(combo: str, redis_url: str, **more: Any) -> Settings:
    return Settings(_values(combo, redis_url, **more))


@pytest.fixture
def combo_project(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Any:
    """`dcrawl` with the project's settings plus the AS_SET / AS_ZSET of a combination."""

    def use(combo: str) -> None:
        settings = get_project_settings()
        as_set, as_zset = COMBOS[combo]
        settings.set("REDIS_START_URLS_AS_SET", as_set, priority="cmdline")
        settings.set("REDIS_START_URLS_AS_ZSET", as_zset, priority="cmdline")
        monkeypatch.setattr(project, "get_project_settings", lambda: settings.copy())

    return use


def test_kind_for_every_combination(redis_url: str) -> None:
    for combo, kind in KIND.items():
        assert SeedKey.from_settings(_settings(combo, redis_url), "news").kind == kind
    with pytest.raises(ValueError) as err:
        SeedKey.from_settings(_settings("both", redis_url), "news")
    assert "must not both be set" in str(err.value) and "set the other to False" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["news:start_urls", "{news}:start_urls", "a{b"])
def test_taken_key_shares_the_seed_key_slot(key: str) -> None:
    """Every script on seeds touches only these two keys: one Cluster slot."""
    assert key_slot(taken_key(key).encode()) == key_slot(key.encode())
    assert taken_key("news:start_urls") == "{news:start_urls}:taken"
    assert taken_key("{news}:start_urls") == "{news}:start_urls:taken"


@pytest.mark.parametrize("key", ["a{}b", "x}y", "a{}b{c}"])
def test_a_seed_key_whose_slot_cannot_be_shared_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match=r"REDIS_START_URLS_KEY \(.*\) must have a hash tag"):
        taken_key(key)


@pytest.mark.parametrize("combo", ["neither", "set", "zset"])
def test_take_holds_until_done_and_expired_holds_come_back(
    redis_url: str, redis_client: redis.Redis, combo: str
) -> None:
    key = SeedKey.from_settings(_settings(combo, redis_url, SEED_LEASE_SECONDS=0.2), "news")
    pipe = redis_client.pipeline()
    key.push(pipe, [b"http://e.com/1", b"http://e.com/2", b"http://e.com/3"], [1, 2, 3])
    pipe.execute()
    first = asyncio.run(key.take(redis_client, 2, "node-a"))
    assert len(first.seeds) == 2 and first.reclaimed == 0
    assert asyncio.run(key.count(redis_client)) == (1, 2)
    if combo == "zset":
        assert first.seeds == [b"http://e.com/3", b"http://e.com/2"]  # highest score first
    if combo == "neither":
        assert first.seeds == [b"http://e.com/1", b"http://e.com/2"]
    time.sleep(0.3)  # node-a died: its holds expire (server time)
    second = asyncio.run(key.take(redis_client, 3, "node-b"))
    assert second.reclaimed == 2 and sorted(second.seeds) == [b"http://e.com/1", b"http://e.com/2", b"http://e.com/3"]
    asyncio.run(key.done(redis_client, second.holds))
    assert asyncio.run(key.count(redis_client)) == (0, 0)


def test_zset_seed_keeps_its_score_when_put_back(redis_url: str, redis_client: redis.Redis) -> None:
    key = SeedKey.from_settings(_settings("zset", redis_url, SEED_LEASE_SECONDS=0.05), "news")
    redis_client.zadd(key.key, {"http://e.com/low": 1, "http://e.com/high": 9})
    assert asyncio.run(key.take(redis_client, 1, "n")).seeds == [b"http://e.com/high"]
    time.sleep(0.15)
    again = asyncio.run(key.take(redis_client, 1, "n"))  # put back with score 9: before "low" again
    assert again.reclaimed == 1 and again.seeds == [b"http://e.com/high"]
    assert redis_client.zrange(key.key, 0, -1, withscores=True) == [(b"http://e.com/low", 1.0)]


def test_holds_of_two_takes_of_one_seed_are_distinct(redis_url: str, redis_client: redis.Redis) -> None:
    """The same URL pushed twice and taken by two nodes: one node's ack never drops the other's hold."""
    key = SeedKey.from_settings(_settings("neither", redis_url), "news")
    redis_client.rpush(key.key, "http://e.com/a", "http://e.com/a")
    a, b = (asyncio.run(key.take(redis_client, 1, "n")) for _ in range(2))
    asyncio.run(key.done(redis_client, a.holds))
    assert redis_client.zrange(key.taken, 0, -1) == b.holds


@pytest.mark.parametrize("combo", ["neither", "set", "zset"])
def test_seed_spider_status_and_importer_agree(
    redis_url: str, redis_client: redis.Redis, combo_project: Any, capsys: pytest.CaptureFixture, combo: str
) -> None:
    combo_project(combo)
    assert main(["seed", "news", "http://e.com/a", "--redis-url", redis_url]) == 0
    assert redis_client.type("news:start_urls").decode() == KIND[combo]
    settings = project.project_settings(type("Args", (), {"redis_url": redis_url})())
    assert status_now(redis_client, settings, "news")["seeds"] == 1
    capsys.readouterr()
    assert main(["import-scrapy-redis", "news", "--json", "--redis-url", redis_url]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["start_urls"]["type"] == KIND[combo] and report["start_urls"]["count"] == 1
    assert not [n for n in report["notes"] if "start_urls" in n]
    spider = SeedSpider.from_crawler(get_crawler(SeedSpider, _values(combo, redis_url)))
    taken = asyncio.run(spider.seed_key.take(redis_client, 5, "n"))
    assert taken.seeds == [b"http://e.com/a"]
    assert status_now(redis_client, settings, "news")["seeds_taken"] == 1


def test_conflicting_settings_are_one_line_everywhere(
    redis_url: str, redis_client: redis.Redis, combo_project: Any, capsys: pytest.CaptureFixture
) -> None:
    combo_project("both")
    for args in (["seed", "news", "http://e.com/a"], ["status", "news"], ["import-scrapy-redis", "news"]):
        assert main([*args, "--redis-url", redis_url]) == 1, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "REDIS_START_URLS_AS_SET (True) and REDIS_START_URLS_AS_ZSET" in err, args
    assert redis_client.exists("news:start_urls") == 0
    with pytest.raises(ValueError, match="must not both be set"):
        SeedSpider.from_crawler(get_crawler(SeedSpider, _values("both", redis_url)))


@pytest.mark.e2e
def test_crawl_preflight_refuses_conflicting_seed_types(redis_url: str) -> None:
    proc = crawl_preflight(
        {"REDIS_URL": redis_url}, "-s", "REDIS_START_URLS_AS_SET=1", "-s", "REDIS_START_URLS_AS_ZSET=1"
    )
    assert "REDIS_START_URLS_AS_SET (True) and REDIS_START_URLS_AS_ZSET (True) must not" in one_error_line(proc)


def test_renew_moves_the_deadline_and_never_revives_a_put_back_hold(redis_url: str, redis_client: redis.Redis) -> None:
    key = SeedKey.from_settings(_settings("neither", redis_url, SEED_LEASE_SECONDS=60), "news")
    redis_client.rpush(key.key, "http://e.com/a")
    taken = asyncio.run(key.take(redis_client, 1, "n"))
    before = redis_client.zscore(key.taken, taken.holds[0])
    redis_client.zadd(key.taken, {taken.holds[0]: 0})  # as if its lease had run out
    asyncio.run(key.renew(redis_client, taken.holds))
    assert redis_client.zscore(key.taken, taken.holds[0]) >= before
    redis_client.zadd(key.taken, {taken.holds[0]: 0})
    assert asyncio.run(key.take(redis_client, 1, "other")).reclaimed == 1  # put back, taken again
    asyncio.run(key.renew(redis_client, taken.holds))
    assert redis_client.zscore(key.taken, taken.holds[0]) is None
