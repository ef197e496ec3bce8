"""`news`: follows same-site links from its seeds and stores every page once (docs/architecture.md §8).

A rendered page's `text` includes the visible text of all its frames (`response.meta["frames"]`,
rendering.py). With `IFRAME_FOLLOW_STATIC = True`, a page that was not rendered has its same-site
`<iframe src>` fetched as plain requests too, each stored as a page of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from scrapy.http import Response, TextResponse

from demo.items import PageItem
from distributed_crawler.rendering.frames import frames_text, static_iframe_urls
from distributed_crawler.spiders.redis_spider import RedisSpider

_SPACES = re.compile(r"\s+")
VISIBLE_TEXT = "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]"


def visible_text(response: TextResponse) -> str:
    return _SPACES.sub(" ", " ".join(response.xpath(VISIBLE_TEXT).getall())).strip()


class NewsSpider(RedisSpider):
    name = "news"

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, TextResponse):
            return
        fingerprinter = self.crawler.request_fingerprinter
        yield PageItem(
            url=fingerprinter.canonical_url(response.url),
            title=(response.css("title::text").get() or "").strip(),
            text=" ".join(filter(None, (visible_text(response), frames_text(response.meta.get("frames"))))),
            fetched_at=datetime.now(UTC).isoformat(timespec="seconds"),
            status=response.status,
            node=self.node_id,
        )
        if "frames" not in response.meta and self.settings.getbool("IFRAME_FOLLOW_STATIC"):
            for url in static_iframe_urls(response):
                yield response.follow(url, callback=self.parse, meta={"dont_render": True})
        host = urlsplit(response.url).hostname
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href.strip())
            parts = urlsplit(url)
            if parts.scheme in ("http", "https") and parts.hostname == host:
                yield response.follow(url, callback=self.parse)
