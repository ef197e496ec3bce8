"""What pickle carried in scrapy-redis's queue, carried by our JSON codec (frontier/codec.py).

scrapy-redis pickles `request_to_dict(request, spider)`, so CrawlSpider's rule requests (callback
`_callback`, errback `_errback`) and any meta value round-trip there. We carry the same requests
as JSON: Scrapy's own private callbacks are allow-listed by spider class, meta/cb_kwargs values of
the usual types travel tagged, and anything else is still refused (never pickle: a payload in
Redis may come from anyone).
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json

import pytest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule, SitemapSpider

from distributed_crawler.frontier.codec import PayloadError, RequestCodec, UnserializableRequestError, read_payload


class RulesSpider(CrawlSpider):
    name = "rules"
    rules = (
        Rule(LinkExtractor(allow=r"/article/"), callback="parse_page", cb_kwargs={"kind": "article"}),
        Rule(LinkExtractor(allow=r"/list"), follow=True, process_links="keep_links", errback="on_error"),
    )

    def parse_page(self, response, kind):
        return {"url": response.url, "kind": kind}

    def keep_links(self, links):
        return links

    def on_error(self, failure):
        return None

    def _helper(self, response):
        return None


class PlainSpider(Spider):
    name = "plain"

    def _callback(self, response):  # same name as CrawlSpider's, but this is not a CrawlSpider
        return None


class MapSpider(SitemapSpider):
    name = "map"
    sitemap_urls = ["http://e.com/sitemap.xml"]


def _followed(spider: CrawlSpider) -> list[Request]:
    body = b'<a href="/article/1">one</a><a href="/list?page=2">two</a><a href="/about">no rule</a>'
    response = HtmlResponse("http://e.com/", body=body, request=Request("http://e.com/"))
    spider._compile_rules()
    return [r for r in spider._requests_to_follow(response) if r is not None]


def test_crawlspider_rule_requests_round_trip_with_their_rule() -> None:
    spider = RulesSpider()
    codec = RequestCodec(spider)
    followed = _followed(spider)
    assert [r.url for r in followed] == ["http://e.com/article/1", "http://e.com/list?page=2"]
    for request in followed:
        decoded = codec.decode(codec.encode(request))
        assert decoded.callback == spider._callback and decoded.errback == spider._errback
        assert decoded.meta["rule"] == request.meta["rule"] and decoded.meta["link_text"] == request.meta["link_text"]
    # the decoded request still reaches the rule's own callback with the rule's cb_kwargs
    article = codec.decode(codec.encode(followed[0]))
    response = HtmlResponse(article.url, body=b"<title>x</title>", request=article)
    assert asyncio.run(_collect(article.callback(response, **article.cb_kwargs))) == [
        {"url": "http://e.com/article/1", "kind": "article"}
    ]


async def _collect(results) -> list:
    return [r async for r in results]


def test_sitemap_spider_callback_round_trips() -> None:
    spider = MapSpider()
    codec = RequestCodec(spider)
    decoded = codec.decode(codec.encode(Request("http://e.com/sitemap.xml", callback=spider._parse_sitemap)))
    assert decoded.callback == spider._parse_sitemap


def test_other_private_methods_stay_refused_both_ways() -> None:
    spider = RulesSpider()
    codec = RequestCodec(spider)
    with pytest.raises(UnserializableRequestError, match="private method") as refused:
        codec.encode(Request("http://e.com/", callback=spider._helper))
    assert refused.value.kind == "callback"
    payload = codec.encode(Request("http://e.com/", callback=spider.parse_page))
    for name in ("_helper", "__init__", "_parse_response", "_compile_rules"):
        with pytest.raises(PayloadError) as bad:
            codec.decode(payload.replace('"callback":"parse_page"', f'"callback":"{name}"'))
        assert bad.value.kind == "callback"


def test_framework_callbacks_are_allowed_only_for_their_spider_class() -> None:
    plain = PlainSpider()
    codec = RequestCodec(plain)
    with pytest.raises(UnserializableRequestError, match="private method"):
        codec.encode(Request("http://e.com/", callback=plain._callback))
    payload = codec.encode(Request("http://e.com/"))
    with pytest.raises(PayloadError, match="not a public spider method"):
        codec.decode(payload.replace('"callback":null', '"callback":"_callback"'))


MEANINGFUL = {
    "when": datetime.datetime(2026, 12, 3, 9, 30, 15, 123456, tzinfo=datetime.UTC),
    "naive": datetime.datetime(2026, 12, 3, 9, 30),
    "day": datetime.date(2026, 12, 3),
    "raw": b"\x00\xff\x80binary",
    "price": decimal.Decimal("19.90"),
    "pair": (1, "two"),
    "nested": {"tags": {"a", "b"}, "frozen": frozenset({3}), "deep": [(1, (2, b"3"))]},
}


def test_meta_and_cb_kwargs_keep_their_types() -> None:
    spider = RulesSpider()
    codec = RequestCodec(spider)
    request = Request("http://e.com/", callback=spider.parse_page, meta=dict(MEANINGFUL), cb_kwargs=dict(MEANINGFUL))
    decoded = codec.decode(codec.encode(request))
    for value in (decoded.meta, decoded.cb_kwargs):
        for key, expected in MEANINGFUL.items():
            assert value[key] == expected and type(value[key]) is type(expected), key
    assert type(decoded.meta["nested"]["deep"][0][1]) is tuple


@pytest.mark.parametrize(
    "value, shown",
    [(object(), "object"), (lambda: 1, "function"), (Spider("x"), "Spider"), ({1: "int key"}, "key must be a string")],
)
def test_arbitrary_objects_are_still_refused(value, shown: str) -> None:
    codec = RequestCodec(RulesSpider())
    with pytest.raises(UnserializableRequestError, match=shown):
        codec.encode(Request("http://e.com/", meta={"v": value}))


@pytest.mark.parametrize(
    "tagged",
    [
        {"__dc_type__": "pickle", "value": "gASV"},
        {"__dc_type__": "bytes", "value": "not base64!"},
        {"__dc_type__": "datetime", "value": "yesterday"},
        {"__dc_type__": "datetime", "value": "2026-01-01" + "0" * 200},
        {"__dc_type__": "decimal", "value": "12,5"},
        {"__dc_type__": "tuple", "items": "abc"},
        {"__dc_type__": "set", "items": [[1], [2]]},
    ],
)
def test_forged_or_malformed_tags_are_payload_errors(tagged: dict) -> None:
    codec = RequestCodec(RulesSpider())
    payload = {"v": 1, **read_payload(codec.encode(Request("http://e.com/")))}
    payload["meta"] = {"v": tagged}
    with pytest.raises(PayloadError):
        codec.decode(json.dumps(payload))
    payload["meta"], payload["cb_kwargs"] = {}, {"v": tagged}
    with pytest.raises(PayloadError):
        codec.decode(json.dumps(payload))
