"""Which spider methods a queued request may name as its callback or errback.

A payload in Redis may come from anyone, so a callback name is looked up on the spider only if it
is a public method, or one of the few private methods Scrapy's own spider classes use as callbacks
for the requests they build themselves (CrawlSpider's rule-following requests call `_callback` /
`_errback`; SitemapSpider's sitemap requests call `_parse_sitemap`). Any other private name
(`_private`, `__init__`, a mangled `__name`) is refused, by name and only for spiders of that class.
"""

from __future__ import annotations

from typing import Any

from scrapy.spiders import CrawlSpider, SitemapSpider

# Scrapy spider class -> private methods it passes as callback/errback of requests it builds.
FRAMEWORK_CALLBACKS: tuple[tuple[type, frozenset[str]], ...] = (
    (CrawlSpider, frozenset({"_callback", "_errback"})),
    (SitemapSpider, frozenset({"_parse_sitemap"})),
)


def framework_callbacks(spider: Any) -> frozenset[str]:
    """The private callback names Scrapy's own base classes of `spider` use."""
    names: frozenset[str] = frozenset()
    for cls, allowed in FRAMEWORK_CALLBACKS:
        if isinstance(spider, cls):
            names |= allowed
    return names


def callback_allowed(spider: Any, name: str) -> bool:
    """A public name, or a private one of Scrapy's own spider classes that `spider` extends."""
    return bool(name) and (not name.startswith("_") or name in framework_callbacks(spider))
