"""A bounded cookie jar: Scrapy's CookiesMiddleware keeps every cookie of every host for ever.

A long-running news node visits hundreds of thousands of hosts, and one host can set thousands of
cookies (a trap, or a tracker per page). This subclass (in place of Scrapy's, same order 700,
same meta keys `cookiejar` and `dont_merge_cookies`) keeps, in each jar, at most
`COOKIES_MAX_PER_HOST` cookies per cookie domain (the oldest stored go first) and at most
`COOKIES_MAX_HOSTS` domains (the least recently set go first, all their cookies with them).
0 turns either bound off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.exceptions import NotConfigured

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.internals import cookies_by_domain

if TYPE_CHECKING:
    from http.cookiejar import Cookie

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http.cookies import CookieJar


@dataclass(frozen=True)
class CookieBounds:
    per_host: int = 50
    hosts: int = 1000

    @classmethod
    def from_settings(cls, settings: Any) -> CookieBounds:
        read = SettingsReader(settings)
        return cls(
            per_host=read.int("COOKIES_MAX_PER_HOST", min=0, hint="(0 = no limit)"),
            hosts=read.int("COOKIES_MAX_HOSTS", min=0, hint="(0 = no limit)"),
        )


class BoundedCookiesMiddleware(CookiesMiddleware):
    """CookiesMiddleware whose jars stay bounded (see the module docstring)."""

    def __init__(self, debug: bool = False, bounds: CookieBounds | None = None) -> None:
        super().__init__(debug)
        self.bounds = bounds or CookieBounds()
        self._domains: dict[int, OrderedDict[str, None]] = {}  # id(jar) -> its domains, least recently set first

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BoundedCookiesMiddleware:
        if not crawler.settings.getbool("COOKIES_ENABLED"):
            raise NotConfigured
        middleware = cls(crawler.settings.getbool("COOKIES_DEBUG"), CookieBounds.from_settings(crawler.settings))
        middleware.crawler = crawler
        return middleware

    def _process_cookies(self, cookies: Iterable[Cookie], *, jar: CookieJar, request: Request) -> None:
        cookies = list(cookies)
        super()._process_cookies(cookies, jar=jar, request=request)
        if cookies:
            self._bound(jar, {cookie.domain for cookie in cookies})

    def _bound(self, jar: CookieJar, touched: set[str]) -> None:
        stored = cookies_by_domain(jar)
        order = self._domains.setdefault(id(jar), OrderedDict())
        dropped = 0
        for domain in touched:
            paths = stored.get(domain)
            if not paths:
                continue
            order[domain] = None
            order.move_to_end(domain)
            if not self.bounds.per_host:
                continue
            excess = sum(len(names) for names in paths.values()) - self.bounds.per_host
            for path, names in list(paths.items()):  # oldest first: dicts keep insertion order
                for name in list(names)[: max(0, excess)]:
                    jar.clear(domain, path, name)
                    excess -= 1
                    dropped += 1
        while self.bounds.hosts and len(order) > self.bounds.hosts:
            domain, _ = order.popitem(last=False)
            if domain in stored:
                dropped += sum(len(names) for names in stored[domain].values())
                jar.clear(domain)
        if dropped:
            self.crawler.stats.inc_value("cookies/dropped", dropped)
