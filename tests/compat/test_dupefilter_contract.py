"""scrapy-redis's dupefilter contract (its tests/test_dupefilter.py and DupeFilterTest), on ours.

Differences on purpose: our default fingerprint is canonical (drops `utm_*`, `gclid`, fragments,
sorts the query: dedup/fingerprint.py), so two URLs scrapy-redis tells apart may be one page here;
`close()` clears only when `SCHEDULER_PERSIST` is False (scrapy-redis's always clears, and its
scheduler never calls it), because our scheduler closes the filter on every node.
"""

from __future__ import annotations

import hashlib
from unittest import mock

import redis
from scrapy import Request
from scrapy.utils.test import get_crawler

from distributed_crawler.dedup.dupefilter import BloomDupeFilter, RedisSetDupeFilter
from distributed_crawler.redis_spider import RedisSpider

KEY = "compat:dupefilter"


class Spider(RedisSpider):
    name = "dfspider"


def test_request_seen_by_method_and_url(redis_client: redis.Redis) -> None:
    for cls in (BloomDupeFilter, RedisSetDupeFilter):
        df = cls(redis_client, KEY)
        req = Request("http://example.com")
        assert not df.request_seen(req)
        assert df.request_seen(req)
        assert not df.request_seen(Request("http://example.com", method="POST"))
        assert not df.request_seen(Request("http://example2.com"))
        assert df.request_seen(Request("http://example.com/?utm_source=x#top"))  # canonical: the same page
        df.clear()


def test_overridable_request_fingerprint(redis_client: redis.Redis) -> None:
    df = BloomDupeFilter(redis_client, KEY)
    df.request_fingerprint = mock.Mock(wraps=df.request_fingerprint)
    req = Request("http://example.com")
    assert not df.request_seen(req)
    df.request_fingerprint.assert_called_with(req)


class ByPathOnly(BloomDupeFilter):
    """A project's own fingerprint (any string; non-hex ones are hashed for the Bloom scripts)."""

    def request_fingerprint(self, request: Request) -> str:
        return request.url.split("?")[0]


def test_overridden_fingerprint_drives_dedup(redis_client: redis.Redis) -> None:
    df = ByPathOnly(redis_client, KEY)
    assert not df.request_seen(Request("http://e.com/a?x=1"))
    assert df.request_seen(Request("http://e.com/a?x=2"))
    assert df.fingerprint_hex(Request("http://e.com/a")) == hashlib.sha1(b"http://e.com/a").hexdigest()


def test_clear_deletes_the_filter(redis_client: redis.Redis) -> None:
    df = BloomDupeFilter(redis_client, KEY)
    df.request_seen(Request("http://example.com"))
    assert redis_client.exists(KEY)
    df.clear()
    assert not redis_client.exists(KEY)
    assert not df.request_seen(Request("http://example.com"))


def test_close_clears_only_when_not_persisting(redis_client: redis.Redis) -> None:
    keeping = BloomDupeFilter(redis_client, KEY)
    keeping.request_seen(Request("http://example.com"))
    keeping.close("finished")
    assert redis_client.exists(KEY)
    flushing = BloomDupeFilter(redis_client, KEY, persist=False)
    flushing.clear = mock.Mock(wraps=flushing.clear)
    flushing.close()
    flushing.close(reason="shutdown")
    assert flushing.clear.call_count == 2
    assert not redis_client.exists(KEY)


def test_from_crawler_reads_persist_and_debug(redis_url: str) -> None:
    crawler = get_crawler(
        Spider,
        {"REDIS_URL": redis_url, "SCHEDULER_PERSIST": False, "DUPEFILTER_DEBUG": True},
    )
    crawler.spider = crawler._create_spider()
    df = BloomDupeFilter.from_crawler(crawler)
    assert (df.persist, df.debug, df.key) == (False, True, "{dfspider}:dupefilter")


def test_log_dupes_once_unless_debug(redis_client: redis.Redis) -> None:
    for debug, expected in ((False, 1), (True, 5)):
        df = BloomDupeFilter(redis_client, KEY, debug=debug)
        with mock.patch("distributed_crawler.dedup.dupefilter.logger") as log:
            for _ in range(5):
                df.log(Request("http://example"), spider=mock.Mock())
        assert log.debug.call_count == expected
