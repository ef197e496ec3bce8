"""The recrawl middlewares against a real redis-server, without a crawl: conditional
headers from the stored validators, a 304 dropped before the spider and recorded as unchanged,
the digest of the items' text deciding "changed", the compact request stored for the revisit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Response
from scrapy.utils.test import get_crawler

from distributed_crawler.core.context import RedisContext
from distributed_crawler.frontier.codec import RequestCodec, read_payload
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.meta import RECRAWL_TICKET_META
from distributed_crawler.recrawl.middleware import RecrawlMiddleware
from distributed_crawler.recrawl.node import RecrawlNode
from distributed_crawler.recrawl.schedule import parse_state
from distributed_crawler.recrawl.spidermiddleware import RecrawlSpiderMiddleware
from distributed_crawler.storage.digest import content_digest

SECTION = "http://s.test/section/a"
STATE_KEY = "{news}:recrawl:state"


class NewsSpider(Spider):
    name = "news"

    def parse(self, response: Response, **kwargs: Any) -> Any:
        return None


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def node(redis_url: str) -> RecrawlNode:
    crawler = get_crawler(NewsSpider, {"REDIS_URL": redis_url, "RECRAWL_RULES": {"/section/": [10, 40]}})
    crawler.spider = crawler._create_spider()
    return RecrawlNode.of(crawler)


def state(client: redis.Redis, node: RecrawlNode, url: str) -> Any:
    return parse_state(client.hget(STATE_KEY, node.fingerprint(Request(url))))


async def fetch(node: RecrawlNode, url: str, status: int, body: str = "", etag: str = "") -> tuple[Request, list]:
    """One delivery through both middlewares: process_request, then the response (or IgnoreRequest)."""
    downloader, spider_mw = RecrawlMiddleware(node), RecrawlSpiderMiddleware(node)
    request = Request(url)
    await downloader.process_request(request)
    headers = {"ETag": etag} if etag else {}
    response = HtmlResponse(url, status=status, body=body.encode(), headers=headers, request=request)
    response = await downloader.process_response(request, response)

    async def items() -> AsyncIterator[Any]:
        yield {"url": url, "text": body}

    out = [x async for x in spider_mw.process_spider_output(response, items())]
    return request, out


def test_conditional_requests_304_and_change_detection(node: RecrawlNode, redis_client: redis.Redis) -> None:
    async def main() -> None:
        first, out = await fetch(node, SECTION, 200, "news one", etag='"v1"')
        assert b"If-None-Match" not in first.headers and not first.meta[RECRAWL_TICKET_META].conditional
        assert out == [{"url": SECTION, "text": "news one", "content_hash": content_digest("news one")}]
        s = state(redis_client, node, SECTION)
        assert (s.interval, s.etag, s.digest) == (10, '"v1"', content_digest("news one"))

        # the next visit sends the validator; a 304 never reaches the spider and grows the interval
        with pytest.raises(IgnoreRequest, match="not modified"):
            await fetch(node, SECTION, 304)
        assert state(redis_client, node, SECTION).interval == 20
        second, _ = await fetch(node, SECTION, 200, "news  one ", etag='"v2"')  # same text, new markup
        assert second.headers[b"If-None-Match"] == b'"v1"'
        assert state(redis_client, node, SECTION).interval == 40  # unchanged: x2 up to max
        await fetch(node, SECTION, 200, "news two", etag='"v3"')
        s = state(redis_client, node, SECTION)
        assert (s.interval, s.etag) == (20, '"v3"')  # changed: / 2
        await fetch(node, SECTION, 503)
        assert state(redis_client, node, SECTION).interval == 20  # an error keeps it
        await RedisContext.of(node.crawler).aclose()

    run(main())
    assert node.stats.get_value("recrawl/not_modified") == 1
    assert node.stats.get_value("recrawl/conditional") == 4


def test_urls_without_a_rule_are_left_alone(node: RecrawlNode, redis_client: redis.Redis) -> None:
    async def main() -> None:
        request, out = await fetch(node, "http://s.test/article/1", 200, "story", etag='"a"')
        assert RECRAWL_TICKET_META not in request.meta
        assert out[0]["content_hash"] == content_digest("story")  # every item gets its content_hash
        await RedisContext.of(node.crawler).aclose()

    run(main())
    assert redis_client.hlen(STATE_KEY) == 0


def test_the_stored_revisit_is_compact_and_decodes_to_the_request(node: RecrawlNode) -> None:
    request = Request(
        SECTION,
        meta={"depth": 2, "redirect_urls": ["http://s.test/old"], "retry_times": 1, "render": True},
        headers={"If-None-Match": '"x"', "User-Agent": "ua", "X-Custom": "kept"},
        priority=5,
    )
    member = node.member(request)
    envelope = split_member(member)
    assert envelope.priority == 5 and envelope.deliveries == 0
    payload = read_payload(envelope.payload)
    assert "id" not in payload and "method" not in payload and payload["again"] == 1
    assert envelope.payload.endswith(',"again":1}')  # where host_pop.lua looks for it
    decoded = RequestCodec(node.crawler.spider).decode(envelope.payload)
    assert (decoded.url, decoded.priority, decoded.meta) == (SECTION, 5, {"depth": 2, "render": True})
    assert dict(decoded.headers) == {b"X-Custom": [b"kept"]}
