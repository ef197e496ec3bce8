"""What the `news` spider stores: one row per page, keyed by canonical URL (docs/architecture.md §8)."""

from __future__ import annotations

import scrapy


class PageItem(scrapy.Item):
    url = scrapy.Field()  # canonical: fragment and tracking params removed, query sorted
    title = scrapy.Field()
    text = scrapy.Field()  # visible text
    fetched_at = scrapy.Field()  # ISO 8601, UTC
    status = scrapy.Field()
    node = scrapy.Field()  # NODE_ID of the worker that fetched it
    content_hash = scrapy.Field()  # digest of `text`, set by RecrawlSpiderMiddleware (docs/recrawl.md)
