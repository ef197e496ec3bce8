"""scrapy-redis's spider contract (its tests/test_spiders.py), on our RedisSpider / RedisCrawlSpider.

Differences on purpose, named here: seeds are read by a long-lived `start()` (Scrapy 2.13+), not
on `spider_idle` (so no `spider_idle` handler is connected, and `start_requests()` is not ours);
`max_idle_time` accepts fractions of a second; a seed that is not an http(s) URL is rejected
(dead-lettered with its reason) instead of becoming a request that fails in the downloader.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
from scrapy import FormRequest, Request
from scrapy.utils.test import get_crawler

from distributed_crawler.redis_spider import RedisCrawlSpider, RedisSpider


class MySpider(RedisSpider):
    name = "myspider"


class MyCrawlSpider(RedisCrawlSpider):
    name = "myspider"


class ManySpider(RedisSpider):
    """make_request_from_data may return several requests (scrapy-redis iterates them) or none."""

    name = "many"

    def make_request_from_data(self, data):
        text = data.decode()
        if text == "skip":
            return []
        return [Request(f"http://e.com/{text}/{i}", dont_filter=True) for i in range(3)]


def _crawler(spidercls=MySpider, redis_url: str = "redis://127.0.0.1:6379/0", **settings):
    return get_crawler(spidercls, {"REDIS_URL": redis_url, **settings})


class TestSetupRedis:
    def test_crawler_required(self) -> None:
        with pytest.raises(ValueError, match="crawler"):
            MySpider().setup_redis()

    def test_requires_redis_key(self) -> None:
        spider = MySpider()
        spider.crawler = _crawler()
        spider.redis_key = ""
        with pytest.raises(ValueError, match="redis_key"):
            spider.setup_redis()

    @pytest.mark.parametrize("value", ["x", None.__class__, "1.5"])
    def test_invalid_batch_size(self, value) -> None:
        spider = MySpider()
        spider.crawler = _crawler()
        spider.redis_batch_size = value
        with pytest.raises(ValueError, match="redis_batch_size"):
            spider.setup_redis()

    def test_batch_size_below_one(self) -> None:
        spider = MySpider()
        spider.crawler = _crawler()
        spider.redis_batch_size = 0
        with pytest.raises(ValueError, match="redis_batch_size"):
            spider.setup_redis()

    @pytest.mark.parametrize("value", ["x", "-1"])
    def test_invalid_idle_time(self, value) -> None:
        spider = MySpider()
        spider.crawler = _crawler()
        spider.max_idle_time = value
        with pytest.raises(ValueError, match="max_idle_time"):
            spider.setup_redis()

    def test_via_from_crawler_sets_server_once(self) -> None:
        crawler = _crawler()
        spider = MySpider.from_crawler(crawler)
        assert isinstance(spider.server, redis.Redis)
        server = spider.server
        spider.setup_redis()  # a second call does nothing
        assert spider.server is server

    def test_server_uses_redis_cls_from_params(self) -> None:
        crawler = _crawler(REDIS_PARAMS={"redis_cls": MyRedis})
        assert isinstance(MySpider.from_crawler(crawler).server, MyRedis)


class MyRedis(redis.Redis):
    pass


@pytest.mark.parametrize("spider_cls", [MySpider, MyCrawlSpider])
def test_spider_arguments_are_coerced(spider_cls) -> None:
    spider = spider_cls.from_crawler(
        _crawler(spider_cls), "foo", redis_key="key:%(name)s", redis_batch_size="2000", max_idle_time="100"
    )
    assert spider.name == "foo"
    assert spider.redis_key == "key:foo"
    assert spider.redis_batch_size == 2000
    assert spider.max_idle_time == 100


def test_batch_size_defaults_to_concurrent_requests() -> None:
    assert MySpider.from_crawler(_crawler(CONCURRENT_REQUESTS=7)).redis_batch_size == 7


def test_scrapy_redis_readme_seed_is_a_form_request() -> None:
    spider = MySpider.from_crawler(_crawler())
    seed = {
        "url": "https://example.com",
        "meta": {"job-id": "123xsd", "start-date": "dd/mm/yy"},
        "url_cookie_key": "fertxsas",
        "method": "POST",
    }
    request = spider.make_request_from_data(json.dumps(seed).encode())
    assert isinstance(request, FormRequest)
    assert (request.method, request.body, request.dont_filter) == ("POST", b"url_cookie_key=fertxsas", True)
    assert request.meta["job-id"] == "123xsd"
    get = spider.make_request_from_data(b'{"url": "https://example.com/s", "q": "news", "page": 2}')
    assert get.method == "GET" and get.url == "https://example.com/s?q=news&page=2"
    plain = spider.make_request_from_data(b"https://example.com/plain")
    assert type(plain) is Request and plain.url == "https://example.com/plain" and plain.dont_filter


def _take(spider, count: int, timeout: float = 20.0) -> list[Request]:
    """The first `count` requests `start()` yields (bounded)."""

    async def run() -> list[Request]:
        got: list[Request] = []
        agen = spider.start()
        try:
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                got.append(await asyncio.wait_for(agen.__anext__(), max(0.1, deadline - time.monotonic())))
        finally:
            await agen.aclose()
        return got

    return asyncio.run(run())


@pytest.mark.parametrize("spider_cls", [MySpider, MyCrawlSpider])
@pytest.mark.parametrize("as_set, as_zset", [(False, False), (True, False), (False, True)])
def test_consume_urls_from_redis(redis_url: str, redis_client: redis.Redis, spider_cls, as_set, as_zset) -> None:
    crawler = _crawler(
        spider_cls,
        redis_url,
        REDIS_START_URLS_KEY="start:urls",
        REDIS_START_URLS_AS_SET=as_set,
        REDIS_START_URLS_AS_ZSET=as_zset,
        CONCURRENT_REQUESTS=5,
        MAX_IDLE_TIME_BEFORE_CLOSE=0,
    )
    spider = spider_cls.from_crawler(crawler)
    urls = [f"http://example.com/{i}" for i in range(10)]
    for i, url in enumerate(urls):
        if as_set:
            redis_client.sadd("start:urls", url)
        elif as_zset:
            redis_client.zadd("start:urls", {url: i})
        else:
            redis_client.rpush("start:urls", url)
    got = [r.url for r in _take(spider, 10)]
    if as_set:
        assert sorted(got) == sorted(urls)
    elif as_zset:
        assert got == urls[::-1]  # highest score first
    else:
        assert got == urls
    assert redis_client.exists("start:urls") == 0


def test_both_as_set_and_as_zset_is_refused(redis_url: str) -> None:
    """scrapy-redis reads a set then (it checks AS_SET first) while a pusher may write a sorted set:
    seeds never read. Here the spider does not start, naming the fix (docs/migrating-from-scrapy-redis.md §4)."""
    crawler = _crawler(MySpider, redis_url, REDIS_START_URLS_AS_SET=True, REDIS_START_URLS_AS_ZSET=True)
    with pytest.raises(ValueError, match="must not both be set; .* set the other to False"):
        MySpider.from_crawler(crawler)


def test_several_or_no_requests_from_one_seed(redis_url: str, redis_client: redis.Redis) -> None:
    spider = ManySpider.from_crawler(_crawler(ManySpider, redis_url, MAX_IDLE_TIME_BEFORE_CLOSE=0))
    redis_client.rpush("many:start_urls", "a", "skip", "b")
    got = [r.url for r in _take(spider, 6)]
    assert got == [f"http://e.com/{s}/{i}" for s in "ab" for i in range(3)]
    assert redis_client.llen("{many}:failed") == 0
