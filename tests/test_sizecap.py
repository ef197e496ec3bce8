"""Size caps: a response over a cap is one dead letter `too_large`, never retried (real Redis, no crawl)."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.core.downloader.handlers.http11 import _LenientHTTPClientParser
from scrapy.exceptions import DownloadCancelledError, DownloadFailedError, StopDownload
from scrapy.http import HtmlResponse
from scrapy.utils._download_handlers import get_maxsize_msg
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web._newclient import HTTPClientParser, ResponseFailed
from twisted.web._newclient import Request as TxRequest
from twisted.web.http_headers import Headers

from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.downloadermiddlewares.sizecap import SizeCapMiddleware, TooLarge, over_cap_reason
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.internals import HeadersTooLarge, cap_response_headers
from distributed_crawler.meta import DOWNLOAD_STOP_AT_META, LEASE_META
from tests.test_admission import _drain, _scheduler


def run_middleware(redis_url: str, body: Any, **settings: Any) -> tuple[RedisScheduler, Any]:
    """`body(middleware)` with the node's scheduler reachable (scheduler_of), then its outbox drained."""
    scheduler = _scheduler(redis_url, **settings)
    crawler = scheduler.crawler
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(scheduler=scheduler))
    middleware = SizeCapMiddleware.from_crawler(crawler)

    result = scheduler.runner.run(body(middleware))  # type: ignore[attr-defined]
    _drain(scheduler)
    return scheduler, result


def dead_letters(client: redis.Redis, scheduler: RedisScheduler) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(scheduler.frontier.keys.failed, 0, -1)]


def leased(url: str) -> Request:
    return Request(url, meta={LEASE_META: b"1:0:{}"})


@pytest.fixture(autouse=True)
def _clean(redis_client: redis.Redis) -> None:
    redis_client.flushdb()


def test_a_gzip_bomb_is_refused_while_decompressing_and_dead_lettered_once(
    redis_url: str, redis_client: redis.Redis
) -> None:
    bomb = gzip.compress(b"\0" * (4 * 1024 * 1024))  # 4 MiB of zeros in a few KiB
    request = leased("http://hostile.test/bomb")
    response = HtmlResponse(request.url, body=bomb, headers={"Content-Encoding": "gzip"}, request=request)

    async def body(mw: SizeCapMiddleware) -> None:
        with pytest.raises(TooLarge, match="decompressed"):
            mw.process_response(request, response)

    scheduler, _ = run_middleware(redis_url, body, DOWNLOAD_MAXSIZE=1024 * 1024)
    (letter,) = dead_letters(redis_client, scheduler)
    assert letter["reason"] == "too_large" and letter["url"] == request.url and letter["source"] == "download"
    assert "1048576" in letter["detail"] and payload_url(letter["payload"]) == request.url
    assert scheduler.stats.get_value("dc/refused/too_large") == 1


def test_a_small_gzip_page_is_decoded_as_scrapy_does(redis_url: str, redis_client: redis.Redis) -> None:
    request = leased("http://hostile.test/ok")
    html = b"<html><body>" + b"news " * 1000 + b"</body></html>"
    response = HtmlResponse(request.url, body=gzip.compress(html), headers={"Content-Encoding": "gzip"})

    async def body(mw: SizeCapMiddleware) -> Any:
        return mw.process_response(request, response)

    scheduler, decoded = run_middleware(redis_url, body, DOWNLOAD_MAXSIZE=1024 * 1024)
    assert decoded.body == html and dead_letters(redis_client, scheduler) == []


def test_a_body_no_handler_capped_is_refused_here(redis_url: str, redis_client: redis.Redis) -> None:
    request = leased("http://hostile.test/rendered")
    response = HtmlResponse(request.url, body=b"x" * 5000, request=request)

    async def body(mw: SizeCapMiddleware) -> None:
        with pytest.raises(TooLarge, match="5000 bytes"):
            mw.process_response(request, response)

    scheduler, _ = run_middleware(redis_url, body, DOWNLOAD_MAXSIZE=4096)
    assert [letter["reason"] for letter in dead_letters(redis_client, scheduler)] == ["too_large"]


def test_handler_refusals_are_too_large_and_other_errors_are_not(redis_url: str, redis_client: redis.Redis) -> None:
    request = leased("http://hostile.test/huge")
    cancelled = DownloadCancelledError(get_maxsize_msg(10**9, 4096, request, expected=True))
    headers = DownloadFailedError("[<twisted.python.failure.Failure ...>]")
    headers.__cause__ = ResponseFailed([Failure(HeadersTooLarge("more than 200 header lines"))])
    assert over_cap_reason(cancelled).startswith("body: Expected to receive 1000000000 bytes")
    assert over_cap_reason(headers) == "headers: more than 200 header lines"
    assert over_cap_reason(DownloadCancelledError("cancelled")) is None
    assert over_cap_reason(DownloadFailedError("connection lost")) is None

    streamed = leased("http://hostile.test/stream")

    async def body(mw: SizeCapMiddleware) -> None:
        mw._bytes_received(b"x" * 3000, streamed)
        retry = streamed.copy()  # a retry or redirect copies meta
        mw.process_request(retry)
        mw._bytes_received(b"x" * 3000, retry)
        assert mw.process_exception(retry, DownloadCancelledError("")) is None  # 3000 bytes this attempt
        mw._bytes_received(b"x" * 5000, streamed)  # cut while streaming: an empty CancelledError
        with pytest.raises(TooLarge, match="8000 bytes received, over 4096"):
            mw.process_exception(streamed, DownloadCancelledError(""))
        for exc in (cancelled, headers):
            with pytest.raises(TooLarge):
                mw.process_exception(request, exc)
        assert mw.process_exception(request, DownloadFailedError("connection lost")) is None

    scheduler, _ = run_middleware(redis_url, body, DOWNLOAD_MAXSIZE=4096)
    assert [letter["reason"] for letter in dead_letters(redis_client, scheduler)] == ["too_large"] * 3


def test_an_unscheduled_request_is_refused_without_a_dead_letter(redis_url: str, redis_client: redis.Redis) -> None:
    request = Request("http://hostile.test/robots.txt")  # engine.download(): no lease, nothing to requeue

    async def body(mw: SizeCapMiddleware) -> None:
        with pytest.raises(TooLarge):
            mw.process_response(request, HtmlResponse(request.url, body=b"x" * 5000))

    scheduler, _ = run_middleware(redis_url, body, DOWNLOAD_MAXSIZE=4096)
    assert dead_letters(redis_client, scheduler) == [] and scheduler.stats.get_value("dc/refused/too_large") == 1


def test_download_stop_at_stops_after_that_many_bytes(redis_url: str) -> None:
    request = Request("http://hostile.test/robots.txt", meta={DOWNLOAD_STOP_AT_META: 1000})

    async def body(mw: SizeCapMiddleware) -> None:
        mw._bytes_received(b"a" * 600, request)
        with pytest.raises(StopDownload):
            mw._bytes_received(b"a" * 600, request)
        mw._bytes_received(b"a" * 10**6, Request("http://hostile.test/page"))  # no stop_at: never stopped

    run_middleware(redis_url, body)


def _parse(data: bytes, cls: type = HTTPClientParser) -> HTTPClientParser:
    parser = cls(TxRequest(b"GET", b"/", Headers(), None), lambda rest: None)
    parser.makeConnection(StringTransport())
    parser.dataReceived(data)
    return parser


@pytest.mark.parametrize(
    "headers",
    [
        b"".join(b"X-%d: v\r\n" % i for i in range(300)),  # too many lines
        b"X-Long: start\r\n" + b" continued 123456789\r\n" * 5000,  # one endless folded header
    ],
    ids=["count", "bytes"],
)
@pytest.mark.parametrize("cls", [HTTPClientParser, _LenientHTTPClientParser], ids=["twisted", "scrapy"])
def test_response_headers_are_capped_while_parsed(headers: bytes, cls: type) -> None:
    cap_response_headers(200, 64 * 1024)
    with pytest.raises(HeadersTooLarge):
        _parse(b"HTTP/1.1 200 OK\r\n" + headers, cls)
    parser = _parse(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(150)) + b"\r\n", cls)
    assert parser.response.headers.getRawHeaders(b"x-149") == [b"v"]  # a normal response parses on


def test_the_caps_hold_with_compression_off(redis_url: str, redis_client: redis.Redis) -> None:
    request = leased("http://hostile.test/plain")
    gzipped = HtmlResponse(request.url, body=gzip.compress(b"x" * 100), headers={"Content-Encoding": "gzip"})

    async def body(mw: SizeCapMiddleware) -> Any:
        with pytest.raises(TooLarge):
            mw.process_response(request, HtmlResponse(request.url, body=b"x" * 5000, request=request))
        assert mw.process_request(Request("http://hostile.test/")) is None
        return mw.process_response(request, gzipped)

    scheduler, kept = run_middleware(redis_url, body, DOWNLOAD_MAXSIZE=4096, COMPRESSION_ENABLED=False)
    assert kept is gzipped  # not decoded, as COMPRESSION_ENABLED = False asks
    assert [letter["reason"] for letter in dead_letters(redis_client, scheduler)] == ["too_large"]
