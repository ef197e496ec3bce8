"""BoundedCookiesMiddleware: a jar keeps at most COOKIES_MAX_PER_HOST cookies per domain (oldest out
first) and COOKIES_MAX_HOSTS domains (least recently set out first); Scrapy's keeps everything."""

from __future__ import annotations

from scrapy import Request, Spider
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from distributed_crawler.downloadermiddlewares.cookies import BoundedCookiesMiddleware


def _middleware(cls: type, **settings: object) -> CookiesMiddleware:
    crawler = get_crawler(Spider, {"ADDONS": {"distributed_crawler.Addon": 0}, **settings})
    crawler.stats.open_spider()
    return cls.from_crawler(crawler)


def _set_cookies(mw: CookiesMiddleware, host: str, names: range, jar: str | None = None) -> None:
    request = Request(f"http://{host}/", meta={"cookiejar": jar} if jar else {})
    headers = [("Set-Cookie", f"c{i}=v{i}; Path=/") for i in names]
    mw.process_response(request, Response(request.url, headers=headers, request=request))


def _names(mw: CookiesMiddleware, host: str, jar: str | None = None) -> list[str]:
    return sorted((c.name for c in mw.jars[jar] if c.domain == host), key=lambda n: int(n[1:]))


def test_cookies_per_host_are_capped_oldest_first() -> None:
    mw = _middleware(BoundedCookiesMiddleware, COOKIES_MAX_PER_HOST=5)
    _set_cookies(mw, "trap.example.com", range(8))
    _set_cookies(mw, "trap.example.com", range(8, 10))
    assert _names(mw, "trap.example.com") == ["c5", "c6", "c7", "c8", "c9"]
    assert mw.crawler.stats.get_value("cookies/dropped") == 5
    request = Request("http://trap.example.com/page")
    mw.process_request(request)
    assert request.headers.get("Cookie").count(b"=") == 5  # what is kept is still sent


def test_hosts_per_jar_are_capped_least_recently_set_first() -> None:
    mw = _middleware(BoundedCookiesMiddleware, COOKIES_MAX_HOSTS=3)
    for host in ("a.test", "b.test", "c.test"):
        _set_cookies(mw, host, range(2))
    _set_cookies(mw, "a.test", range(2, 3))  # a.test set again: now the most recent
    _set_cookies(mw, "d.test", range(1))
    assert {c.domain for c in mw.jars[None]} == {"a.test", "c.test", "d.test"}
    _set_cookies(mw, "e.test", range(1), jar="session-2")  # another jar has its own bound
    assert {c.domain for c in mw.jars["session-2"]} == {"e.test"} and len(list(mw.jars[None])) == 3 + 2 + 1


def test_scrapy_keeps_every_cookie() -> None:
    """The upstream behaviour the bound fixes; if this fails, Scrapy bounds its jars itself."""
    mw = _middleware(CookiesMiddleware)
    _set_cookies(mw, "trap.example.com", range(500))
    assert len(_names(mw, "trap.example.com")) == 500


def test_zero_means_no_limit() -> None:
    mw = _middleware(BoundedCookiesMiddleware, COOKIES_MAX_PER_HOST=0, COOKIES_MAX_HOSTS=0)
    _set_cookies(mw, "trap.example.com", range(200))
    assert len(_names(mw, "trap.example.com")) == 200
