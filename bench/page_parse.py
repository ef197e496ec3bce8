"""The `news` spider's parse before article extraction: visible text, same-host links.

The scrapy-redis and plain-Scrapy baselines of bench/e2e.py crawl with it, and our side runs with
EXTRACT_MAIN_TEXT=False and NEAR_DUPLICATES=False (harness.WorkerSpec), so every side does the
same work per page and the figures compare the crawlers, not the extraction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from scrapy.http import Response, TextResponse

from demo.items import PageItem

_SPACES = re.compile(r"\s+")
VISIBLE_TEXT = "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]"


def parse(self: Any, response: Response, **kwargs: Any) -> Iterator[Any]:
    if not isinstance(response, TextResponse):
        return
    fingerprinter = self.crawler.request_fingerprinter
    yield PageItem(
        url=fingerprinter.canonical_url(response.url),
        title=(response.css("title::text").get() or "").strip(),
        text=_SPACES.sub(" ", " ".join(response.xpath(VISIBLE_TEXT).getall())).strip(),
        fetched_at=datetime.now(UTC).isoformat(timespec="seconds"),
        status=response.status,
        node=self.node_id,
    )
    host = urlsplit(response.url).hostname
    for href in response.css("a::attr(href)").getall():
        url = response.urljoin(href.strip())
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname == host:
            yield response.follow(url, callback=self.parse)
